"""A core path through the book: how long each chapter page takes to read, and deep dives.

A chapter has a **core** page, which a learner reads in one sitting (the idea, the math, the
implementation, the experiment that carries the chapter's claim, a summary and exercises), and
may have **deep dives**: pages of their own, nested under the chapter in the nav, that hold
what the core can do without. A deep dive says so in its front matter,

```yaml
---
deep_dive: transformer.md
assumes: the core of the Transformer chapter, and its trained model
---
```

naming the core page it belongs to (relative to ``docs/chapters/``) and what it assumes. The
build then puts a note under its title that says both, and under every chapter page's title an
estimate of the time it takes to read (`reading_minutes`, from its characters of text at
`PACE`). A core page longer than `CORE_BUDGET` characters fails the build, naming the page:
what does not fit goes into a deep dive.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.utils.meta import get_data
from selectolax.lexbor import LexborHTMLParser

#: The most characters of text a core chapter page may have (code and math included, as
#: `text_length` counts them): about 40 minutes at `PACE`.
CORE_BUDGET = 36_000

#: The most minutes the core route may take (every core page whose front matter says
#: ``route: core``), by the pages' own estimates (`reading_minutes`): three and a half hours.
CORE_ROUTE_MINUTES = 210

#: A steady reading pace for a page of prose, code and math, in characters of text per minute
#: (about 180 words of five letters and a space).
PACE = 1_000

TITLE_END = re.compile(r"</h1>")


def front_matter(text: str) -> dict:
    """The YAML front matter of a Markdown page (between two ``---`` lines at its top).

    Args:
        text: The page's Markdown.

    Returns:
        Its fields; empty if it has none.
    """
    return get_data(text)[1]


def deep_dive_of(page: str, docs: Path) -> str | None:
    """The core page a chapter page is a deep dive of, or None for a core page.

    Args:
        page: The page, relative to `docs` (``chapters/transformer-studies.md``).
        docs: The docs folder.

    Returns:
        The core page, relative to `docs` (``chapters/transformer.md``), or None.
    """
    core = front_matter((docs / page).read_text(encoding="utf-8")).get("deep_dive")
    return f"chapters/{core}" if core else None


def text_length(html: str) -> int:
    """Characters of text of a built page's article: prose, code and math, spaces collapsed.

    Args:
        html: The page's HTML, as mkdocs writes it.

    Returns:
        How many characters a reader meets in the article (0 if the page has none).
    """
    article = LexborHTMLParser(html).css_first("article")
    if article is None:
        return 0
    for node in article.css(".book-reading-time, .headerlink, script, style"):
        node.decompose()
    return len(" ".join(article.text(separator=" ").split()))


def reading_minutes(characters: int) -> int:
    """Minutes to read a page at `PACE`, rounded up to five (an estimate, not a measurement).

    Args:
        characters: The page's `text_length`.

    Returns:
        A multiple of 5, at least 5.
    """
    if characters < 0:
        raise ValueError(f"characters must be at least 0, got {characters}")
    return max(5, 5 * math.ceil(characters / PACE / 5))


def deep_dive_note(markdown: str, meta: dict, page: str, docs: Path) -> str:
    """Put a deep dive's note under its title: which chapter it belongs to, what it assumes.

    Args:
        markdown: The page's Markdown (front matter already removed by mkdocs).
        meta: The page's front matter.
        page: The page, relative to `docs` (named in errors).
        docs: The docs folder.

    Returns:
        The Markdown with the note, or unchanged for a core page.

    Raises:
        PluginError: If a deep dive does not say what it assumes.
    """
    core = meta.get("deep_dive")
    if not core:
        return markdown
    assumes = str(meta.get("assumes", "")).strip()
    if not assumes:
        raise PluginError(f"{page}: a deep dive must say what it assumes (front matter 'assumes')")
    note = (
        f'!!! abstract "A deep dive of {_title_of(core, page, docs)}"\n\n'
        f"    It assumes {assumes.rstrip('.')}. The chapter's [core page]({core}) reads on its"
        " own; this page goes further.\n"
    )
    lines = markdown.split("\n")
    title = next((k for k, line in enumerate(lines) if line.startswith("# ")), -1)
    lines.insert(title + 1, f"\n{note}")
    return "\n".join(lines)


def _title_of(core: str, page: str, docs: Path) -> str:
    """The title (first ``# `` heading) of the core page a deep dive names."""
    path = docs / Path(page).parent / core
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PluginError(f"{page}: deep_dive names {core}, which does not exist") from None
    match = re.search(r"^# (.+)$", text, re.M)
    return match[1].strip() if match else core


def measure_page(html: str, page: str, meta: dict, lengths: dict[str, int]) -> str:
    """Measure a chapter page, enforce the core budget, and show the reading time.

    Args:
        html: The page's HTML.
        page: The page, relative to ``docs/``.
        meta: The page's front matter.
        lengths: Where the build keeps each chapter page's `text_length` (this one is added).

    Returns:
        The HTML with the estimate under the title.

    Raises:
        PluginError: If a core page (not a deep dive) has more than `CORE_BUDGET` characters,
            naming the page, its length and the budget.
    """
    characters = text_length(html)
    lengths[page] = characters
    deep = bool(meta.get("deep_dive"))
    if not deep and characters > CORE_BUDGET:
        raise PluginError(
            f"{page}: {characters:,} characters of text, over the core budget of "
            f"{CORE_BUDGET:,} (about {reading_minutes(CORE_BUDGET)} minutes): move what the "
            "core can do without into a deep dive (see CONTRIBUTING.md, 'A core and its deep "
            "dives')"
        )
    kind = "A deep dive: about" if deep else "About"
    note = (
        f'<p class="book-reading-time" title="{characters:,} characters of text, at about '
        f'{PACE:,} a minute">{kind} {reading_minutes(characters)} minutes to read</p>'
    )
    return TITLE_END.sub(lambda match: match[0] + note, html, count=1)


def core_route_minutes(lengths: dict[str, int], routes: dict[str, str]) -> dict[str, int]:
    """The reading estimate of each page on the core route.

    Args:
        lengths: `text_length` by page (``chapters/x.md``).
        routes: Each chapter's core page and its route (``core`` or ``optional``).

    Returns:
        Minutes by page, for the pages whose route is ``core``, in `routes`' order.
    """
    return {page: reading_minutes(lengths[page])
            for page, route in routes.items() if route == "core" and page in lengths}  # fmt: skip


def check_core_route(lengths: dict[str, int], routes: dict[str, str]) -> str:
    """Hold the core route to `CORE_ROUTE_MINUTES`.

    Args:
        lengths: `text_length` by page.
        routes: Each chapter's core page and its route.

    Returns:
        A line that says how long the core route takes.

    Raises:
        PluginError: If it takes longer than `CORE_ROUTE_MINUTES`, naming each page's estimate.
    """
    minutes = core_route_minutes(lengths, routes)
    total = sum(minutes.values())
    pages = ", ".join(f"{page} {count} min" for page, count in minutes.items())
    if total > CORE_ROUTE_MINUTES:
        raise PluginError(
            f"the core route takes {total} minutes to read, over its budget of "
            f"{CORE_ROUTE_MINUTES} ({pages}): move what a core page can do without into a "
            "deep dive"
        )
    return f"the core route: {total} minutes to read, of {CORE_ROUTE_MINUTES} ({pages})"


def length_report(lengths: dict[str, int]) -> str:
    """A plain-text table of every chapter page's length and reading time, longest first.

    Args:
        lengths: `text_length` by page.

    Returns:
        One line per page.
    """
    return "\n".join(
        f"{page:45s} {characters:7,d} characters, about {reading_minutes(characters):3d} min"
        for page, characters in sorted(lengths.items(), key=lambda item: -item[1])
    )
