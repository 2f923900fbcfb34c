"""The book's one Markdown reader: the fenced code blocks of a page, as the tools see them.

Every tool of the build reads a page's code blocks through this module: the plugin (listings,
first-run notes, notebooks), the snippet runner, the browser check and the docs policy test.
They used to carry a fence regex each, and disagreed at the edges (an indented closing fence, a
longer run of backticks, a fence inside a fold); now there is one, `FENCE`, and a test of the
repository fails if another module compiles a regex that matches a code fence.

A fence opens with three or more backticks (or tildes), indented by anything (a fence inside an
admonition or a list item is indented like its container), followed by an info string
(``python``, ``python title="attention_book/x.py"``, ``text``). It closes at the first later
line that holds only a run of the same character at least as long. Its body is dedented by the
opening fence's indentation, as pytest-codeblocks dedents the code it runs (at most that many
leading spaces are cut from each line). A fence that never closes runs to the end of the page.

The reader also keeps what the pages say *about* a block, in HTML comments just before it
(blank lines may come between them and the fence, prose may not):

- ``<!--pytest.mark.skip(reason="...")-->``, ``<!--pytest.mark.skipif(cond, reason="...")-->``:
  `Fence.marks` and, parsed, `Fence.skip`;
- ``<!--pytest-codeblocks:expected-output-->``: this fence is the expected output of the block
  before it (`Fence.is_output`; that block has `Fence.has_output`);
- ``<!--pytest-codeblocks:cont-->``: this block continues the one before it (`Fence.continues`).

One mark comes *after* a block, on the line that follows its closing fence:
``<!--book:printed-->`` (`PRINTED`), where the build writes what the block printed
(`booktools.plugin.printed`, `printed_chains`).

What a block imports (`imported_packages`) is read here too, once for the tools that ask: the
snippet runner (what to import before the blocks fork) and the "tested with" line of a chapter.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

#: An opening (or closing) fence line: indentation, the run of backticks or tildes, the info.
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})(?P<info>.*)$")

#: A test mark of pytest-codeblocks or pytest, alone on its line: ``<!--pytest.mark.skip(...)-->``.
MARK = re.compile(r"^\s*<!--[-\s]*(?P<body>pytest[-.].*?)[-\s]*-->\s*$")

#: A skip mark with its reason, and the condition of a ``skipif``.
SKIP = re.compile(
    r"^pytest\.mark\.(?:skipif\((?P<condition>.+?),\s*|skip\()"
    r"reason=(?P<quote>[\"'])(?P<reason>.*?)(?P=quote)\)$"
)

#: The line after a block whose output the build writes under it (`booktools.plugin.printed`).
PRINTED = re.compile(r"^(?P<indent>\s*)<!--\s*book:printed\s*-->\s*$")
#: The most characters a line of shown output may have: a longer one scrolls sideways under
#: its block (the browser check fails on that). The docs check holds expected outputs to it, the
#: snippet run what a marked block prints, and the build what it writes under such a block.
PRINTED_WIDTH = 100

OUTPUT_MARK = "pytest-codeblocks:expected-output"
CONTINUATION_MARK = "pytest-codeblocks:cont"


@dataclass(frozen=True)
class Skip:
    """Why a block is not run: always (``condition`` None), or where ``condition`` holds."""

    reason: str
    condition: str | None = None


@dataclass(frozen=True)
class Fence:
    """One fenced code block of a page.

    Attributes:
        line: The page line (1-based) of the opening fence.
        end: The page line of the closing fence (the page's last line if it never closes).
        indent: The opening fence's indentation (inside an admonition or a list item).
        ticks: The run of backticks or tildes that opened it (three or more).
        info: The info string, stripped: ``python``, ``python title="..."``, ``text``, or "".
        body: The lines between the fences, dedented by `indent` as pytest-codeblocks does.
        marks: The bodies of the ``<!--pytest...-->`` comments just before the fence.
        follows: The info string of the fence just before, when no prose comes between the two.
        has_output: Whether the next fence is this block's expected output.
        closed: Whether a closing fence was found.
    """

    line: int
    end: int
    indent: str
    ticks: str
    info: str
    body: tuple[str, ...]
    marks: tuple[str, ...] = ()
    follows: str | None = None
    has_output: bool = False
    closed: bool = True

    @property
    def code(self) -> str:
        """The body as one string (no trailing newline)."""
        return "\n".join(self.body)

    @property
    def language(self) -> str:
        """The first word of the info string (``python``, ``text``), or ""."""
        return self.info.split()[0] if self.info else ""

    @property
    def title(self) -> str | None:
        """The ``title="..."`` of the info string (a listing's file), or None."""
        found = re.search(r'\btitle="(?P<title>[^"]*)"', self.info)
        return found["title"] if found else None

    @property
    def listing(self) -> str | None:
        """The file a listing of source shows: a fence opened ``python title="FILE"``, or None."""
        title = self.title
        return title if title and self.info == f'python title="{title}"' else None

    @property
    def runnable(self) -> bool:
        """Whether this is a runnable Python block: a bare ``python`` fence, not expected output.

        These are the blocks the snippets run, a notebook turns into cells and the site's copy
        buttons must copy as they are.
        """
        return self.info == "python" and not self.is_output

    @property
    def is_output(self) -> bool:
        """Whether this fence is the expected output of the block before it."""
        return any(mark.startswith(OUTPUT_MARK) for mark in self.marks)

    @property
    def continues(self) -> bool:
        """Whether this block continues the block before it (``pytest-codeblocks:cont``)."""
        return CONTINUATION_MARK in self.marks

    @property
    def skip(self) -> Skip | None:
        """The block's skip mark with its reason, or None if it is not skipped with a reason."""
        for mark in self.marks:
            found = SKIP.match(mark)
            if found:
                return Skip(found["reason"], found["condition"])
        return None


def is_mark(line: str) -> bool:
    """Whether a line is a mark for the tools, not for readers of a notebook.

    A ``<!--pytest...-->`` test mark, or the ``<!--book:printed-->`` after a block whose output
    the build writes.
    """
    return MARK.match(line) is not None or PRINTED.match(line) is not None


def _closes(line: str, ticks: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(ticks) and stripped == ticks[0] * len(stripped)


def _dedent(line: str, indent: str) -> str:
    """Cut at most ``len(indent)`` leading whitespace characters, as pytest-codeblocks does."""
    keep = len(line) - len(line.lstrip())
    return line[min(len(indent), keep) :]


def pieces(text: str) -> Iterator[str | Fence]:
    """A page in order: each line outside a fence as a string, each fence as a `Fence`.

    Mark lines (``<!--pytest...-->``) are yielded as lines too, and also recorded on the fence
    they stand before.

    Args:
        text: A Markdown page.

    Yields:
        Lines (without their newline) and fences.
    """
    lines = text.split("\n")
    marks: list[str] = []
    previous: Fence | None = None  # the last fence, until prose comes between it and the next
    pending: Fence | None = None  # the last fence, held until we know if output follows it
    held: list[str] = []  # the lines after `pending`, yielded once it is
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = FENCE.match(line)
        if opening and opening["ticks"][0] == "`" and "`" in opening["info"]:
            opening = None  # inline code at the start of a line, as in ```x```, is no fence
        if not opening:
            mark = MARK.match(line)
            if mark:
                marks.append(mark["body"])
            elif line.strip():
                marks, previous = [], None
            held.append(line)
            i += 1
            continue
        ticks = opening["ticks"]
        j = i + 1
        while j < len(lines) and not _closes(lines[j], ticks):
            j += 1
        closed = j < len(lines)
        fence = Fence(
            line=i + 1,
            end=j + 1 if closed else len(lines),
            indent=opening["indent"],
            ticks=ticks,
            info=opening["info"].strip(),
            body=tuple(_dedent(body, opening["indent"]) for body in lines[i + 1 : j]),
            marks=tuple(marks),
            follows=previous.info if previous else None,
            closed=closed,
        )
        if pending is not None:
            yield replace(pending, has_output=fence.is_output)
        yield from held
        pending, held, previous, marks = fence, [], fence, []
        i = j + 1
    if pending is not None:
        yield pending
    yield from held


def fences(text: str) -> list[Fence]:
    """Every fenced code block of a page, in order.

    Args:
        text: A Markdown page.

    Returns:
        The fences, with their marks and line numbers.
    """
    return [piece for piece in pieces(text) if isinstance(piece, Fence)]


def runnable_blocks(text: str) -> list[str]:
    """The code of each runnable Python block of a page, dedented as the site shows it.

    Args:
        text: A Markdown page.

    Returns:
        The code of every bare ``python`` fence that is not expected output, stripped of
        leading and trailing blank lines.
    """
    return [fence.code.strip("\n") for fence in fences(text) if fence.runnable]


def printed_chains(text: str) -> list[tuple[Fence, list[str]]]:
    """The blocks followed by ``<!--book:printed-->``, each with the code it runs.

    A block that continues the blocks before it (``pytest-codeblocks:cont``) runs after them,
    as pytest-codeblocks runs it.

    Args:
        text: A Markdown page.

    Returns:
        ``(fence, codes)`` for each marked block, in page order: the codes of the blocks it
        continues, then its own.

    Raises:
        ValueError: If a mark does not come right after a runnable block's closing fence,
            naming its line.
    """
    found, chain = [], []
    last: Fence | None = None  # the last piece, if it was a runnable fence
    line = 0  # the page line of the last piece
    for piece in pieces(text):
        if isinstance(piece, Fence):
            if piece.runnable:
                chain = [*chain, piece.code] if piece.continues else [piece.code]
                last = piece
            else:
                last = None
            line = piece.end
            continue
        line += 1
        if PRINTED.match(piece):
            if last is None:
                raise ValueError(
                    f"line {line}: <!--book:printed--> must come right after a runnable "
                    "block's closing fence"
                )
            found.append((last, list(chain)))
        last = None
    return found


def rewrite(text: str, replace_lines: Callable[[Fence, list[str]], list[str] | None]) -> str:
    """A page with the lines of some fences replaced, the rest as it was.

    Args:
        text: A Markdown page.
        replace_lines: Called with each fence and its page lines (opening and closing fence
            included); returns the lines to put in their place, or None to keep them.

    Returns:
        The new page.
    """
    lines = text.split("\n")
    out: list[str] = []
    for piece in pieces(text):
        if isinstance(piece, str):
            out.append(piece)
            continue
        raw = lines[piece.line - 1 : piece.end]
        new = replace_lines(piece, raw)
        out += raw if new is None else new
    return "\n".join(out)


def imported_packages(code: str) -> set[str]:
    """The top-level packages a block imports (``torch`` for ``from torch import nn``).

    A block that does not parse imports nothing here: it fails when it runs, with its report.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names
