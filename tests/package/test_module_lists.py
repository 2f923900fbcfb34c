"""What a newcomer reads first names everything there is.

- The docstring of ``attention_book/__init__.py`` lists the modules in the order of the book,
  which the API reference follows (`booktools.plugin.structure`); every name it lists exists.
  A new chapter's module need not be listed (six files make a chapter, CONTRIBUTING.md): its
  API page then comes after the listed ones.
- The docstring of ``booktools/__init__.py`` names every module of the build tooling.
- Each figure module is named after the chapter whose figures it draws, as CONTRIBUTING.md
  says ("Add a chapter"): the core page's name with underscores, or its first word
  (``figures/multihead.py`` for ``chapters/multihead-attention.md``), and, for a second module
  of the same chapter, a topic after an underscore (``figures/flash_gpu.py``); ``home`` draws
  the home page's. Each is also shown by a page of that chapter (its core page or a deep dive).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from repo import ROOT

from booktools.plugin.structure import load_book, public_modules

DOCS = ROOT / "docs"
FIGURES = ROOT / "attention_book" / "figures"


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def named(text: str) -> set[str]:
    """The names a docstring writes in backticks."""
    return set(re.findall(r"`+([\w.]+)`+", text))


def unnamed_modules(package: Path) -> list[str]:
    """The modules and subpackages of the package that its docstring does not name."""
    return sorted(set(public_modules(package)) - named(docstring(package / "__init__.py")))


def unnamed_tool_modules(root: Path) -> list[str]:
    """The modules of booktools (every file, in every subpackage) its docstring does not name."""
    tools = root / "booktools"
    modules = set()
    for path in tools.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        modules.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(modules - named(docstring(tools / "__init__.py")) - {"booktools"})


def test_every_name_the_package_docstring_lists_is_a_module_or_a_name_of_the_package():
    import attention_book

    package = ROOT / "attention_book"
    listed = {name for name in named(docstring(package / "__init__.py")) if name.isidentifier()}
    unknown = sorted(
        name for name in listed
        if name not in public_modules(package) and not hasattr(attention_book, name)
    )  # fmt: skip
    assert unknown == [], f"the docstring of attention_book/__init__.py names {unknown}"


def test_the_tooling_docstring_names_every_module():
    missing = unnamed_tool_modules(ROOT)
    assert not missing, f"name {missing} in the docstring of booktools/__init__.py"


def chapter_names(book) -> dict[str, list[str]]:
    """The names a figure module of each chapter may have, by the chapter's core page."""
    names = {}
    for entry in book.core_chapters():
        stem = Path(entry.page).stem.replace("-", "_")
        names[entry.page] = sorted({stem, stem.split("_")[0]})
    return names


def figure_module_chapter(module: str, names: dict[str, list[str]]) -> str | None:
    """The core page of the chapter a figure module is named after, or None."""
    for page, allowed in names.items():
        if any(module == name or module.startswith(f"{name}_") for name in allowed):
            return page
    return None


def figure_pages(module: Path) -> set[str]:
    """The pages that show a figure (or insert a fragment) of a figure module."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    listed = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "FIGURES" for target in node.targets
        ):
            listed = {element.id for element in node.value.elts if isinstance(element, ast.Name)}
    pages = set()
    for path in DOCS.rglob("*.md"):
        text = path.read_text(encoding="utf-8")
        shown = set(re.findall(r"figures/(\w+)\.svg", text))
        shown |= {name.split(".")[0] for name in re.findall(r"\{\{ build:([\w.]+) \}\}", text)}
        if shown & listed:
            pages.add(path.relative_to(DOCS).as_posix())
    return pages


def figure_module_problems() -> list[str]:
    book = load_book(ROOT)
    names = chapter_names(book)
    problems = []
    for path in sorted(FIGURES.glob("*.py")):
        module = path.stem
        if module.startswith("_"):
            continue
        pages = figure_pages(path)
        if module == "home":
            chapter_pages = {"index.md"}
        else:
            core = figure_module_chapter(module, names)
            if core is None:
                problems.append(f"figures/{module}.py is named after no chapter (see CONTRIBUTING)")
                continue
            chapter_pages = {core} | {
                entry.page
                for entry in book.nav
                if book.meta.get(entry.page, {}).get("deep_dive") == Path(core).name
            }
        if not pages & chapter_pages:
            problems.append(f"figures/{module}.py: no page of its chapter shows its figures")
    return problems


def test_figure_modules_are_named_after_their_chapter():
    assert figure_module_problems() == []


def test_the_checks_see_what_is_missing(tmp_path):
    package = tmp_path / "attention_book"
    package.mkdir()
    (package / "__init__.py").write_text('"""The modules: `masking`."""\n')
    (package / "masking.py").write_text("")
    (package / "sparse.py").write_text("")
    (package / "__main__.py").write_text("")
    assert unnamed_modules(package) == ["sparse"]
    tools = tmp_path / "booktools" / "plugin"
    tools.mkdir(parents=True)
    (tmp_path / "booktools" / "__init__.py").write_text('"""`booktools.plugin`."""\n')
    (tools / "__init__.py").write_text("")
    (tools / "events.py").write_text("")
    assert unnamed_tool_modules(tmp_path) == ["booktools.plugin.events"]
    names = {"chapters/multihead-attention.md": ["multihead", "multihead_attention"]}
    assert figure_module_chapter("multihead", names) == "chapters/multihead-attention.md"
    assert figure_module_chapter("multihead_inside", names) == "chapters/multihead-attention.md"
    assert figure_module_chapter("heads", names) is None
