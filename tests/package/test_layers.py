"""The package's layers form a one-way graph, and internal imports name where a name lives.

From the bottom up:

0. leaves that import nothing of the package: the result store (`store`), the shared input
   checks (`validation`), timing, the tensor-memory counter and the plotting helpers;
1. the data and the training loop (`data.*`, `training.*`);
2. the models: every other module at the top (masks, attention, seq2seq, the Transformer, ViT,
   GPT, FlashAttention, ...) and the package's own ``__init__``;
3. the experiments (`experiments.*`), which train and measure the models;
4. the figures (`figures.*`), which draw what the experiments computed.

A module may import modules of its own layer or below, never above; and no module may import,
directly or through others, a module that imports it (no cycle), lazy imports inside functions
included. Inside the package, ``from attention_book.x import name`` names the module that
defines ``name``, not one that only re-exports it; outside it (the tests, the benchmarks, the
examples, the docs' scripts and the pages' ``python`` blocks) it names that module or a package's
``__init__``, which gathers its submodules' names for readers. The checks read the source
(nothing is imported), and the last tests show each of them failing on a broken copy.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from repo import ROOT

from booktools.markdown import fences

PACKAGE = "attention_book"

LEAVES = {"store", "validation", "timing", "memory", "plotting"}
LAYER_NAMES = ("leaves", "data and training", "models", "experiments", "figures")


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer(name: str) -> int:
    """The layer of a module of the package (see the module docstring)."""
    parts = name.split(".")
    if len(parts) == 1:
        return 2  # the package's __init__ re-exports the models
    if parts[1] in LEAVES:
        return 0
    return {"data": 1, "training": 1, "experiments": 3, "figures": 4}.get(parts[1], 2)


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, str | None]]:
    """The package modules that a module imports: (module, line, imported name or None).

    ``from a.b import c`` imports the module ``a.b.c`` if there is one, else the name ``c`` of
    ``a.b``; relative imports are resolved. Imports inside functions count.
    """
    found = []
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, None) for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.append((f"{base}.{alias.name}", node.lineno, None))
                elif base in known:
                    found.append((base, node.lineno, alias.name))
    return [entry for entry in found if entry[0] != name]


def layer_violations(root: Path) -> list[str]:
    """Each import of a module from a higher layer."""
    known = modules(root)
    problems = []
    for name, path in known.items():
        for target, line, _ in imports(name, path, known):
            if layer(target) > layer(name):
                problems.append(
                    f"{path.relative_to(root)}:{line}: {name} ({LAYER_NAMES[layer(name)]}) "
                    f"imports {target} ({LAYER_NAMES[layer(target)]}), a higher layer"
                )
    return problems


def cycles(root: Path) -> list[str]:
    """Each import cycle among the package's modules, as ``a -> b -> a``."""
    known = modules(root)
    graph = {name: sorted({t for t, _, _ in imports(name, path, known)})
             for name, path in known.items()}  # fmt: skip
    found, state = [], {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for target in graph[name]:
            if state.get(target) == "open":
                cycle = [*stack[stack.index(target) :], target]
                found.append(" -> ".join(cycle))
            elif target not in state:
                visit(target, [*stack, target])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])
    return found


def defined_names(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def re_export_imports(root: Path) -> list[str]:
    """Each internal ``from x import name`` where `x` does not define `name` itself.

    A package's ``__init__`` may gather its submodules' names for readers; the package's own
    modules import each name from where it is defined.
    """
    known = modules(root)
    problems = []
    for name, path in known.items():
        if path.name == "__init__.py":
            continue  # an __init__ gathers names for readers: that is what it is for
        for target, line, imported in imports(name, path, known):
            if imported is not None and imported not in defined_names(known[target]):
                problems.append(
                    f"{path.relative_to(root)}:{line}: imports {imported} from {target}, "
                    "which only re-exports it: import it from the module that defines it"
                )
    return problems


def outside_sources(root: Path) -> Iterator[tuple[str, str]]:
    """(where, Python source) of the code outside the package that imports from it.

    The tests, the benchmarks, the examples and the docs' scripts, file by file, and each
    ``python`` block of the pages under ``docs/`` and of ``README.md``, named ``page.md~line``.
    """
    for folder in ("tests", "benchmarks", "examples", "docs"):
        for path in sorted((root / folder).rglob("*.py")):
            yield path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
    pages = [*sorted((root / "docs").rglob("*.md")), root / "README.md"]
    for page in (p for p in pages if p.is_file()):
        for fence in fences(page.read_text(encoding="utf-8")):
            if fence.info == "python":
                yield f"{page.relative_to(root).as_posix()}~{fence.line}", "\n".join(fence.body)


def outside_re_export_imports(root: Path) -> list[str]:
    """Each ``from attention_book.x import name`` outside the package where `x` is a module
    (not a package's ``__init__``) that does not define `name`."""
    known = modules(root)
    problems = []
    for where, source in outside_sources(root):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # not Python this check can read; the snippet runner reports it
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module in known):
                continue
            path = known[node.module]
            if path.name == "__init__.py":
                continue
            for alias in node.names:
                if f"{node.module}.{alias.name}" not in known and (
                    alias.name not in defined_names(path)
                ):
                    problems.append(
                        f"{where}:{node.lineno}: imports {alias.name} from {node.module}, "
                        "which does not define it: import it from the module that does"
                    )
    return problems


def test_every_import_goes_down_the_layers():
    assert layer_violations(ROOT) == []


def test_no_module_imports_itself_through_others():
    assert cycles(ROOT) == []


def test_internal_imports_name_the_module_that_defines_the_name():
    assert re_export_imports(ROOT) == []


def test_code_outside_the_package_imports_each_name_from_where_it_is_defined():
    assert outside_re_export_imports(ROOT) == []


def test_the_layers_are_as_documented():
    assert layer("attention_book.store") == 0
    assert layer("attention_book.data.corpus") == layer("attention_book.training.loop") == 1
    assert layer("attention_book.multihead") == layer("attention_book.flash.kernels") == 2
    assert layer("attention_book.experiments.vit") == 3
    assert layer("attention_book.figures.vit") == 4
    assert {layer(name) for name in modules(ROOT)} == {0, 1, 2, 3, 4}


# --- shown failing on a broken copy ----------------------------------------------------------


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(ROOT / PACKAGE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_an_upward_import_fails(copy: Path, tmp_path: Path):
    root = tmp_path / "up"
    shutil.copytree(copy, root)
    _append(
        root / PACKAGE / "store.py", "\n\ndef f():\n    from attention_book.data import corpus\n"
    )
    (problem,) = layer_violations(root)
    assert "attention_book/store.py" in problem
    assert "attention_book.store (leaves) imports attention_book.data.corpus" in problem


def test_a_cycle_fails(copy: Path, tmp_path: Path):
    root = tmp_path / "cycle"
    shutil.copytree(copy, root)
    _append(root / PACKAGE / "validation.py", "\nfrom attention_book import timing\n")
    _append(root / PACKAGE / "timing.py", "\nfrom attention_book import validation\n")
    (cycle,) = cycles(root)
    assert set(cycle.split(" -> ")) == {"attention_book.timing", "attention_book.validation"}


def test_an_import_through_a_re_export_fails(copy: Path, tmp_path: Path):
    root = tmp_path / "re-export"
    shutil.copytree(copy, root)
    _append(root / PACKAGE / "vit.py", "\nfrom attention_book.training import fit\n")
    (problem,) = [p for p in re_export_imports(root) if p.startswith("attention_book/vit.py")]
    assert "imports fit from attention_book.training, which only re-exports it" in problem


def test_an_import_of_a_re_exported_name_in_a_page_fails(copy: Path, tmp_path: Path):
    root = tmp_path / "page"
    shutil.copytree(copy, root)
    _append(root / PACKAGE / "vit.py", "\nfrom attention_book.multihead import split_heads\n")
    (root / "docs").mkdir()
    (root / "docs" / "page.md").write_text(
        "Text.\n\n!!! example\n\n    ```python\n"
        "    from attention_book.training import fit\n"  # a package's __init__: fine
        "    from attention_book.vit import ViT, split_heads\n"
        "    ```\n",
        encoding="utf-8",
    )
    (problem,) = outside_re_export_imports(root)
    assert problem.startswith("docs/page.md~5:2: imports split_heads from attention_book.vit")
