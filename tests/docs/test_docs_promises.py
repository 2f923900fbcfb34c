"""What the book promises is what the book has.

The home page's chapter map, the introduction's plan of the book and the quick tour's last cell
each tell the reader which chapters exist. They drifted once: they named chapters the nav did
not have, and numbered them differently from one another. The map and the plan are now made by
the build from the nav of ``mkdocs.yml`` (`booktools.plugin.structure`: the pages hold only a
``{{ book:... }}`` marker); these tests compare what it makes, and every other promise, with
the nav, so a promise and the book cannot drift apart again:

- a promise is a link to a page, and every linked page is in the nav;
- the chapter map lists every page of the nav, in the nav's order, under the nav's parts;
- the plan of the book lists every chapter after the introduction, in order;
- the home page and the introduction ask the build for the map and the plan, not keep them;
- no page numbers the chapters ("Chapter 4"): the nav's order is the only numbering;
- counts and requirements a page states about the book match the files they describe.

Each checker is a plain function of a text, and the last tests feed each one a text that must
fail, so that none of them can pass by checking nothing.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pytest
import yaml
from repo import ROOT

from booktools.plugin.reading import deep_dive_of
from booktools.plugin.structure import load_book, page_markdown

DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    )
}


# ---------------------------------------------------------------------------------------------
# The nav, and links resolved to the nav's page paths


class _NavLoader(yaml.SafeLoader):
    """A YAML loader for mkdocs.yml that ignores its ``!!python/name:`` tags."""


_NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def nav() -> list[tuple[str | None, str, str]]:
    """The nav of mkdocs.yml as (part, title, page) in order; part is None at the top level."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_NavLoader)
    entries = []

    def walk(items, part):
        for item in items:
            if isinstance(item, str):  # a section's index page, listed without a title
                entries.append((part, item, item))
                continue
            ((title, value),) = item.items()
            if isinstance(value, list):  # a part, or a chapter with deep dives inside a part
                walk(value, part or title)
            else:
                entries.append((part, title, value))

    walk(config["nav"], None)
    return entries


def nav_pages() -> list[str]:
    return [page for _, _, page in nav()]


def chapter_pages() -> list[str]:
    """The chapters' core pages, in the nav's order (deep dives left out)."""
    return [
        page
        for page in nav_pages()
        if page.startswith("chapters/") and deep_dive_of(page, DOCS) is None
    ]


def resolve(target: str, page: str) -> str | None:
    """The docs-relative path a link on `page` points to, or None for an outside link.

    Markdown pages link to ``other.md``; the quick tour, a notebook, links to built URLs such
    as ``../chapters/bahdanau/``, which stand for ``chapters/bahdanau.md``.
    """
    if re.match(r"[a-z]+:", target) or target.startswith("#"):
        return None
    target = target.split("#")[0]
    if page.endswith(".py"):  # a notebook page is served at <name>/
        base = posixpath.dirname(page.removesuffix(".py") + "/")
    else:
        base = posixpath.dirname(page)
    path = posixpath.normpath(posixpath.join(base, target))
    if target.endswith("/"):
        path = path + ".md" if f"{path}.md" in nav_pages() or "." not in path else path
    return path


def linked_pages(text: str, page: str) -> list[str]:
    """The pages `text` (found on `page`) links to, in order, outside links left out."""
    found = [resolve(m["target"], page) for m in LINK.finditer(text)]
    return [path for path in found if path is not None]


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(?P<body>.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section '## {heading}'"
    return match["body"]


def quick_tour_cells() -> list[tuple[str, str]]:
    """The quick tour's cells as (kind, text): kind is "markdown" or "code"."""
    text = (DOCS / "quick-tour.py").read_text(encoding="utf-8")
    cells = []
    for chunk in re.split(r"^# %%", text, flags=re.M)[1:]:
        header, _, body = chunk.partition("\n")
        if "[markdown]" in header:
            lines = [line.removeprefix("#").removeprefix(" ") for line in body.splitlines()]
            cells.append(("markdown", "\n".join(lines)))
        else:
            cells.append(("code", body))
    return cells


# ---------------------------------------------------------------------------------------------
# The checkers: each returns the problems it finds in a text


def links_outside_the_nav(text: str, page: str) -> list[str]:
    """Links to pages of the book that the nav does not list."""
    pages = set(nav_pages())
    return [
        f"{page} links to {path}, which is not in the nav"
        for path in linked_pages(text, page)
        if path.endswith((".md", ".py")) and path not in pages
    ]


def chapter_map_problems(text: str) -> list[str]:
    """The home page's chapter map must be the nav: every page once, in order, under its part."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section(text, "Chapter map").splitlines()
        if line.startswith("|")
    ][2:]  # skip the header and the separator
    problems = []
    listed, parts = [], []
    for row in rows:
        links = linked_pages(row[1], "index.md")
        if len(links) != 1:
            problems.append(f"chapter map row {row} must link exactly one page")
            continue
        listed.append(links[0])
        parts.append(row[0] or (parts[-1] if parts else ""))
    expected = [
        (part, page)
        for part, _, page in nav()
        if page != "index.md" and (not page.startswith("api/") or page == "api/index.md")
    ]
    if listed != [page for _, page in expected]:
        problems.append(f"chapter map lists {listed}, the nav has {[p for _, p in expected]}")
    else:
        for (part, page), shown in zip(expected, parts, strict=True):
            if part is not None and shown != part:
                problems.append(f"{page} is under part {shown!r} in the map, {part!r} in the nav")
    return problems


def plan_problems(text: str) -> list[str]:
    """The introduction's plan: one list item per chapter after the introduction, in order."""
    body = section(text, "The plan of the book")
    items = re.findall(r"^\d+\. (.*(?:\n {3}\S.*)*)", body, re.M)
    problems = []
    for item in items:
        if not LINK.match(item):
            problems.append(f"plan item does not start with a link to its chapter: {item[:60]!r}")
    listed = [linked_pages(item, "chapters/introduction.md")[:1] for item in items]
    listed = [links[0] for links in listed if links]
    chapters = chapter_pages()
    expected = chapters[chapters.index("chapters/introduction.md") + 1 :]
    if listed != expected:
        problems.append(f"the plan lists {listed}, the nav's chapters are {expected}")
    return problems


def quick_tour_promise_problems(cells: list[tuple[str, str]]) -> list[str]:
    """The last cell says where to go next: with links, all to pages of the nav."""
    kind, text = cells[-1]
    if kind != "markdown":
        return ["the quick tour must end with a Markdown cell that points to the chapters"]
    links = linked_pages(text, "quick-tour.py")
    if not links:
        return ["the quick tour's last cell names chapters without linking them"]
    return links_outside_the_nav(text, "quick-tour.py")


def cell_count_problems(cells: list[tuple[str, str]]) -> list[str]:
    """A number of cells that the quick tour states must be the number it has."""
    _, intro = cells[0]
    words = "|".join(NUMBER_WORDS)
    problems = []
    for number, kind in re.findall(rf"\b({words}|\d+) (code |markdown )?cells\b", intro, re.I):
        stated = NUMBER_WORDS.get(number.lower())
        stated = int(number) if stated is None else stated
        wanted = kind.strip() or None
        actual = sum(1 for k, _ in cells if wanted is None or k == wanted)
        if stated != actual:
            problems.append(f"the quick tour says {number} {kind}cells; it has {actual}")
    return problems


def chapter_number_problems(text: str, page: str) -> list[str]:
    """The chapters are not numbered: a page links a chapter instead of saying "Chapter 4"."""
    return [
        f"{page}: {match.group(0)!r}: link the chapter instead of numbering it"
        for match in re.finditer(r"\bChapter \d+\b", text)
    ]


# ---------------------------------------------------------------------------------------------
# The promises of the book


def test_the_nav_lists_pages_that_exist():
    for page in nav_pages():
        assert (DOCS / page).exists(), page


def built(page: str) -> str:
    """A page's Markdown with the lists the build puts in it (the map, the plan)."""
    return page_markdown(load_book(ROOT), page)


def test_chapter_map_is_the_nav():
    assert chapter_map_problems(built("index.md")) == []


def test_plan_of_the_book_is_the_nav():
    assert plan_problems(built("chapters/introduction.md")) == []


@pytest.mark.parametrize(
    "page,markers",
    [
        ("index.md", ["{{ book:learning-path }}", "{{ book:chapter-map }}"]),
        ("chapters/introduction.md", ["{{ book:plan }}"]),
    ],
)
def test_the_lists_of_chapters_are_made_by_the_build(page, markers):
    text = (DOCS / page).read_text(encoding="utf-8")
    for marker in markers:
        assert marker in text, f"{page} must ask the build for its list with {marker}"
    links = [path for path in linked_pages(text, page) if path.startswith("chapters/")]
    assert len(links) < 10, f"{page} keeps a list of chapters by hand: {links}"


def test_quick_tour_ends_with_links_to_chapters_of_the_nav():
    assert quick_tour_promise_problems(quick_tour_cells()) == []


def test_quick_tour_counts_its_cells_right():
    assert cell_count_problems(quick_tour_cells()) == []


PROMISING_PAGES = ["index.md", "getting-started.md", "notation.md", "chapters/introduction.md"]


@pytest.mark.parametrize("page", PROMISING_PAGES)
def test_pages_link_only_pages_of_the_nav(page):
    assert links_outside_the_nav(built(page), page) == []


def book_pages() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), *sorted((DOCS / "chapters").glob("*.md"))]


@pytest.mark.parametrize("path", book_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_no_page_numbers_the_chapters(path):
    text = path.read_text(encoding="utf-8")
    assert chapter_number_problems(text, str(path.relative_to(DOCS))) == []


def skipped_blocks() -> int:
    """Code blocks of the docs that the tests skip (a GPU-only cell, a server, a clone)."""
    marks = re.compile(r"<!--\s*pytest\.mark\.skip(if)?\(")
    return sum(len(marks.findall(p.read_text(encoding="utf-8"))) for p in book_pages())


def test_home_page_does_not_claim_that_every_line_runs():
    text = (DOCS / "index.md").read_text(encoding="utf-8").lower()
    assert skipped_blocks() > 0  # otherwise this test checks nothing
    assert "every line of code" not in text
    assert "skip" in text, "the home page must say that some blocks are skipped, and why"


# What Getting started says a reader needs: every program the Makefile runs outside .venv.
# (name on the page, what the Makefile shows of it)
REQUIREMENTS = [
    ("Python 3.11", "python3.11"),
    ("make", "$(BIN)/"),  # the Makefile itself
    ("Chromium", "chromium"),
]


@pytest.mark.parametrize("name,evidence", REQUIREMENTS, ids=[r[0] for r in REQUIREMENTS])
def test_getting_started_names_what_the_makefile_needs(name, evidence):
    assert evidence in (ROOT / "Makefile").read_text(encoding="utf-8")
    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    first_paragraph = page.split("\n## ")[0]
    assert name in first_paragraph
    assert "nothing else" not in first_paragraph


def reference_label_problems(text: str) -> list[str]:
    """Two references with the same first author and year need labels, 2014a and 2014b, and
    the prose must cite them with those labels."""
    if "\n## References" not in text:
        return []
    body = section(text, "References")
    bullets = [" ".join(b.split()) for b in re.split(r"^- ", body, flags=re.M)[1:]]
    entry = r"(?P<author>[^,]+),.*?\((?P<year>\d{4})(?P<label>[a-z]?)\)"
    entries = [m.groups() for m in map(lambda b: re.match(entry, b), bullets) if m]
    problems = []
    seen: dict[tuple[str, str], list[str]] = {}
    for author, year, label in entries:
        seen.setdefault((author, year), []).append(label)
    for (author, year), labels in seen.items():
        if len(labels) > 1 and ("" in labels or len(set(labels)) < len(labels)):
            problems.append(f"{author} ({year}) is cited {len(labels)} times without labels")
        if len(labels) > 1:
            prose = text.split("\n## References")[0]
            bare = re.findall(rf"{re.escape(author)}[^()\[\]]{{0,40}}?\(?{year}(?![a-z])", prose)
            if bare:
                problems.append(f"the prose cites {author} {year} without a label: {bare[0]!r}")
    return problems


@pytest.mark.parametrize("path", book_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_references_of_the_same_author_and_year_are_labelled(path):
    assert reference_label_problems(path.read_text(encoding="utf-8")) == []


# ---------------------------------------------------------------------------------------------
# Every checker can fail


def test_checkers_flag_broken_promises():
    assert links_outside_the_nav("[The future](chapters/nope.md)", "index.md")
    assert chapter_map_problems("## Chapter map\n\n| Part | Chapter |\n|---|---|\n| A | x |\n")
    two_rows = "| Part | Chapter |\n|---|---|\n| | [B](chapters/bahdanau.md) |\n"
    assert chapter_map_problems("## Chapter map\n\n" + two_rows)
    plan = "## The plan of the book\n\n1. [Cues](attention-cues.md): cues.\n2. Transformers.\n"
    assert plan_problems(plan)
    assert quick_tour_promise_problems([("markdown", "The chapters take this apart.")])
    assert quick_tour_promise_problems([("markdown", "[Next](../chapters/nope/)")])
    cells = [("markdown", "In ten cells we train."), ("code", "x = 1")]
    assert cell_count_problems(cells) == ["the quick tour says ten cells; it has 2"]
    assert chapter_number_problems("Chapter 4 measures it.", "index.md")
    refs = "\n## References\n\n- Cho, K., & B. (2014). One.\n- Cho, K., & C. (2014). Two.\n"
    assert reference_label_problems("Text." + refs)
    labelled = refs.replace("(2014). One", "(2014a). One").replace("(2014). Two", "(2014b). Two")
    assert reference_label_problems("As Cho et al. (2014) showed." + labelled)
    assert reference_label_problems("As Cho et al. (2014b) showed." + labelled) == []


def test_checkers_accept_kept_promises():
    assert links_outside_the_nav("[Bahdanau](chapters/bahdanau.md)", "index.md") == []
    assert quick_tour_promise_problems([("markdown", "[Bahdanau](../chapters/bahdanau/)")]) == []
    cells = [("markdown", "In one code cell we train."), ("code", "x = 1")]
    assert cell_count_problems(cells) == []
    assert resolve("../chapters/bahdanau/", "quick-tour.py") == "chapters/bahdanau.md"
    assert resolve("bahdanau.md#the-math", "chapters/introduction.md") == "chapters/bahdanau.md"
