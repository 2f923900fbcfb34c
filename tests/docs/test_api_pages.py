"""Every module of the package has its place in the API reference, which the build makes.

The nav of ``mkdocs.yml`` names only the reference's index page; the build's plugin
(`booktools.plugin.structure`) adds one page per public module of the package, in the order in
which the package's docstring names them, generates the pages that hold nothing but the
module's docstrings (``# attention_book.x`` and ``::: attention_book.x``) and makes the
index's table from the first line of each module's docstring. These tests check what it makes:
every module documented, every page in the nav and in the table, no hand-kept one-liner page.
The figure modules (drawing code for the site) and ``__main__`` modules are not documented one
by one: ``attention_book.figures`` explains them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from repo import ROOT

from booktools.plugin.structure import (
    API_INDEX,
    DOCUMENTED,
    StructureError,
    api_index,
    api_pages,
    docstring,
    documented_modules,
    expand_api_nav,
    load_book,
    named_order,
    nav_pages,
)

DOCS = ROOT / "docs"
API = DOCS / "api"


def package_modules(root: Path = ROOT) -> list[str]:
    """Every module to document (the package's own __init__ is the reference's index)."""
    names = []
    for path in sorted((root / "attention_book").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__" or (parts[1:2] == ("figures",) and parts[-1] != "__init__"):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return [name for name in names if name != "attention_book"]


def test_every_module_is_documented_in_the_reference():
    missing = sorted(set(package_modules()) - documented_modules(ROOT, DOCS))
    assert not missing, (
        f"{missing} are on no API page: a submodule of a package with a page of its own "
        "(docs/api/<package>.md) needs its '::: module' line there"
    )


def test_the_nav_names_only_the_index_and_the_build_adds_every_page():
    book = load_book(ROOT)
    written = [entry.page for entry in book.nav if entry.page.startswith("api/")]
    assert written == [API_INDEX]
    config_nav = [{"Home": "index.md"}, {"API reference": API_INDEX}]
    section = expand_api_nav(config_nav, book.api)[-1]["API reference"]
    assert section[0] == API_INDEX
    pages = [next(iter(item.values())) for item in section[1:]]
    assert pages == [page.uri for page in book.api]
    kept = {f"api/{path.name}" for path in API.glob("*.md")} - {API_INDEX}
    assert kept <= set(pages), f"{sorted(kept - set(pages))} are not in the reference's nav"


def test_the_reference_follows_the_package_docstring():
    titles = [page.title for page in load_book(ROOT).api]
    assert titles[:3] == ["masking", "attention", "nadaraya_watson"]
    # The modules the docstring names end with these two; a module it does not name (a new
    # chapter's, before anyone names it) comes after them, as CONTRIBUTING says.
    text = docstring(ROOT / "attention_book" / "__init__.py")
    named = [title for title in titles if f"`{title}`" in text]
    assert named[-2:] == ["plotting", "figures"]
    assert titles == named_order(text, titles)  # the unnamed ones after them
    # documented on the Transformer's page, not on pages of their own
    assert "transformer_decoder" not in titles and "transformer" in titles


def test_every_page_is_in_the_index_with_its_docstring():
    book = load_book(ROOT)
    table = api_index(book, API_INDEX)
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) == len(book.api)
    for page in book.api:
        name = Path(page.uri).name
        assert f"]({name})" in table, f"{name} is not in the API index"
        assert page.summary, f"{page.module} has no docstring for the API index"


def test_no_kept_api_page_is_a_one_liner():
    """A page that holds only the module's heading and ``:::`` lines is made by the build."""
    for path in sorted(API.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        prose = [
            line
            for line in text.splitlines()
            if line.strip()
            and not line.startswith(("# ", "::: ", "    ", "---", "builds:"))
            and "{{ book:" not in line
        ]
        assert prose, f"{path.name} holds no prose: delete it, the build generates it"


def test_generated_pages_document_their_module():
    for page in load_book(ROOT).api:
        if page.content is not None:
            assert DOCUMENTED.findall(page.content) == [page.module]
            assert not (DOCS / page.uri).exists()


def test_a_new_module_gets_a_page_and_a_row(tmp_path):
    shutil.copytree(ROOT / "attention_book", tmp_path / "attention_book")
    shutil.copytree(API, tmp_path / "docs" / "api")
    (tmp_path / "attention_book" / "sparse.py").write_text('"""Sparse attention."""\n')
    pages = {page.title: page for page in api_pages(tmp_path, tmp_path / "docs")}
    assert pages["sparse"].content == "# attention_book.sparse\n\n::: attention_book.sparse\n"
    assert list(pages)[-1] == "sparse"  # not named in the package's docstring: last
    assert "attention_book.sparse" in documented_modules(tmp_path, tmp_path / "docs")
    assert "attention_book.sparse" not in documented_modules(ROOT, DOCS)
    assert "attention_book.store" in package_modules(tmp_path)
    assert "attention_book.figures.vit" not in package_modules(tmp_path)


def test_a_nav_that_lists_api_pages_by_hand_is_refused():
    nav = [{"API reference": [API_INDEX, {"masking": "api/masking.md"}]}]
    with pytest.raises(StructureError, match="name only the reference's index"):
        expand_api_nav(nav, [])
    assert [entry.page for entry in nav_pages(nav)] == [API_INDEX, "api/masking.md"]


def test_the_experiments_page_lists_every_experiment_module():
    book = load_book(ROOT)
    page = (API / "experiments.md").read_text(encoding="utf-8")
    assert "{{ book:experiment-modules }}" in page
    on_disk = {
        f"attention_book.experiments.{path.stem}"
        for path in (ROOT / "attention_book" / "experiments").glob("*.py")
        if not path.stem.startswith("_")
    }
    assert set(book.experiment_modules) == on_disk
    assert re.findall(r"`(attention_book\.experiments\.\w+)`", page) == []  # none by hand
