"""Run every chapter's downloadable notebook from top to bottom, as a reader would.

Usage: ``python -m booktools.checks.notebooks [docs/chapters/x.md ...]`` (every chapter by
default; ``make notebooks``).

Each chapter is turned into its notebook by the build's own code (`booktools.plugin.notebooks`: the
file a reader downloads, build fragments included, read from the figure cache or drawn) and
executed in a fresh Jupyter kernel, in an empty temporary directory, on whatever machine this
is: on a CPU-only machine the cells the page skips without a GPU print why and go on. Trained
models come from the book's result cache when they are there, and are trained when they are
not, exactly as in the chapter. It prints one line per chapter with its time and exits with 1
if any notebook fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from booktools import ROOT
from booktools.plugin.figures import page_fragments
from booktools.plugin.notebooks import chapter_notebook
from booktools.plugin.state import BuildState


def page_notebook(page: Path) -> nbformat.NotebookNode:
    """The notebook a reader downloads for a chapter.

    Args:
        page: The chapter's Markdown file (``docs/chapters/x.md``).

    Returns:
        The notebook, with the chapter's build fragments.
    """
    markdown = page.read_text(encoding="utf-8")
    shown = page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)
    state = BuildState(fragments=page_fragments(markdown, shown))
    return chapter_notebook(markdown, f"chapters/{page.stem}/", "", shown, state)


def run_notebook(notebook: nbformat.NotebookNode, timeout: int = 900) -> None:
    """Execute a notebook in a fresh kernel in an empty directory.

    Args:
        notebook: The notebook.
        timeout: Seconds a cell may run.

    Raises:
        CellExecutionError: At the first cell that fails.
    """
    with tempfile.TemporaryDirectory() as empty:
        where = {"metadata": {"path": empty}}
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", resources=where)
        client.execute()


def main(argv: list[str] | None = None) -> int:
    """Run the notebooks of the given chapters (every chapter by default).

    Args:
        argv: The command line's arguments.

    Returns:
        0 if every notebook ran, 1 otherwise.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path)
    args = parser.parse_args(argv)
    pages = [page.resolve() for page in args.pages] or sorted(
        (ROOT / "docs" / "chapters").glob("*.md")
    )
    failed = []
    for page in pages:
        start = time.perf_counter()
        try:
            run_notebook(page_notebook(page))
            status = "ok"
        except CellExecutionError as error:
            failed.append(page)
            status = f"FAIL\n{str(error)[-3000:]}"
        print(f"{page.name}: {time.perf_counter() - start:.0f} s {status}", flush=True)
    print(f"notebooks: {len(pages) - len(failed)} ran, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
