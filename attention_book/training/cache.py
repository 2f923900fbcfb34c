"""Hashes of the package's own source: the code a computed result or a figure depends on.

`package_source_hash` hashes the source of the package modules that a module runs
(`imported_modules`: the module and what it imports, transitively), the drawing code
(`DRAWING_CODE`) left out unless asked for; the site build keys each figure by it, so that a
figure is drawn again when its code changes. The book's experiments key their results by what
they declare instead (`declared_key` of `attention_book.store`: a frozen configuration, a
``VERSION``, digests of their inputs and the library versions), so that a refactor retrains
nothing; the store's functions (`cached`, `cache_dir`, ...) are imported from there.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

__all__ = ["DRAWING_CODE", "imported_modules", "package_source_hash"]

#: Parts of the package (relative to its directory) that only draw: editing them never changes
#: a computed result, so `package_source_hash` leaves them out.
DRAWING_CODE = ("figures", "plotting.py")


def imported_modules(module: str, *, drawing_code: bool = False) -> list[str]:
    """The package's modules that `module` runs: itself and what it imports, transitively.

    Every ``import`` statement of the module's source is read (those inside functions too, so
    a lazy import counts), without running anything, and the modules of this package that they
    name are followed in turn. A subpackage's ``__init__`` counts when a module imports from
    it; the top-level ``attention_book/__init__.py``, which only re-exports, does not. The
    drawing code (`DRAWING_CODE`) is left out, since it never changes a computed result,
    unless `drawing_code` is set: what a figure depends on includes how it is drawn.

    Args:
        module: A module of this package, e.g. ``"attention_book.experiments.bahdanau"``.
        drawing_code: Follow the drawing code too (for a figure's key).

    Returns:
        The dotted names, sorted.

    Raises:
        ValueError: If `module` is not a module of this package.
    """
    root = Path(__file__).resolve().parents[1]
    if _module_file(root, module) is None:
        raise ValueError(f"module must be a module of {root.name}, got {module!r}")
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in seen or path is None or (not drawing_code and _is_drawing_code(root, path)):
            continue
        seen.add(name)
        todo += _imported_names(name, path)
    return sorted(seen)


def _module_file(root: Path, name: str) -> Path | None:
    """The source file of module `name` of the package at `root`, or None."""
    parts = name.split(".")
    if parts[0] != root.name or name == root.name:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_drawing_code(root: Path, path: Path) -> bool:
    return path.relative_to(root).parts[0] in DRAWING_CODE


def _imported_names(name: str, path: Path) -> list[str]:
    """Module names that the source at `path` (module `name`) imports, ours or not."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import: resolve it against this module's package
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # submodules, if any
    return names


@functools.cache
def package_source_hash(module: str | None = None, *, drawing_code: bool = False) -> str:
    """A short hash of the package's source that a result can depend on.

    With `module`, the files of `imported_modules(module)`: an edit to any code the module
    runs (its own, a mask it calls, the training loop, a data loader) gives a new hash, and an
    edit elsewhere (another chapter's model, the drawing code) does not. Without it, every
    Python file of the package except `DRAWING_CODE`. The hash is taken once per process, so
    it describes the code this process runs even if the files are edited while it runs; a new
    process sees the edit.

    Args:
        module: A module of this package whose imports bound the hash, or None for all.
        drawing_code: With `module`, include the drawing code it imports (the key of a
            figure, which the site build redraws when its drawing code changes).

    Returns:
        16 hex digits.
    """
    root = Path(__file__).resolve().parents[1]
    if module is None:
        paths = [p for p in root.rglob("*.py") if not _is_drawing_code(root, p)]
    else:
        names = imported_modules(module, drawing_code=drawing_code)
        paths = [_module_file(root, name) for name in names]
    hashed = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        source = path.read_bytes()
        hashed.update(f"{path.relative_to(root).as_posix()} {len(source)}\n".encode())
        hashed.update(source)
    return hashed.hexdigest()[:16]
