"""Content keys for the figures: a hash of the code that draws them, prose left out.

A figure is cheap to draw again, so the build keys it by what it runs rather than by a version
someone must remember to bump: `code_key` hashes the source of the figure module and of every
module of the package it imports, directly or through others. The source is hashed as Python's
parser reads it (`normalized`): docstrings, comments, blank lines and formatting are left out,
so that editing prose redraws nothing, while any change to a statement, a name or a constant
redraws every figure whose code reaches it.

Trained runs are not keyed this way: a refactor of a shared module (``masking``) would change
the key of 22 of the 23 runs and train the book again (970 CPU-seconds, ten minutes of a
two-core build), where the probe test checks the same refactor in half a minute.
They keep their declared keys (`attention_book.store.declared_key`), kept honest by the
probes; ``benchmarks/honest_results_cost.py`` measures both choices on this repository.

Nothing here imports the package: the modules are found and parsed from their files.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from pathlib import Path

__all__ = ["PACKAGE", "code_key", "module_file", "normalized", "package_root", "reached_modules"]

#: The package whose modules a key follows.
PACKAGE = "attention_book"


def package_root() -> Path:
    """The folder that holds the package Python would import (found, not imported).

    Returns:
        The parent of the ``attention_book`` folder: the repository for an editable install,
        or the folder of a copy that comes first on ``PYTHONPATH``.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ValueError(f"{PACKAGE} cannot be found on this Python's path")
    return Path(spec.origin).resolve().parents[1]


def module_file(module: str, root: Path | None = None) -> Path | None:
    """The source file of a module of the package, or None if `module` names none.

    Args:
        module: A dotted name (``attention_book.masking``, ``attention_book.data``).
        root: The folder that holds the package (`package_root` by default).

    Returns:
        ``<module>.py``, or ``<package>/__init__.py`` for a package.
    """
    root = package_root() if root is None else root
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    path = root.joinpath(*module.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def _without_docstrings(tree: ast.AST) -> ast.AST:
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    for node in ast.walk(tree):
        if not isinstance(node, kinds) or not node.body:
            continue
        first = node.body[0]
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):  # a docstring
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def normalized(source: str) -> str:
    """Python source as its syntax tree, without docstrings, comments or formatting.

    Args:
        source: The text of a module.

    Returns:
        ``ast.dump`` of the tree with every docstring removed and no line numbers: two
        sources that differ only in prose or layout give the same text.

    Raises:
        SyntaxError: If `source` is not valid Python.
    """
    return ast.dump(_without_docstrings(ast.parse(source)), include_attributes=False)


def _imported(module: str, root: Path) -> set[str]:
    """The modules of the package that `module` names in an import statement (any depth)."""
    path = module_file(module, root)
    if path is None:
        raise ValueError(f"{module!r} is not a module of {PACKAGE} under {root}")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, `level` steps up
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from a.b import c` names a.b, and a.b.c where c is a module.
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if module_file(name, root) is not None}
    return found - {module}


def reached_modules(module: str, root: Path | None = None) -> list[str]:
    """`module` and every module of the package it imports, directly or through others.

    Imports inside functions count as well as those at the top: the code a figure may run.

    Args:
        module: A module of the package.
        root: The folder that holds the package (`package_root` by default).

    Returns:
        The dotted names, sorted.

    Raises:
        ValueError: If `module` is not a module of the package.
    """
    root = package_root() if root is None else root
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_imported(name, root))
    return sorted(seen)


@functools.cache
def _normalized_hash(source: str) -> str:
    return hashlib.sha256(normalized(source).encode()).hexdigest()


def code_key(module: str, root: Path | None = None) -> str:
    """A hash of the code `module` runs: its normalized source and that of every module it reaches.

    Args:
        module: A module of the package.
        root: The folder that holds the package (`package_root` by default).

    Returns:
        16 hexadecimal digits; they change when any statement of a reached module changes,
        and not when only its docstrings, comments or layout do.
    """
    root = package_root() if root is None else root
    digest = hashlib.sha256()
    for name in reached_modules(module, root):
        path = module_file(name, root)
        source = path.read_text(encoding="utf-8")
        digest.update(f"{name} {_normalized_hash(source)}\n".encode())
    return digest.hexdigest()[:16]
