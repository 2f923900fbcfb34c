"""Run every chapter's downloadable notebook from top to bottom, as a reader would.

Usage: ``python tests/run_notebooks.py [docs/chapters/x.md ...]`` (every chapter by default).

Each chapter is turned into its notebook by the site's own hook (the file a reader downloads)
and executed in a fresh Jupyter kernel, in an empty temporary directory, on whatever machine
this is: on a CPU-only machine the cells the page skips without a GPU print why and go on.
Trained models come from the book's result cache when they are there, and are trained when
they are not, exactly as in the chapter. It prints one line per chapter with its time and
exits with 1 if any notebook fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]


def load_hook():
    """The site's mkdocs hook, loaded as mkdocs loads it."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    spec = importlib.util.spec_from_file_location("book_hook", ROOT / "docs" / "hooks" / "book.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def chapter_notebook(page: Path) -> nbformat.NotebookNode:
    """The notebook a reader downloads for `page`."""
    hook = load_hook()
    url = f"chapters/{page.stem}/"
    return hook.chapter_notebook(page.read_text(encoding="utf-8"), url, "", str(page))


def run_notebook(notebook: nbformat.NotebookNode, timeout: int = 900) -> None:
    """Execute `notebook` in a fresh kernel in an empty directory; raise on the first error."""
    with tempfile.TemporaryDirectory() as empty:
        where = {"metadata": {"path": empty}}
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", resources=where)
        client.execute()


def main(argv: list[str] | None = None) -> int:
    """Run the notebooks of the given chapters (every chapter by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path)
    args = parser.parse_args(argv)
    pages = args.pages or sorted((ROOT / "docs" / "chapters").glob("*.md"))
    failed = []
    for page in pages:
        start = time.perf_counter()
        try:
            run_notebook(chapter_notebook(page))
            status = "ok"
        except CellExecutionError as error:
            failed.append(page)
            status = f"FAIL\n{str(error)[-3000:]}"
        print(f"{page.name}: {time.perf_counter() - start:.0f} s {status}", flush=True)
    print(f"notebooks: {len(pages) - len(failed)} ran, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
