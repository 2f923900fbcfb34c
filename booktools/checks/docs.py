"""The rules of the pages, checked as the gate's docs check: ``python -m booktools.checks.docs``.

Nine rules, each a function that returns one line per problem (``PAGE:LINE: why``):

- `fence_problems`: no code block may silently escape execution. pytest-codeblocks runs a
  fence only when its info string is exactly ``python``, ``sh`` or ``bash``; every other fence
  must be an include of package source (``python title="attention_book/..."`` whose body is only
  ``--8<--`` lines naming existing sections), the expected output of the block above it (after
  ``<!--pytest-codeblocks:expected-output-->``), or plain ``text`` that does not follow a
  runnable block (output shown there would never be compared with what the block prints). A
  skipped block says why: ``<!--pytest.mark.skip(reason="...")-->``.
- `lint_problems`: every runnable Python block passes ruff's rules for the package (``E``,
  ``F``, ``W``, ``B``, ``UP``; not the line length), one ruff run for all pages.
- `unincluded_sections`: every section marker of the package (``--8<-- [start:NAME]``) is
  shown by some page; a marker no page includes is a listing the book forgot.
- `word_problems`: words of the book's making that no reader knows. The book was written from
  a source document its authors called "the seed"; in a page "seed" must be a random seed,
  which the words around it say ("the same seed", "seed 0", "per seed", ...). Code is not
  prose and is not read.
- `interpreter_problems`: a block that runs a Triton kernel and may run without a GPU sets
  ``TRITON_INTERPRET`` itself, before Triton loads: a reader runs it alone, without the
  variable the gate sets for every block.
- `listing_problems`: on a chapter's core page, a listing of the package's source that the
  reader sees unfolded is at most `LISTING_BUDGET` lines as the build shows it (docstrings cut
  to their summary, `booktools.plugin.listings`): the idea in a listing a reader can retype,
  the checks and fused paths in named helpers, longer code folded (``??? info``) or left to
  the API page.
- `printed_problems`: a block that reads a trained model or a stored experiment (it imports
  from ``attention_book.experiments``) and prints shows what it printed: its expected output,
  or ``<!--book:printed-->`` on the line after it, where the build writes what it printed
  (`booktools.plugin.printed`). A reader should see what the book's model answers.
- `positional_problems`: a block builds the book's classes with at most `MAX_POSITIONAL`
  arguments by position and names the rest (``TransformerEncoder(200, 24, ffn_num_hiddens=48,
  ...)``), so that an example reads itself. The classes keep their d2l signatures: a reader's
  positional call still works, and a page that shows one on purpose says so on its line
  (`D2L_CALL`).
- `width_problems`: no line of a block's expected output is wider than ``PRINTED_WIDTH``
  (100) characters: a wider one scrolls sideways. What a block marked ``<!--book:printed-->``
  prints is known only when it runs: the snippet run holds it to the same width.

``make test`` runs it on every page (and ``README.md``); ``make page`` on one. The tests of
``tests/`` check that each rule can fail and lets through what the book allows.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from booktools import ROOT
from booktools.markdown import PRINTED_WIDTH, fences, pieces, printed_chains

#: The pages the rules read: every Markdown file of ``docs/``, and the README.
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

SNIPPET = re.compile(r'^--8<-- "(?P<path>attention_book/[^":]+\.py)(?::(?P<section>[\w-]+))?"$')
MARKER_START = re.compile(r"--8<-- \[start:(?P<section>[\w-]+)\]")
EXECUTED = {"python", "sh", "bash"}
LINT_RULES = ["--select", "E,F,W,B,UP", "--ignore", "E501"]

#: "seed" or "seed's", not "seeds", "seeded" or "manual_seed".
SEED = re.compile(r"(?<![\w-])seed(?:'s|’s)?(?![\w-])", re.I)
#: A word just before "seed" that makes it a random seed.
RANDOM_BEFORE = {
    "a", "and", "another", "any", "by", "chosen", "different", "each", "every", "first",
    "fixed", "given", "highest", "initial", "its", "last", "lowest", "new", "one", "or",
    "other", "per", "random", "same", "second", "single", "such", "third", "training", "your",
}  # fmt: skip
#: What may follow "seed" to make it a random seed: a number, "= 0", "by seed".
RANDOM_AFTER = re.compile(r"\s*(?:=\s*\d|\d|by seed\b)", re.I)
COMMENT = re.compile(r"<!--.*?-->")
#: The most lines of an unfolded listing on a core page, as the build shows it.
LISTING_BUDGET = 30
#: An admonition's opening line: ``???`` folds its body (``???+`` opens it), ``!!!`` shows it.
ADMONITION = re.compile(r"^(?P<indent>\s*)(?P<kind>\?\?\?\+?|!!!)\s")
#: The most arguments a page's block passes by position to a class of the package.
MAX_POSITIONAL = 2
#: The comment of a call that shows d2l's positional signature on purpose (it still works).
D2L_CALL = "# d2l's positional call"


def _section_exists(path: str, section: str | None) -> bool:
    source = ROOT / path
    if not source.exists():
        return False
    text = source.read_text(encoding="utf-8")
    return section is None or (
        f"--8<-- [start:{section}]" in text and f"--8<-- [end:{section}]" in text
    )


def fence_problems(text: str) -> list[str]:
    """What breaks the fence rule in one Markdown text, as ``line N: why`` messages."""
    found = []
    for fence in fences(text):
        where = f"line {fence.line}: ```{fence.info}"
        if any(m.startswith("pytest-codeblocks:expected-output") for m in fence.marks):
            continue
        for mark in fence.marks:
            if mark.startswith("pytest-codeblocks:skip") or (
                mark.startswith("pytest.mark.skip") and not re.search(r"reason\s*=\s*\S", mark)
            ):
                found.append(f"{where}: a skipped block must state its reason: {mark}")
        if fence.info == "text" and fence.follows in EXECUTED:
            found.append(
                f"{where}: output right after a runnable block is never checked; mark it "
                "<!--pytest-codeblocks:expected-output--> (or put prose between the two)"
            )
            continue
        if fence.info in EXECUTED or fence.info == "text":
            continue
        title = re.fullmatch(r'python title="(?P<path>attention_book/[^"]+\.py)"', fence.info)
        if title:
            includes = [SNIPPET.match(line.strip()) for line in fence.body if line.strip()]
            if not includes or not all(includes):
                found.append(f"{where}: a titled fence may only include package source")
            for include in filter(None, includes):
                if include["path"] != title["path"]:
                    found.append(f"{where}: title names another file than {include['path']}")
                if not _section_exists(include["path"], include["section"]):
                    found.append(f"{where}: no section {include['section']!r} in {include['path']}")
            continue
        found.append(
            f"{where}: pytest-codeblocks would silently not run this block; use a bare "
            "```python, ```bash or ```sh fence, or a titled include of package source"
        )
    return found


def lint_problems(pages: list[Path]) -> list[str]:
    """Ruff's findings in the runnable Python blocks of the pages, one ruff run for all.

    Args:
        pages: Markdown files.

    Returns:
        ``PAGE:LINE: CODE message`` per finding, LINE the block's first line in the page.
    """
    from pytest_codeblocks.main import extract_from_file

    with tempfile.TemporaryDirectory() as scratch:
        where = {}
        for number, page in enumerate(pages):
            for block in extract_from_file(page):
                if block.syntax == "python":
                    path = Path(scratch) / f"page{number}_line{block.lineno}.py"
                    path.write_text(block.code, encoding="utf-8")
                    where[path.name] = f"{_name(page)}:{block.lineno}"
        if not where:
            return []
        command = [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated"]
        command += ["--output-format", "concise", *LINT_RULES, scratch]
        result = subprocess.run(command, capture_output=True, text=True, cwd=scratch)
    found = []
    for line in result.stdout.splitlines():
        match = re.match(r"(?P<file>[^:]+\.py):(?P<row>\d+):(?P<col>\d+): (?P<what>.*)", line)
        if match:
            found.append(f"{where[Path(match['file']).name]}: {match['what']}")
    if result.returncode not in (0, 1) or (result.returncode == 1 and not found):
        found.append(f"ruff failed: {result.stderr.strip()[-2000:]}")
    return found


def unincluded_sections(pages: list[Path]) -> list[str]:
    """Sections of package files (``path:section``) that no page includes."""
    included = set()
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            match = SNIPPET.match(line.strip())
            if match and match["section"]:
                included.add(f"{match['path']}:{match['section']}")
    found = []
    for path in sorted((ROOT / "attention_book").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        for marker in MARKER_START.finditer(path.read_text(encoding="utf-8")):
            if f"{name}:{marker['section']}" not in included:
                found.append(f"{name}:{marker['section']}")
    return found


def _is_random_seed(line: str, match: re.Match) -> bool:
    before = re.findall(r"\w+", line[: match.start()].lower())
    if before and before[-1] in RANDOM_BEFORE:
        return True
    return bool(RANDOM_AFTER.match(line[match.end() :]))


def word_problems(text: str) -> list[str]:
    """Each line of prose that says "seed" for something other than a random seed.

    Args:
        text: A Markdown page.

    Returns:
        ``line N: text`` for each such line, in order.
    """
    found = []
    number = 0
    for piece in pieces(text):
        if not isinstance(piece, str):  # a fence: code, never prose
            number = piece.end
            continue
        number += 1
        line = COMMENT.sub("", "".join(piece.split("`")[::2]))  # without inline code
        if any(not _is_random_seed(line, m) for m in SEED.finditer(line)):
            found.append(
                f"line {number}: 'seed' names the document the book started from, which no "
                f"reader knows (say what it is): {piece.strip()}"
            )
    return found


def interpreter_problems(text: str) -> list[str]:
    """Blocks that run a Triton kernel on a machine without a GPU but leave the interpreter off.

    Args:
        text: A Markdown page.

    Returns:
        ``line N: why`` for each block that names the Triton backend (or imports Triton), is not
        skipped without a GPU, and does not set ``TRITON_INTERPRET``.
    """
    found = []
    for fence in fences(text):
        body = "\n".join(fence.body)
        runs_triton = '"triton"' in body or re.search(r"^\s*(import|from) triton\b", body, re.M)
        needs_gpu = any("cuda.is_available()" in mark and "skipif(not" in mark.replace(" ", "")
                        for mark in fence.marks)  # fmt: skip
        sets_it = "TRITON_INTERPRET" in body
        if fence.info == "python" and runs_triton and not needs_gpu and not sets_it:
            found.append(
                f"line {fence.line}: this block runs Triton and may run without a GPU: set "
                'os.environ.setdefault("TRITON_INTERPRET", "1") before Triton loads'
            )
    return found


@functools.cache
def package_classes() -> dict[str, tuple[str, ...]]:
    """The classes the package defines at module level, with their ``__init__`` parameters.

    Read from the source (no import): a class without an ``__init__`` of its own (a dataclass,
    a subclass) has no names to suggest, and an empty tuple.

    Returns:
        Class name -> the names of the parameters that may be passed by position, in order.
    """
    classes: dict[str, tuple[str, ...]] = {}
    for path in sorted((ROOT / "attention_book").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef)
                         and f.name == "__init__"), None)  # fmt: skip
            params = (
                ()
                if init is None
                else tuple(a.arg for a in [*init.args.posonlyargs, *init.args.args][1:])
            )
            classes.setdefault(node.name, params)
    return classes


def positional_problems(text: str) -> list[str]:
    """Calls of the package's classes that pass more than `MAX_POSITIONAL` arguments by position.

    Args:
        text: A Markdown page.

    Returns:
        ``line N: why`` for each such call in a runnable block, naming the parameters to pass
        by keyword.
    """
    classes, found = package_classes(), []
    for fence in fences(text):
        if not fence.runnable:
            continue
        try:
            tree = ast.parse(fence.code)
        except SyntaxError:
            continue  # the lint rule reports it
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or len(node.args) <= MAX_POSITIONAL:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in classes or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            if D2L_CALL in fence.code.split("\n")[node.lineno - 1]:
                continue  # a call that shows d2l's positional signature, and says so
            params = classes[name][MAX_POSITIONAL : len(node.args)]
            extra = node.args[MAX_POSITIONAL:]
            names = ", ".join(
                f"{param}={ast.unparse(arg)}" for param, arg in zip(params, extra, strict=False)
            )
            found.append(
                f"line {fence.line + node.lineno}: {name}(...) gets {len(node.args)} arguments "
                f"by position; name those after the first {MAX_POSITIONAL}"
                + (f": {names}" if names else "")
            )
    return found


def unfolded_listings(text: str, page: str = "a page") -> list[tuple[int, int, str]]:
    """The listings of package source a reader sees without unfolding anything.

    Args:
        text: A Markdown page.
        page: The page, named in errors.

    Returns:
        ``(line, lines shown, file)`` for each listing outside a folded admonition, ``line``
        that of its fence in `text`.
    """
    from booktools.plugin.listings import listing

    found, folds = [], []  # folds: (indent, folded) of the admonitions around the line
    for piece in pieces(text):
        if isinstance(piece, str):
            if piece.strip():
                indent = len(piece) - len(piece.lstrip())
                folds = [fold for fold in folds if fold[0] < indent]
                opening = ADMONITION.match(piece)
                if opening:
                    folds.append((len(opening["indent"]), opening["kind"] == "???"))
            continue
        folds = [fold for fold in folds if fold[0] < len(piece.indent)]
        if piece.listing and not any(folded for _, folded in folds):
            source, _ = listing(piece.listing, piece.body, page)
            found.append((piece.line, len(source.split("\n")), piece.listing))
    return found


def listing_problems(text: str, page: str = "a page") -> list[str]:
    """Unfolded listings longer than `LISTING_BUDGET` lines on a chapter's core page.

    Args:
        text: A Markdown page.
        page: The page, named in errors.

    Returns:
        ``line N: why`` for each; nothing for a page that is not a chapter's core (a deep dive
        says ``deep_dive:`` in its front matter).
    """
    from booktools.plugin.reading import front_matter

    if "chapters/" not in page or front_matter(text).get("deep_dive"):
        return []
    return [
        f"line {line}: a listing of {count} lines of {path} (a core page shows at most "
        f"{LISTING_BUDGET} unfolded): show the idea, and fold the rest or move it to a helper"
        for line, count, path in unfolded_listings(text, page)
        if count > LISTING_BUDGET
    ]


def printed_problems(text: str) -> list[str]:
    """Blocks that print what a trained model or stored experiment gives, and show nothing.

    Args:
        text: A Markdown page.

    Returns:
        ``line N: why`` for each runnable block that imports from ``attention_book.experiments``
        and calls ``print``, without expected output, without ``<!--book:printed-->`` after it
        and not skipped; and for a mark that follows no block.
    """
    try:
        marked = {fence.line for fence, _ in printed_chains(text)}
    except ValueError as error:
        return [str(error)]
    found = []
    for fence in fences(text):
        reads = re.search(r"^\s*from attention_book\.experiments\b", fence.code, re.M)
        prints = re.search(r"\bprint\(", fence.code)
        if not (fence.runnable and reads and prints) or fence.has_output or fence.skip:
            continue
        if fence.line not in marked:
            found.append(
                f"line {fence.line}: this block prints what a trained model or a stored "
                "experiment gives, and the page shows nothing: put <!--book:printed--> on the "
                "line after it (the build writes what it printed), or its expected output"
            )
    return found


def width_problems(text: str) -> list[str]:
    """Lines of a block's expected output wider than `PRINTED_WIDTH`: they scroll sideways.

    Args:
        text: A Markdown page.

    Returns:
        ``line N: why`` for each such line (the snippet run holds what a block marked
        ``<!--book:printed-->`` prints to the same width).
    """
    return [
        f"line {fence.line + 1 + k}: a line of expected output of {len(line)} characters, over "
        f"the {PRINTED_WIDTH} a code block shows without scrolling: print less per line"
        for fence in fences(text)
        if fence.is_output
        for k, line in enumerate(fence.body)
        if len(line) > PRINTED_WIDTH
    ]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


def check(pages: list[Path], every_page: bool) -> list[str]:
    """Every rule on the pages; the section markers only when all pages are read.

    Args:
        pages: The pages to check.
        every_page: Whether these are all the book's pages (a marker that none of them
            includes is then a problem).

    Returns:
        One line per problem.
    """
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        found += [f"{_name(page)}:{problem}" for problem in fence_problems(text)]
        found += [f"{_name(page)}:{problem}" for problem in word_problems(text)]
        found += [f"{_name(page)}:{problem}" for problem in interpreter_problems(text)]
        found += [f"{_name(page)}:{problem}" for problem in positional_problems(text)]
        found += [f"{_name(page)}:{problem}" for problem in printed_problems(text)]
        found += [f"{_name(page)}:{problem}" for problem in listing_problems(text, _name(page))]
        found += [f"{_name(page)}:{problem}" for problem in width_problems(text)]
    found += lint_problems(pages)
    if every_page:
        found += [f"{section}: no page includes this section" for section in
                  unincluded_sections(pages)]  # fmt: skip
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the pages named (every page by default); print the problems.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        0 when every rule holds, 1 otherwise.
    """
    parser = argparse.ArgumentParser(prog="python -m booktools.checks.docs")
    parser.add_argument("pages", nargs="*", type=Path, help="pages (default: every page)")
    args = parser.parse_args(argv)
    pages = [page.resolve() for page in args.pages] or PAGES
    found = check(pages, every_page=not args.pages)
    for problem in found:
        print(problem, file=sys.stderr)
    print(f"docs check: {len(pages)} pages, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
