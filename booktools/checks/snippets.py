"""The snippet runner: failure reports for the book's code blocks that point at the page line.

pytest-codeblocks runs every runnable block of ``docs/`` and ``README.md``
(``pytest --codeblocks``), but when a block fails it reports only the exception's message: an
``assert`` without a message prints nothing, and an expected-output mismatch prints both
outputs in full. This plugin runs each block the same way (same globals, same captured
standard output, same comparison) and reports instead:

- the exception's type and message, and the page line where it was raised: the line of the
  block (continuations included) mapped back to the Markdown file;
- for a failing ``assert``, the assertion and the values it compared (pytest's own assertion
  rewriting, as in a test file);
- what the block printed before it failed;
- for an expected-output mismatch, a unified diff of the expected and the printed output, with
  page line numbers.

Each Python block runs in a forked child of the test process (`run_standalone`), so that it
starts from the state a fresh session has, as it does when a reader copies it alone: a block
that silently needs what an earlier block of the page did fails here too.

With ``--update-expected`` (``make expected PAGE=...``), a block whose printed output differs
from its expected output does not fail: the page's expected-output fence is rewritten with what
the block printed, when the run ends (`rewrite_expected`), and the run says which blocks it
rewrote. Read the diff (``git diff``) and the prose around it before committing.

It replaces pytest-codeblocks' items by subclasses that change only how a Python block runs
and reports; collection, marks and shell blocks are pytest-codeblocks' own. The page lines are
read with the book's one Markdown reader (`booktools.markdown`). The repository's
``conftest.py`` loads this plugin (``pytest_plugins``), so ``pytest --codeblocks docs/`` uses it.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import json
import linecache
import os
import re
import sys
import traceback
from pathlib import Path

import pytest

from booktools.markdown import PRINTED, PRINTED_WIDTH, fences, imported_packages

try:
    from pytest_codeblocks.main import stdout_io
    from pytest_codeblocks.plugin import MarkdownFile, TestBlock
except ImportError:  # pragma: no cover - the plugin is pinned in requirements.txt
    MarkdownFile = TestBlock = None


#: What the book's blocks import that takes seconds: imported once in the test process, before
#: any block forks, when some block of the run imports one of them.
PRELOAD = ("numpy", "torch", "matplotlib.pyplot", "attention_book")


class CodeBlockError(Exception):
    """A code block failed; the argument is the whole report."""


def block_page_lines(page: Path, fence_line: int, num_code_lines: int) -> list[int]:
    """The page line of every line of a block's code, continuations included.

    pytest-codeblocks joins a block and the blocks marked ``<!--pytest-codeblocks:cont-->``
    after it into one program; this maps each line of that program back to the page.

    Args:
        page: The Markdown file.
        fence_line: Line number (1-based) of the block's opening fence.
        num_code_lines: Number of lines of the joined code.

    Returns:
        One page line number per code line.
    """
    found = fences(page.read_text(encoding="utf-8"))
    first = next((k for k, fence in enumerate(found) if fence.line == fence_line), None)
    chain = found[first : first + 1] if first is not None else []
    for fence in found[first + 1 :] if chain else []:
        if fence.is_output:
            continue  # the expected output of the block, before a continuation of it
        if not fence.continues:
            break
        chain.append(fence)
    numbers = [fence.line + 1 + k for fence in chain for k in range(len(fence.body))]
    numbers += [numbers[-1] if numbers else fence_line] * (num_code_lines - len(numbers))
    return numbers[:num_code_lines]


def compile_block(code: str, filename: str):
    """Compile a block with pytest's assertion rewriting, so a failing assert explains itself."""
    from _pytest.assertion.rewrite import rewrite_asserts

    tree = ast.parse(code, filename=filename)
    rewrite_asserts(tree, code.encode())
    return compile(tree, filename, "exec")


def failure_report(page: str, page_lines: list[int], filename: str, error: BaseException) -> str:
    """Where a block failed, in page lines, and why."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
    message = str(error).strip()
    if isinstance(error, AssertionError) and message:
        message = "\n".join(line for line in message.splitlines() if line.strip())
    if frames:
        line = page_lines[frames[-1].lineno - 1]
        where = f"{page}:{line}"
        source = frames[-1].line or ""
    elif isinstance(error, SyntaxError) and error.lineno:
        line = page_lines[min(error.lineno, len(page_lines)) - 1]
        where, source = f"{page}:{line}", (error.text or "").strip()
    else:
        where, source = page, ""
    report = [f"{type(error).__name__} at {where}"]
    if source:
        report.append(f"    {source.strip()}")
    if message:
        report.append(message)
    stack = traceback.extract_tb(error.__traceback__)
    last_block = max((k for k, f in enumerate(stack) if f.filename == filename), default=None)
    if last_block is not None and last_block + 1 < len(stack):  # raised in code the block called
        last = stack[-1]
        report.append(f"raised in {last.filename}:{last.lineno} ({last.name}): {last.line}")
    return "\n".join(report)


def output_diff(expected: str, output: str, first_line: int) -> str:
    """A unified diff of the expected output (as on the page) and what the block printed."""
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True),
        output.splitlines(keepends=True),
        fromfile=f"expected output (page line {first_line})",
        tofile="printed by the block",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)


def expected_output_line(page: Path, last_code_line: int) -> int:
    """Page line of the first line of the expected-output fence after a block."""
    outputs = [f for f in fences(page.read_text(encoding="utf-8")) if f.is_output]
    return next((f.line + 1 for f in outputs if f.line > last_code_line), last_code_line)


def marked_printed(page: Path, last_code_line: int) -> bool:
    """Whether the block whose code ends at this page line has ``<!--book:printed-->`` after it.

    Args:
        page: The Markdown file.
        last_code_line: The page line (1-based) of the block's last line of code.

    Returns:
        True if the line after its closing fence is the mark.
    """
    lines = page.read_text(encoding="utf-8").split("\n")
    mark = last_code_line + 1  # 0-based: the closing fence is at last_code_line
    return mark < len(lines) and PRINTED.match(lines[mark]) is not None


def wide_line_report(output: str, where: str) -> str | None:
    """A report if a shown output has a line wider than `PRINTED_WIDTH`, else None."""
    wide = max(output.split("\n"), key=len)
    if len(wide) <= PRINTED_WIDTH:
        return None
    return (
        f"the block at {where} printed a line of {len(wide)} characters, over the "
        f"{PRINTED_WIDTH} a code block shows without scrolling: print less per line "
        f"({wide[:60]!r}...)"
    )


def rewrite_expected(page: Path, updates: dict[int, str]) -> list[int]:
    """Write new expected outputs into a page: the fence after each given block.

    Args:
        page: The Markdown file.
        updates: ``{last code line of a block (1-based): what it printed}``: the first
            expected-output fence after that line gets the output, indented like the fence.

    Returns:
        The page lines of the fences rewritten, in the page's order (as they were before).
    """
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    outputs = [fence for fence in fences(text) if fence.is_output]
    targets = {}
    for last, output in updates.items():
        fence = next((f for f in outputs if f.line > last), None)
        if fence is not None:
            targets[fence.line] = (fence, output)
    for line in sorted(targets, reverse=True):  # from the bottom: earlier lines do not move
        fence, output = targets[line]
        body = [fence.indent + row for row in output.rstrip("\n").split("\n")]
        lines[fence.line : fence.end - 1] = body  # between the opening and the closing fence
    page.write_text("\n".join(lines), encoding="utf-8")
    return sorted(targets)


#: The expected outputs to rewrite at the end of a ``--update-expected`` run, by page.
UPDATES: dict[Path, dict[int, str]] = {}


def run_code(code: str, filename: str, page: str, page_lines: list[int]) -> tuple[str | None, str]:
    """Run a block's code with fresh globals; return (failure report or None, what it printed)."""
    with stdout_io() as printed:
        try:
            exec(compile_block(code, filename), {"__MODULE__": "__main__"})
        except Exception as error:
            return failure_report(page, page_lines, filename, error), printed.getvalue()
    return None, printed.getvalue()


def run_standalone(
    code: str, filename: str, page: str, page_lines: list[int]
) -> tuple[str | None, str]:
    """`run_code` in a forked child process: the block starts from a fresh interpreter's state.

    A reader copies one block into a fresh Python session, so a block must not lean on what an
    earlier block of the page did in this process (a seed set, an environment variable, a
    module attribute, a cache filled). The child is a copy of this process as it was before
    any block ran (the heavy imports already done, nothing computed), and it is thrown away
    after the block. Where ``os.fork`` does not exist, the block runs in this process.
    """
    if not hasattr(os, "fork"):
        return run_code(code, filename, page, page_lines)
    reader, writer = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the child: run the block, send back the result, leave without cleanup
        os.close(reader)
        try:
            result = run_code(code, filename, page, page_lines)
        except BaseException as error:  # SystemExit, KeyboardInterrupt: still report
            result = (f"{type(error).__name__} at {page}: {error}", "")
        with os.fdopen(writer, "w", encoding="utf-8") as channel:
            json.dump(result, channel)
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, encoding="utf-8") as channel:
        received = channel.read()
    _, status = os.waitpid(pid, 0)
    if not received:
        return f"the block's process died ({status_text(status)}) at {page}", ""
    report, output = json.loads(received)
    return report, output


def status_text(status: int) -> str:
    """How a child process ended, in words."""
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


if TestBlock is not None:

    class BookBlock(TestBlock):
        """A pytest-codeblocks item whose Python blocks report failures by page line."""

        def runtest(self):
            """Run the block; raise `CodeBlockError` with a report if it fails."""
            block = self.obj
            if block.syntax != "python":
                return super().runtest()
            if block.importorskip is not None:
                pytest.importorskip(block.importorskip)
            page = Path(self.path)
            shown = page.relative_to(Path.cwd()) if page.is_relative_to(Path.cwd()) else page
            page_lines = block_page_lines(page, block.lineno, len(block.code.splitlines()))
            filename = f"<{shown} block at line {block.lineno}>"
            linecache.cache[filename] = (
                len(block.code),
                None,
                block.code.splitlines(keepends=True),
                filename,
            )
            report, output = run_standalone(block.code, filename, str(shown), page_lines)
            if report is not None:
                if output:
                    report += "\nprinted before the failure:\n" + output.rstrip("\n")
                raise CodeBlockError(report)
            expected = block.expected_output
            last = page_lines[-1] if page_lines else block.lineno
            if expected is not None or marked_printed(page, last):  # the reader sees it
                wide = wide_line_report(output, f"{shown}:{block.lineno}")
                if wide is not None:
                    raise CodeBlockError(wide)
            if expected is None:
                return None
            if block.expected_output_ignore_whitespace:
                same = re.sub(r"\s+", "", expected) == re.sub(r"\s+", "", output)
            else:
                same = expected == output
            if not same and self.config.getoption("update_expected", False):
                UPDATES.setdefault(page, {})[last] = output
                return None
            if not same:
                first = expected_output_line(page, page_lines[-1] if page_lines else block.lineno)
                raise CodeBlockError(
                    f"the output differs from the expected output of the block at "
                    f"{shown}:{block.lineno}:\n" + output_diff(expected, output, first)
                )
            return None

        def repr_failure(self, excinfo):
            """Our report for a block that failed, pytest's for anything else."""
            if isinstance(excinfo.value, CodeBlockError):
                return str(excinfo.value)
            return super().repr_failure(excinfo)

    class BookMarkdownFile(MarkdownFile):
        """pytest-codeblocks' collector, yielding `BookBlock` items."""

        def collect(self):
            """The blocks of the page, as `BookBlock` items with their marks."""
            for item in super().collect():
                block = BookBlock.from_parent(parent=self, name=item.name)
                block.obj = item.obj
                for mark in item.obj.marks:  # as pytest-codeblocks adds them
                    block.add_marker(eval(mark, {"sys": sys, "pytest": pytest}))
                yield block

    def pytest_collection_modifyitems(session, config, items):
        """Import `PRELOAD` once, before any block forks, if some block imports one of them.

        Each block then starts from a fork that has them (a second each, not seconds); a run
        whose blocks import none of them (a small page) does not pay for them.
        """
        blocks = [item.obj for item in items if isinstance(item, BookBlock)]
        imported = set().union(*(imported_packages(b.code) for b in blocks if b.syntax == "python"))
        if imported & {name.split(".")[0] for name in PRELOAD}:
            for name in PRELOAD:
                with contextlib.suppress(ImportError):  # its blocks will say what is missing
                    __import__(name)

    def pytest_addoption(parser):
        """``--update-expected``: rewrite expected outputs that differ, instead of failing."""
        parser.addoption(
            "--update-expected",
            action="store_true",
            dest="update_expected",
            help="rewrite a block's expected output with what it printed, instead of failing",
        )

    def pytest_sessionfinish(session):
        """Write the expected outputs that a ``--update-expected`` run collected."""
        for page, updates in sorted(UPDATES.items()):
            rewritten = rewrite_expected(page, updates)
            lines = ", ".join(str(line) for line in rewritten)
            print(f"\nrewrote the expected output of {page} at lines {lines}")
        UPDATES.clear()

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(file_path, parent):
        """Swap pytest-codeblocks' Markdown collector for `BookMarkdownFile`."""
        collectors = yield
        swapped = []
        for collector in collectors or []:
            if type(collector) is MarkdownFile:
                collector = BookMarkdownFile.from_parent(parent, path=file_path)
            swapped.append(collector)
        return swapped
