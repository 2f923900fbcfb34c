"""The search index: what Material's search plugin indexes, and a check of what it weighs.

Every page loads the index on its first load, so it must weigh what it is worth. Measured on
the built site before this module (gzip): 358 kB, of which 174 kB were the API pages (their
source listings 89 kB, then signatures, parameter tables and long docstrings) and 175 kB the
chapters (their code blocks 73 kB). `exclude_code` marks, before the search plugin reads a page,
what the index leaves out with Material's ``data-search-exclude``: every code block (``<pre>``)
of every page, and on the API pages everything of a docstring but its summary (its first
paragraph). The index keeps every page's headings, the chapters' and the other pages' text
with its inline code, and each API object's name and summary (the search finds the object; its
page says the rest). The pages still show everything. Measured after: about 130 kB.

The chapters' split into core pages and deep dives repeats a reference on every page that cites
it; the reference lists (the list under a page's ``## References``) are left out too: 151 kB
before, 142 kB after, with the optimizations chapter split. The prose that cites a work by its
authors and year stays in the index.

With the chapter on attention beyond one device and the deep dives' own prose, the index grew
to 159 kB; tables (of numbers the build measured, mostly, and of comparisons whose words the
prose around them repeats) are left out too: a search for a measured number finds nothing
worth finding. About 7% of the chapters' text was in tables.

The exercises' solutions (the collapsed ``??? success`` admonitions, about 6% of the chapters'
text) are left out as well: a search finds the exercise, and its solution sits under it.

With the deep dives of the listings' issue the index reached 153 kB. What the build writes on
every page (`BOILERPLATE`: a listing's file name and API links, the notebook button, the tested
versions, a deep dive's note, first-run notes, the line under a printed output) and the
figures' captions, whose words the prose repeats, are left out too: about 5 kB compressed.

After the build, `check_search_index` fails the build when the index weighs more than
`max_index_bytes` compressed, or when a paragraph of a chapter is not in it (each paragraph's
first words, as the plugin collected them from the page the search plugin read). The budget
grows with the book: `INDEX_BASE_BYTES` for the API and the other pages, and
`INDEX_BYTES_PER_CHAPTER_PAGE` for each chapter page. With 48 chapter pages the index weighed
144 kB of 180, the chapters' text about 2 kB each compressed: a new chapter page adds less to
the index than to its budget, so the next chapter does not fail the build; a page that indexes
code or tables again does.
"""

from __future__ import annotations

import gzip
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from mkdocs.exceptions import PluginError

#: What the search index may weigh, compressed with gzip (as GitHub Pages serves it), for the
#: API reference and the pages that are not chapters, ...
INDEX_BASE_BYTES = 60_000
#: ... and for each page of ``chapters/``.
INDEX_BYTES_PER_CHAPTER_PAGE = 2_500


def max_index_bytes(chapter_pages: int) -> int:
    """The most the search index may weigh compressed, for a book of this many chapter pages.

    Args:
        chapter_pages: The pages under ``chapters/`` the index holds.

    Returns:
        `INDEX_BASE_BYTES` plus `INDEX_BYTES_PER_CHAPTER_PAGE` for each chapter page.
    """
    return INDEX_BASE_BYTES + INDEX_BYTES_PER_CHAPTER_PAGE * chapter_pages


#: The opening tag of what the index leaves out: code blocks and tables everywhere, and the
#: exercises' solutions (Material's ``success`` admonition, collapsed).
CODE = re.compile(r"<(?:pre|table)(?=[\s>])|<details class=\"success\"")
#: What the build writes on every page, the captions and the math: the opening tag of each. A
#: listing's file name and its line of API links, a chapter's notebook button and tested
#: versions, a deep dive's note of what it assumes, a note that a block trains at its first
#: run, the line under a block's printed output, a figure's or table's caption (an italic
#: paragraph that opens with the figure's name: what it shows is in the prose around it), and
#: the TeX of every formula of the text (``\(\mathbf{W}_q\)`` is not what a reader types).
BOILERPLATE = re.compile(
    r'<span class="filename"|<p class="listing-api"|<div class="admonition abstract"'
    r"|<p(?=><a [^>]*class=\"md-button\"[^>]*download)|<p(?=><em>Tested with )"
    r"|<blockquote(?=>\s*<p><strong>The first run trains\.)"
    r"|<p(?=><em>What this block printed )|<p(?=><em><code>\w+</code>)"
    r'|<(?:span|div) class="arithmatex"'
)
#: In an API page's docstrings, every block but the summary.
DOC_BLOCK = re.compile(r"<(?:p|ul|ol|dl|table|details)(?=[\s>])")
#: A page's list of references: the list right under its ``## References`` heading.
REFERENCES = re.compile(r'<h2 id="references"(?:(?!</h2>).)*</h2>\s*<(?:ul|ol)(?=[\s>])', re.S)
#: Where an API object's docstring begins (mkdocstrings).
DOC_CONTENTS = re.compile(r'(<div class="doc doc-contents[^"]*">)')
EXCLUDE = ' data-search-exclude="code"'

#: How many characters of each paragraph's text must be found in the index.
SAMPLE = 60


def exclude_code(page_html: str, src_uri: str) -> str:
    """Mark what the index leaves out: code, tables, references, docstrings but their summary.

    Args:
        page_html: The page's content, as the search plugin is about to read it.
        src_uri: The page's source (``api/x.md``, ``chapters/x.md``).

    Returns:
        The content, with Material's ``data-search-exclude`` on those elements (the search
        plugin removes the attribute from the page once it has read it).
    """
    marked = CODE.sub(lambda match: match[0] + EXCLUDE, page_html)
    marked = BOILERPLATE.sub(lambda match: match[0] + EXCLUDE, marked)
    marked = REFERENCES.sub(lambda match: match[0] + EXCLUDE, marked)
    if not src_uri.startswith("api/"):
        return marked
    # Before the first docstring: what the page's author wrote, kept. In each docstring: every
    # block marked, then the first plain paragraph (the summary) unmarked again.
    first, *docstrings = DOC_CONTENTS.split(marked)
    pieces = [first]
    for opening, contents in zip(docstrings[::2], docstrings[1::2], strict=True):
        contents = DOC_BLOCK.sub(lambda match: match[0] + EXCLUDE, contents)
        pieces += [opening, contents.replace(f"<p{EXCLUDE}>", "<p>", 1)]
    return "".join(pieces)


class _Paragraphs(HTMLParser):
    """The text of each ``<p>`` of a page, tags removed, but those the index leaves out.

    It reads a page as `exclude_code` marks it: a paragraph inside a marked container (a
    solution, a deep dive's note, a first-run note) or marked itself is not sampled.
    """

    CONTAINERS = ("details", "div", "blockquote")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.skipping = False  # inside a marked paragraph
        self.containers: list[bool] = []  # for each open container: is it left out?
        self.spans: list[bool] = []  # for each open span: is it left out (a formula)?
        self.paragraphs: list[str] = []

    def handle_starttag(self, tag, attrs):
        excluded = "data-search-exclude" in dict(attrs)
        if tag == "span":
            self.spans.append(excluded)
            return
        if tag in self.CONTAINERS:
            self.containers.append(excluded)
        if any(self.containers) or tag != "p":
            return
        self.depth += 1
        if self.depth == 1:
            self.skipping = excluded
            if not excluded:
                self.paragraphs.append("")

    def handle_endtag(self, tag):
        if tag == "span" and self.spans:
            self.spans.pop()
        elif tag in self.CONTAINERS and self.containers:
            self.containers.pop()
        elif tag == "p" and self.depth and not any(self.containers):
            self.depth -= 1

    def handle_data(self, data):
        if self.depth and not self.skipping and not any(self.spans):
            self.paragraphs[-1] += data


def plain(text: str) -> str:
    """Text without tags, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


def paragraph_samples(page_html: str) -> list[str]:
    """The first `SAMPLE` characters of each paragraph of a page, as plain text.

    Args:
        page_html: The page's content (before the search plugin reads it).

    Returns:
        One sample per paragraph of more than a few words.
    """
    parser = _Paragraphs()
    parser.feed(exclude_code(page_html, "chapters/"))
    samples = [" ".join(text.split())[:SAMPLE] for text in parser.paragraphs]
    return [sample for sample in samples if len(sample.split()) >= 4]


def check_search_index(site_dir: Path, samples: dict[str, list[str]]) -> str:
    """Fail when the search index is too heavy or misses a chapter's paragraph.

    Args:
        site_dir: The built site.
        samples: Each chapter's paragraph samples, by its URL (``chapters/x/``).

    Returns:
        A line that says what the index weighs.

    Raises:
        PluginError: If the index weighs more than `max_index_bytes` compressed (with what
            each kind of page holds), or a sample is not in its page's entries (naming both).
    """
    raw = (site_dir / "search" / "search_index.json").read_bytes()
    weight = len(gzip.compress(raw, mtime=0))
    docs = json.loads(raw)["docs"]
    kinds: dict[str, int] = {}
    for entry in docs:
        kind = entry["location"].split("/")[0] if "/" in entry["location"] else "other"
        kinds[kind] = kinds.get(kind, 0) + len(entry["title"]) + len(entry["text"])
    held = ", ".join(f"{kind} {size / 1e3:.0f} kB" for kind, size in sorted(kinds.items()))
    chapters = {e["location"].split("#")[0] for e in docs if e["location"].startswith("chapters/")}
    budget = max_index_bytes(len(chapters))
    if weight > budget:
        raise PluginError(
            f"the search index weighs {weight / 1e3:.0f} kB compressed, over the "
            f"{budget / 1e3:.0f} kB it may with {len(chapters)} chapter pages (uncompressed "
            f"text by page kind: {held}): leave code, tables or repeated text out of it"
        )
    texts: dict[str, str] = {}
    for entry in docs:
        page = entry["location"].split("#")[0]
        texts[page] = texts.get(page, "") + " " + plain(entry["title"] + " " + entry["text"])
    for page, page_samples in sorted(samples.items()):
        for sample in page_samples:
            if " ".join(sample.split()) not in texts.get(page, ""):
                raise PluginError(f"{page}: the search index lacks the paragraph {sample!r}")
    return (
        f"search index: {weight / 1e3:.0f} kB compressed of {budget / 1e3:.0f} kB for "
        f"{len(chapters)} chapter pages ({len(raw) / 1e3:.0f} kB; {held})"
    )


#: How much less an API page weighs in the search than a chapter (Material's per-page
#: ``search: boost``): a reader who types "kv cache" or "vit" wants the chapter first, and the
#: API page of the same name, whose title matches the words exactly, would otherwise win.
API_SEARCH_BOOST = 0.1


def lower_api_pages(src_uri: str, meta: dict) -> None:
    """Give an API page its lower search boost, unless its front matter sets one.

    Args:
        src_uri: The page's path under ``docs/``.
        meta: Its metadata, changed in place (Material's search reads ``search.boost``).
    """
    if src_uri.startswith("api/"):
        meta["search"] = {"boost": API_SEARCH_BOOST, **(meta.get("search") or {})}
