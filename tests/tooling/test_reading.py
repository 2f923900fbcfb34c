"""The core path (booktools.plugin.reading): page lengths, reading times, deep dives, summaries.

The build measures every chapter page and fails a core page over the budget; these tests check
the measuring and the failing on made-up pages, and, on the book's own Markdown, that every
deep dive belongs to a chapter of the nav, is linked from its core page and says what it
assumes, and that every core page ends with a short summary before its exercises.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from mkdocs.exceptions import PluginError
from repo import ROOT

from booktools.plugin.reading import (
    CORE_BUDGET,
    PACE,
    deep_dive_note,
    deep_dive_of,
    front_matter,
    length_report,
    measure_page,
    reading_minutes,
    text_length,
)
from booktools.plugin.structure import load_book, page_markdown

DOCS = ROOT / "docs"


def page_html(body: str) -> str:
    return (
        "<html><body><nav>Menu text that is not counted</nav><article>"
        f'<h1 id="t">Title<a class="headerlink" href="#t">¶</a></h1>{body}</article></body></html>'
    )


# ---------------------------------------------------------------------------------------------
# Measuring a page


def test_text_length_counts_the_article_with_spaces_collapsed():
    html = page_html("<p>two  words</p>\n<pre><code>x = 1\n</code></pre>")
    assert text_length(html) == len("Title two words x = 1")
    assert text_length("<html><body><p>no article</p></body></html>") == 0


def test_reading_minutes_rounds_up_to_five():
    assert reading_minutes(0) == 5
    assert reading_minutes(5 * PACE) == 5
    assert reading_minutes(5 * PACE + 1) == 10
    assert reading_minutes(CORE_BUDGET) == 5 * -(-CORE_BUDGET // (5 * PACE))
    with pytest.raises(ValueError, match="characters must be at least 0, got -1"):
        reading_minutes(-1)


def test_measure_page_shows_the_time_under_the_title_and_records_the_length():
    lengths: dict[str, int] = {}
    out = measure_page(page_html("<p>text</p>"), "chapters/x.md", {}, lengths)
    assert lengths == {"chapters/x.md": len("Title text")}
    assert '</h1><p class="book-reading-time" title="10 characters of text' in out
    assert ">About 5 minutes to read</p>" in out
    # The estimate does not count itself when the page is measured again.
    assert text_length(out) == lengths["chapters/x.md"]


def test_a_core_page_over_the_budget_fails_the_build_naming_it():
    long = page_html("<p>" + "x" * CORE_BUDGET + "</p>")
    with pytest.raises(PluginError, match=r"chapters/long\.md: 36,006 characters of text, over"):
        measure_page(long, "chapters/long.md", {}, {})
    # A deep dive may be longer.
    out = measure_page(long, "chapters/long.md", {"deep_dive": "x.md"}, {})
    assert 'title="36,006 characters of text' in out and ">A deep dive: about 40 minutes" in out


def test_length_report_lists_the_longest_first():
    report = length_report({"chapters/a.md": 1_000, "chapters/b.md": 30_000})
    first, second = report.splitlines()
    assert first.startswith("chapters/b.md") and "30,000 characters, about  30 min" in first
    assert second.startswith("chapters/a.md")


# ---------------------------------------------------------------------------------------------
# Deep dives


def test_a_deep_dive_gets_a_note_naming_its_chapter_and_what_it_assumes(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "core.md").write_text("# The Core Chapter\n\ntext\n")
    markdown = "# A Deep Dive\n\nbody\n"
    meta = {"deep_dive": "core.md", "assumes": "the core page."}
    out = deep_dive_note(markdown, meta, "chapters/deep.md", tmp_path)
    assert out.startswith('# A Deep Dive\n\n!!! abstract "A deep dive of The Core Chapter"')
    assert "It assumes the core page. The chapter's [core page](core.md) reads on" in out
    assert deep_dive_note(markdown, {}, "chapters/core.md", tmp_path) == markdown
    with pytest.raises(PluginError, match=r"chapters/deep\.md: a deep dive must say what it"):
        deep_dive_note(markdown, {"deep_dive": "core.md"}, "chapters/deep.md", tmp_path)
    with pytest.raises(PluginError, match=r"deep_dive names gone\.md, which does not exist"):
        deep_dive_note(markdown, {**meta, "deep_dive": "gone.md"}, "chapters/deep.md", tmp_path)


class _NavLoader(yaml.SafeLoader):
    """A YAML loader for mkdocs.yml that ignores its ``!!python/name:`` tags."""


_NavLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def nav_sections() -> list[tuple[str, list[str]]]:
    """Each section of the nav that lists pages: (its title, its pages in order)."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_NavLoader)
    found = []

    def walk(title, items):
        pages = []
        for item in items:
            if isinstance(item, str):
                pages.append(item)
                continue
            ((name, value),) = item.items()
            if isinstance(value, list):
                walk(name, value)
            else:
                pages.append(value)
        found.append((title, pages))

    walk("", config["nav"])
    return found


def chapter_pages() -> list[str]:
    """The chapter pages of the nav in its order, a chapter's deep dives right after its core."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_NavLoader)
    pages: list[str] = []

    def walk(items):
        for item in items:
            value = item if isinstance(item, str) else next(iter(item.values()))
            if isinstance(value, list):
                walk(value)
            else:
                pages.append(value)

    walk(config["nav"])
    return [page for page in pages if page.startswith("chapters/")]


def test_every_deep_dive_is_nested_under_its_chapter_and_linked_from_it():
    problems = []
    for _, pages in nav_sections():
        for page in pages:
            if not page.startswith("chapters/") or (core := deep_dive_of(page, DOCS)) is None:
                continue
            if not front_matter((DOCS / page).read_text(encoding="utf-8")).get("assumes"):
                problems.append(f"{page} does not say what it assumes")
            if core not in pages or pages.index(core) > pages.index(page):
                problems.append(f"{page} must follow its core page {core} in the nav section")
            if deep_dive_of(core, DOCS) is not None:
                problems.append(f"{page}: {core} is a deep dive itself")
            target = Path(page).name
            core_text = (DOCS / core).read_text(encoding="utf-8")
            if not re.search(rf"\]\({re.escape(target)}(#[^)]*)?\)", core_text):
                problems.append(f"{core} never links its deep dive {target}")
    assert problems == []


# ---------------------------------------------------------------------------------------------
# Summaries


def summary_problems(text: str, page: str) -> list[str]:
    """A core page ends with ``## Summary`` (3 to 5 list items), then ``## Exercises``."""
    headings = re.findall(r"^## (.+)$", text, re.M)
    if "Summary" not in headings:
        return [f"{page} has no '## Summary' section"]
    after = headings[headings.index("Summary") + 1 : headings.index("Summary") + 2]
    problems = [] if after == ["Exercises"] else [f"{page}: '## Exercises' must follow the summary"]
    body = re.search(r"^## Summary\n(.*?)(?=^## )", text, re.S | re.M)
    items = re.findall(r"^- ", body[1] if body else "", re.M)
    if not 3 <= len(items) <= 5:
        problems.append(f"{page}: the summary has {len(items)} list items, not 3 to 5")
    return problems


def test_every_core_chapter_page_ends_with_a_summary_and_its_exercises():
    problems = []
    for page in chapter_pages():
        if deep_dive_of(page, DOCS) is None:
            problems += summary_problems((DOCS / page).read_text(encoding="utf-8"), page)
    assert problems == []


def test_the_summary_check_fails_on_what_it_must_reject():
    good = "## Summary\n\n- one\n- two\n- three\n\n## Exercises\n\n1. x\n"
    assert summary_problems(good, "p") == []
    assert summary_problems("## Exercises\n", "p") == ["p has no '## Summary' section"]
    two = good.replace("- three\n", "")
    assert summary_problems(two, "p") == ["p: the summary has 2 list items, not 3 to 5"]
    late = good.replace("## Exercises", "## More\n\n## Exercises")
    assert summary_problems(late, "p") == ["p: '## Exercises' must follow the summary"]


# ---------------------------------------------------------------------------------------------
# The learning path of the home page


def learning_path(text: str) -> list[dict[str, str]]:
    """The rows of the home page's learning path: step, title, page, read_first, route."""
    body = re.search(r"^## A learning path\n(.*?)(?=^## )", text, re.S | re.M)
    rows = []
    for line in (body[1] if body else "").splitlines():
        if not line.startswith("|") or line.startswith(("| Step", "| ---")):
            continue
        step, chapter, first, route = (cell.strip() for cell in line.strip("|").split("|"))
        link = re.fullmatch(r"\[(?P<title>[^\]]+)\]\((?P<page>[^)]+)\)", chapter)
        rows.append(
            {
                "step": step,
                "title": link["title"] if link else chapter,
                "page": link["page"] if link else "",
                "read_first": first,
                "route": route,
            }
        )
    return rows


def learning_path_problems(text: str, core_pages: list[str]) -> list[str]:
    """The path lists every core chapter once, in the nav's order; prerequisites come earlier."""
    rows = learning_path(text)
    problems = []
    if [row["page"] for row in rows] != core_pages:
        problems.append(
            f"the learning path lists {[r['page'] for r in rows]}, the nav's core chapters are "
            f"{core_pages}"
        )
    seen: list[str] = []
    for number, row in enumerate(rows, start=1):
        if row["step"] != str(number):
            problems.append(f"{row['title']}: step {row['step']}, expected {number}")
        if row["route"] not in ("core", "optional"):
            problems.append(f"{row['title']}: route {row['route']!r} is neither core nor optional")
        if seen:  # the first row names what a reader brings, not a chapter
            for needed in (part.strip() for part in row["read_first"].split(",")):
                if needed not in seen:
                    problems.append(f"{row['title']} needs {needed!r}, which is not earlier")
        seen.append(row["title"])
    return problems


def test_the_learning_path_is_the_nav_and_its_prerequisites_come_first():
    """The build makes the path (`booktools.plugin.structure`); this checks what it makes."""
    text = page_markdown(load_book(ROOT), "index.md")
    core = [page for page in chapter_pages() if deep_dive_of(page, DOCS) is None]
    assert learning_path_problems(text, core) == []
    assert sum(row["route"] == "core" for row in learning_path(text)) >= 5


def test_the_learning_path_check_fails_on_what_it_must_reject():
    text = (
        "## A learning path\n\n| Step | Chapter | Read first | Route |\n| --- | --- | --- | --- |\n"
        "| 1 | [A](chapters/a.md) | Python | core |\n"
        "| 3 | [B](chapters/b.md) | C | maybe |\n\n## Next\n"
    )
    assert learning_path_problems(text, ["chapters/a.md", "chapters/b.md"]) == [
        "B: step 3, expected 2",
        "B: route 'maybe' is neither core nor optional",
        "B needs 'C', which is not earlier",
    ]
    assert learning_path_problems(text, ["chapters/b.md"])[0].startswith("the learning path lists")


def test_the_core_route_is_held_to_three_and_a_half_hours():
    """Issue 42: the core route took 4 h 20 min by the pages' own estimates."""
    from booktools.plugin.reading import CORE_ROUTE_MINUTES, check_core_route, core_route_minutes

    assert CORE_ROUTE_MINUTES == 210
    routes = {"chapters/a.md": "core", "chapters/b.md": "optional", "chapters/c.md": "core"}
    lengths = {"chapters/a.md": 29_500, "chapters/b.md": 90_000, "chapters/c.md": 100_000}
    assert core_route_minutes(lengths, routes) == {"chapters/a.md": 30, "chapters/c.md": 100}
    assert check_core_route(lengths, routes).startswith("the core route: 130 minutes to read")
    lengths["chapters/c.md"] = 181_000
    with pytest.raises(PluginError, match=r"the core route takes 215 minutes to read, over its"):
        check_core_route(lengths, routes)
