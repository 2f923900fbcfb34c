"""Rules that keep the package readable top to bottom, stated here (the first two are also in
CONTRIBUTING.md, "Rules of the house"; the third in the docstring of ``attention_book``).

- No module state is rebound at run time: no ``global`` statement, no ``globals()``, no
  assignment to an attribute of an imported module.
- No module imports another module's underscore names (``from attention_book.x import _y``, or
  ``x._y`` on an imported ``attention_book`` module): what one module shares with another is
  public, with a docstring.
- ``import attention_book`` loads PyTorch and nothing heavier (no matplotlib, no Triton).
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT

PACKAGE = ROOT / "attention_book"
PACKAGE_FILES = sorted(PACKAGE.rglob("*.py"))
OUR_CODE = PACKAGE_FILES + sorted((ROOT / "tests").rglob("*.py"))
OUR_CODE += sorted((ROOT / "benchmarks").glob("*.py"))
OUR_CODE += sorted((ROOT / "examples").glob("*.py"))
OUR_CODE += sorted((ROOT / "booktools").rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def module_aliases(tree: ast.AST) -> dict[str, str]:
    """Names bound to imported modules: ``import a.b as c`` gives {"c": "a.b"}."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from attention_book import flash` binds a module of ours.
            for alias in node.names:
                if node.module == "attention_book" or node.module.startswith("attention_book."):
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def state_rebinding(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules = module_aliases(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{relative(path)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Global):
            found.append(f"{where}: global {', '.join(node.names)}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "globals":
            found.append(f"{where}: globals()")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in modules
                ):
                    found.append(f"{where}: assigns {target.value.id}.{target.attr}")
    return found


def private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ours = {
        name: module
        for name, module in module_aliases(tree).items()
        if module == "attention_book" or module.startswith("attention_book.")
    }
    found = []
    for node in ast.walk(tree):
        where = f"{relative(path)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attention_book"):
            found += [
                f"{where}: from {node.module} import {a.name}"
                for a in node.names
                if is_private(a.name)
            ]
        elif isinstance(node, ast.Import):
            found += [
                f"{where}: import {a.name}"
                for a in node.names
                if a.name.startswith("attention_book")
                and any(is_private(part) for part in a.name.split("."))
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ours
            and is_private(node.attr)
        ):
            found.append(f"{where}: {node.value.id}.{node.attr}")
    return found


def test_rules_catch_what_they_are_meant_to_catch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import attention_book.flash as flash\n"
        "from attention_book import masking\n"
        "from attention_book.attention import _check\n"
        "def f():\n"
        "    global x\n"
        "    globals().update({})\n"
        "    flash.tl = None\n"
        "    return masking._combined\n"
    )
    assert len(state_rebinding(bad)) == 3
    assert len(private_imports(bad)) == 2


@pytest.mark.parametrize("path", PACKAGE_FILES, ids=relative)
def test_no_module_state_is_rebound_at_run_time(path):
    assert state_rebinding(path) == []


@pytest.mark.parametrize("path", OUR_CODE, ids=relative)
def test_no_underscore_name_is_imported_from_another_module(path):
    assert private_imports(path) == []


def test_import_loads_neither_matplotlib_nor_triton():
    code = (
        "import sys, attention_book\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'triton'})\n"
        "print(heavy)\n"
        "attention_book.show_heatmaps  # the lazy re-export still works\n"
        "print('matplotlib' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "True"]
