"""The book's structure made from the nav (`booktools.plugin.structure`): on a small book.

Each list is made from a nav, the pages' front matter and a package written here, and each
way a page can fail to give what a list needs fails the build, naming the page.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from repo import ROOT

from booktools.plugin.structure import (
    StructureError,
    api_pages,
    chapter_map,
    insert_structure,
    learning_path,
    load_book,
    nav_pages,
    notebook_header,
    plan,
    read_book,
)

NAV = [
    {"Home": "index.md"},
    {"Getting started": "start.md"},
    {"Tour": "tour.py"},
    {
        "Part one": [
            {"Intro": "chapters/intro.md"},
            {"Pooling": ["chapters/pool.md", {"Deeper": "chapters/pool-deep.md"}]},
        ]
    },
    {"Reading": "reading.md"},
    {"GitHub": "https://example.org/"},
    {"API reference": "api/index.md"},
]

PAGES = {
    "index.md": "# Home\n\n{{ book:learning-path }}\n\n{{ book:chapter-map }}\n",
    "start.md": "---\npart: Foundations\nbuilds: The set-up\n---\n\n# Start\n",
    "tour.py": "# ---\n# jupyter:\n#   book:\n#     builds: One layer\n#   kernelspec: {}\n# ---\n",
    "chapters/intro.md": (
        "---\nbuilds: The why\nroute: core\nread_first: Python\n---\n\n# Intro\n\n{{ book:plan }}\n"
    ),
    "chapters/pool.md": (
        "---\nbuilds: Pooling\nroute: optional\nread_first: [intro.md]\n"
        "plan: attention pooling.\n---\n\n# Pooling\n"
    ),
    "chapters/pool-deep.md": (
        "---\ndeep_dive: pool.md\nassumes: the core\nbuilds: More pooling\n---\n\n# Deeper\n"
    ),
    "reading.md": "---\nbuilds: Books | papers\n---\n\n# Reading\n",
    "api/index.md": "---\nbuilds: Every module\n---\n\n# API\n\n{{ book:api-index }}\n",
}


def small_book(tmp_path: Path, pages: dict[str, str] = PAGES, nav: list = NAV):
    for page, text in pages.items():
        (tmp_path / "docs" / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "docs" / page).write_text(text, encoding="utf-8")
    package = tmp_path / "attention_book"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package: `zeta`, then `alpha`."""\n')
    (package / "zeta.py").write_text('"""Zeta: the last letter.\n\nMore."""\n')
    (package / "alpha.py").write_text('"""Alpha: the first letter."""\n')
    (package / "beta.py").write_text('"""Beta."""\n')
    (package / "_private.py").write_text("")
    (package / "__main__.py").write_text("")
    (package / "sub" / "__init__.py").write_text('"""A subpackage."""\n')
    return read_book(nav, tmp_path, tmp_path / "docs")


def test_the_nav_is_read_with_parts_and_chapter_sections():
    pages = nav_pages(NAV)
    assert [entry.page for entry in pages][3:6] == [
        "chapters/intro.md",
        "chapters/pool.md",
        "chapters/pool-deep.md",
    ]
    pool, deep = pages[4], pages[5]
    assert (pool.part, pool.section, pool.first, pool.name) == (
        "Part one",
        "Pooling",
        True,
        "Pooling",
    )
    assert (deep.first, deep.name) == (False, "Deeper")
    assert "https://example.org/" not in [entry.page for entry in pages]


def test_the_chapter_map_lists_every_page_under_its_part(tmp_path):
    table = chapter_map(small_book(tmp_path), "index.md")
    assert table.splitlines()[2:] == [
        "| Foundations | [Getting started](start.md) | The set-up |",
        "| | [Tour](tour.py) | One layer |",
        "| Part one | [Intro](chapters/intro.md) | The why |",
        "| | [Pooling](chapters/pool.md) | Pooling |",
        "| | [Deeper](chapters/pool-deep.md) | More pooling |",
        "| Reading | [Reading](reading.md) | Books \\| papers |",
        "| API reference | [API reference](api/index.md) | Every module |",
    ]


def test_the_learning_path_and_the_plan_list_the_core_chapters(tmp_path):
    book = small_book(tmp_path)
    assert learning_path(book, "index.md").splitlines()[2:] == [
        "| 1 | [Intro](chapters/intro.md) | Python | core |",
        "| 2 | [Pooling](chapters/pool.md) | Intro | optional |",
    ]
    assert plan(book, "chapters/intro.md") == "1. [Pooling](pool.md): attention pooling."


def test_markers_are_replaced_where_the_page_puts_them(tmp_path):
    book = small_book(tmp_path)
    out = insert_structure(PAGES["index.md"], "index.md", book)
    assert "{{" not in out and "| 2 | [Pooling](chapters/pool.md)" in out
    with pytest.raises(StructureError, match=r"docs/x.md: unknown list 'nope'"):
        insert_structure("{{ book:nope }}", "x.md", book)
    with pytest.raises(StructureError, match="needs the book's structure"):
        insert_structure("{{ book:plan }}", "x.md", None)
    assert insert_structure("No marker.", "x.md", None) == "No marker."


def test_a_page_without_what_a_list_needs_fails_naming_it(tmp_path):
    pages = dict(PAGES)
    pages["chapters/pool.md"] = "---\nbuilds: Pooling\nread_first: [intro.md]\n---\n\n# P\n"
    book = small_book(tmp_path, pages)
    with pytest.raises(StructureError, match=r"docs/chapters/pool.md: .* must give 'route'"):
        learning_path(book, "index.md")
    with pytest.raises(StructureError, match=r"docs/chapters/pool.md: .* must give 'plan'"):
        plan(book, "chapters/intro.md")


def test_a_chapter_must_read_earlier_chapters_first(tmp_path):
    pages = dict(PAGES)
    pages["chapters/intro.md"] = pages["chapters/intro.md"].replace("Python", "[pool.md]")
    with pytest.raises(StructureError, match=r"read_first names pool.md, which is not"):
        learning_path(small_book(tmp_path, pages), "index.md")
    pages["chapters/intro.md"] = PAGES["chapters/intro.md"].replace("core", "maybe")
    with pytest.raises(StructureError, match=r"route 'maybe' is not one of"):
        learning_path(small_book(tmp_path / "again", pages), "index.md")


def test_api_pages_follow_the_package_docstring_then_the_names(tmp_path):
    book = small_book(tmp_path)
    assert [(page.title, page.summary) for page in book.api] == [
        ("zeta", "Zeta: the last letter."),
        ("alpha", "Alpha: the first letter."),
        ("beta", "Beta."),
        ("sub", "A subpackage."),
    ]
    kept = tmp_path / "docs" / "api" / "alpha.md"
    kept.write_text("# Alpha\n\nProse.\n\n::: attention_book.alpha\n\n::: attention_book.beta\n")
    pages = {page.title: page for page in api_pages(tmp_path, tmp_path / "docs")}
    assert pages["alpha"].content is None  # kept, with its prose
    assert "beta" not in pages  # documented on alpha's page
    assert pages["zeta"].content == "# attention_book.zeta\n\n::: attention_book.zeta\n"


def test_a_notebook_says_what_it_builds_in_its_jupytext_header():
    assert notebook_header(PAGES["tour.py"]) == {"builds": "One layer"}
    assert notebook_header("# %%\nprint(1)\n") == {}


def test_the_book_itself_reads_whole():
    root = ROOT
    book = load_book(root)
    assert book.nav[0].page == "index.md"
    assert book.core_chapters()[0].page == "chapters/introduction.md"
    for maker in (chapter_map, learning_path):
        assert maker(book, "index.md")  # every page gives what the lists need
    assert plan(book, "chapters/introduction.md").startswith("1. [Attention cues]")
