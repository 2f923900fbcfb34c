"""What a block that reads a trained model prints, written under it by the build.

A block that loads a trained model or a stored experiment prints what that training made: a
translation, an accuracy. Trained on another machine, the model is another one (within the
spread the referee allows), so its output cannot be a fixed expected-output fence that the
snippets compare. Such a block is marked on the line right after its closing fence::

    ```python
    ...
    print(translation)
    ```
    <!--book:printed-->

and the build runs it in a fresh interpreter with the build's store (after the blocks it
continues, whose own output is not shown), and writes what it printed there as a ``text``
fence with a line that says so. The snippets run the block as any other; the page's sentences
about the output are the build's too (`booktools.plugin.figures`), so that they hold on the
machine that built the page.

Each output is cached in ``.cache/printed/KEY.txt``. The key holds the block's code, the source
of the package, what the store holds for every declared run (`booktools.plugin.figures
.declarations`' digests: a run trained again prints again) and the library versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger

from booktools import ROOT
from booktools.markdown import PRINTED, PRINTED_WIDTH, printed_chains
from booktools.plugin.figures import CACHE, FIGURE_LIBRARIES, declarations, render_jobs

log = get_plugin_logger(__name__)

#: Bump when what the build does with a marked block changes (how it runs it, what it keeps).
PRINTED_VERSION = 1

#: The most seconds one block may run at build time.
TIMEOUT = 900

#: The line under each printed output.
CAPTION = "*What this block printed when the page was built.*"

#: The script that runs a chain of blocks: the earlier ones silently, then the marked one.
RUNNER = """\
import contextlib, io, json, sys
codes = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
with contextlib.redirect_stdout(io.StringIO()):
    for number, code in enumerate(codes[:-1]):
        exec(compile(code, f"<block {number + 1}>", "exec"), namespace)
exec(compile(codes[-1], "<the block>", "exec"), namespace)
"""


def package_digest() -> str:
    """A digest of the package's source: every ``.py`` file of ``attention_book/``."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "attention_book").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def block_key(codes: list[str], package: str, stored: dict[str, str | None]) -> str:
    """The cache key of a marked block's output.

    Args:
        codes: The codes the block runs (`printed_chains`).
        package: `package_digest`.
        stored: What the store holds for each declared run (a digest, or None).

    Returns:
        16 hexadecimal digits.
    """
    digest = hashlib.sha256(f"printed {PRINTED_VERSION}\n".encode())
    digest.update(" ".join(f"{name} {version(name)}" for name in FIGURE_LIBRARIES).encode())
    digest.update(package.encode())
    digest.update(json.dumps(stored, sort_keys=True).encode())
    digest.update(json.dumps(codes).encode())
    return digest.hexdigest()[:16]


def run_block(codes: list[str], threads: int = 1) -> str:
    """Run a chain of blocks in a fresh interpreter, in an empty folder; what the last printed.

    Args:
        codes: The codes of the blocks, the marked one last.
        threads: Threads for PyTorch.

    Returns:
        What the last block printed.

    Raises:
        RuntimeError: If a block fails or runs past `TIMEOUT`, with the end of its error.
    """
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": str(threads)}
    env.setdefault("TRITON_INTERPRET", "1")
    with tempfile.TemporaryDirectory(prefix="printed-") as folder:
        try:
            result = subprocess.run(
                [sys.executable, "-c", RUNNER], input=json.dumps(codes), cwd=folder, env=env,
                capture_output=True, text=True, timeout=TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"it ran for more than {TIMEOUT} s") from None
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return result.stdout.rstrip("\n")


def print_blocks(pages: list[tuple[str, str]]) -> dict[str, str]:
    """Run the marked blocks of the pages that the cache lacks; what each one printed.

    Args:
        pages: ``(path, Markdown)`` of every page (``docs/chapters/x.md``).

    Returns:
        What each marked block printed, by its codes as JSON (`chain_id`): mkdocs hands a page
        to its events without its front matter, so a block's line would not name it there.

    Raises:
        PluginError: If a mark stands where no block ends, or a block fails, naming the page
            and the block's line.
    """
    chains, lines = {}, {}
    for page, text in pages:
        try:
            for fence, codes in printed_chains(text):
                chains[chain_id(codes)] = codes
                lines.setdefault(chain_id(codes), f"{page}:{fence.line}")
        except ValueError as error:
            raise PluginError(f"{page}: {error}") from None
    if not chains:
        return {}
    out_dir = CACHE / "printed"
    package, stored = package_digest(), declarations().get("digests", {})
    paths = {where: out_dir / f"{block_key(codes, package, stored)}.txt"
             for where, codes in chains.items()}  # fmt: skip
    missing = [where for where, path in paths.items() if not path.exists()]
    if missing:
        out_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        jobs = min(render_jobs(), len(missing))
        threads = max(1, (os.cpu_count() or 1) // jobs)

        def run(where):
            try:
                return where, run_block(chains[where], threads), None
            except RuntimeError as error:
                return where, None, str(error)

        failures = []
        with ThreadPoolExecutor(jobs) as pool:
            for where, printed, error in pool.map(run, missing):
                if error is not None:
                    failures.append(f"{lines[where]}: the block failed:\n{error}")
                    continue
                temporary = paths[where].with_suffix(".partial")
                temporary.write_text(printed, encoding="utf-8")
                os.replace(temporary, paths[where])
        if failures:
            raise PluginError("\n".join(failures)[-6000:])
        log.info(
            "printed: ran %d marked blocks in %.1f s (%d workers)",
            len(missing), time.perf_counter() - start, jobs,
        )  # fmt: skip
    return {where: path.read_text(encoding="utf-8") for where, path in paths.items()}


def chain_id(codes: list[str]) -> str:
    """The name of a marked block in `print_blocks`' result: its codes, as JSON."""
    return json.dumps(codes)


def insert_printed(markdown: str, page: str, printed: dict[str, str]) -> str:
    """Replace each ``<!--book:printed-->`` by what its block printed, as a ``text`` fence.

    Args:
        markdown: The page's own Markdown (the lines of its blocks as on disk).
        page: The page (``docs/chapters/x.md``).
        printed: `print_blocks`' result.

    Returns:
        The Markdown with each output under its block, indented like the mark.

    Raises:
        PluginError: If the build ran no block for a mark of this page, or a block printed a
            line wider than `PRINTED_WIDTH`.
    """
    lines = markdown.split("\n")
    try:
        chains = printed_chains(markdown)
    except ValueError as error:
        raise PluginError(f"{page}: {error}") from None
    for fence, codes in reversed(chains):
        if chain_id(codes) not in printed:
            raise PluginError(f"{page}: no output was printed for the block of line {fence.line}")
        mark = fence.end  # the page line of the closing fence; the mark is the next one
        indent = PRINTED.match(lines[mark])["indent"]
        output = printed[chain_id(codes)] or "(it printed nothing)"
        wide = max(output.split("\n"), key=len)
        if len(wide) > PRINTED_WIDTH:
            raise PluginError(
                f"{page}: the block of line {fence.line} printed a line of {len(wide)} "
                f"characters, over the {PRINTED_WIDTH} a code block shows without scrolling: "
                f"print less per line ({wide[:60]!r}...)"
            )
        ticks = "````" if "```" in output else "```"
        block = [f"{ticks}text", *output.split("\n"), ticks, "", CAPTION]
        lines[mark : mark + 1] = ["", *textwrap.indent("\n".join(block), indent).split("\n")]
    return "\n".join(lines)
