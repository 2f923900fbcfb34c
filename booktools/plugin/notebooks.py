"""One Jupyter notebook per chapter, for readers to download and run.

Each runnable Python block of a chapter becomes a code cell, and everything else Markdown: the
prose with its links made absolute (they point at the site), the listings of package source
shortened as on the page, the build fragments and the book's lists (the plan of the book)
inserted as on the page (a page that inserts a fragment the build did not draw fails the same
way on the page and in its notebook), and the "first run trains" notes. The front matter is
left out. Test marks and expected outputs are for the snippets, not for
readers, and are left out. A block the page skips without a GPU becomes a guarded cell, so
that "run all" works on a CPU; a block the page never runs is shown with the page's reason.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import nbformat
from mkdocs.structure.files import File, Files
from mkdocs.utils.meta import get_data

from booktools import ROOT
from booktools.live.widgets import notebook_text
from booktools.markdown import Fence, Skip, is_mark, pieces
from booktools.plugin.figures import FIGURE_LINK, insert_fragments
from booktools.plugin.listings import listing
from booktools.plugin.notes import note_for
from booktools.plugin.state import BuildState
from booktools.plugin.structure import insert_structure

CACHE = ROOT / ".cache"
CHAPTERS = "chapters/"
PAGE_LINK = re.compile(r"\]\((?!https?://)(?P<path>[^)\s#]+)\.md(?P<anchor>#[^)\s]*)?\)")

# First cell of a notebook whose code runs Triton: the page's run sets TRITON_INTERPRET before
# Python starts (make snippets); a notebook sets it before any cell can import Triton.
TRITON_SETUP = """\
# Triton reads TRITON_INTERPRET once, at its first import: without a CUDA GPU, its kernels run
# under its interpreter on the CPU. Set it here, before any other cell imports Triton.
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")"""


def absolute_links(line: str, page_url: str, site_url: str) -> str:
    """Point a page's relative figure and page links at the site, so they work in a notebook.

    Args:
        line: Markdown.
        page_url: The built page's URL (``chapters/x/``).
        site_url: The site's URL, ending with ``/`` (or "" for links from the root).

    Returns:
        The Markdown with absolute links.
    """
    line = FIGURE_LINK.sub(lambda m: f"{site_url}figures/{m[1]}.svg", line)
    src_dir = posixpath.dirname(page_url.rstrip("/"))  # "chapters/x/" was "chapters/x.md"

    def page(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(src_dir, match["path"]))
        url = "" if target == "index" else target.removesuffix("/index") + "/"
        return f"]({site_url}{url}{match['anchor'] or ''})"

    return PAGE_LINK.sub(page, line)


def guarded(code: str, skip: Skip | None) -> str:
    """A block's code for a notebook cell, guarded if the page skips it under a condition.

    Args:
        code: The block's code.
        skip: The block's skip mark (a condition, such as no GPU, and a reason), or None.

    Returns:
        The code, or a cell that runs it where the condition does not hold and says why
        elsewhere.
    """
    if skip is None or skip.condition is None:
        return code
    body = "\n".join(f"    {line}" if line else "" for line in code.split("\n"))
    return (
        f"# The book runs this cell only where this holds: not ({skip.condition})\n"
        f"if not ({skip.condition}):\n{body}\nelse:\n    print({f'Skipped: {skip.reason}.'!r})"
    )


def chapter_notebook(
    markdown: str,
    page_url: str,
    site_url: str,
    page: str = "a page",
    state: BuildState | None = None,
) -> nbformat.NotebookNode:
    """Turn a chapter into a notebook: runnable blocks become code cells, the rest Markdown.

    Args:
        markdown: The chapter's Markdown.
        page_url: The built page's URL (``chapters/x/``).
        site_url: The site's URL, for the links.
        page: The chapter, named in errors (an include of a missing section, an unknown
            fragment).
        state: The build's state, with the fragments drawn (none when None).

    Returns:
        The notebook, with stable cell ids (the same chapter gives the same file).

    Raises:
        PluginError: If a listing includes a missing section, or the page inserts a fragment
            the build did not draw (`MissingFragmentError`), naming the page.
    """
    state = BuildState() if state is None else state
    cells: list[nbformat.NotebookNode] = []
    prose: list[str] = []

    def flush_prose() -> None:
        text = "\n".join(prose).strip("\n")
        if text.strip():
            cells.append(nbformat.v4.new_markdown_cell(text))
        prose.clear()

    for piece in pieces(markdown):
        if isinstance(piece, str):
            if not is_mark(piece):  # test marks are not for readers
                line = insert_fragments(piece, page, state)
                line = notebook_text(line, page_url, site_url, state)
                prose.append(absolute_links(line, page_url, site_url))
            continue
        if piece.is_output:
            continue  # running the cell above shows its output
        note = note_for(piece)
        if note:
            prose += [note, ""]
        if piece.runnable and not (piece.skip and piece.skip.condition is None):
            flush_prose()
            cells.append(nbformat.v4.new_code_cell(guarded(piece.code, piece.skip)))
        else:
            prose += shown_as_markdown(piece, page)
    flush_prose()
    header = (
        f"*This notebook was generated from [the Attention Book]({site_url}{page_url}). "
        "It imports the book's package: run it from a clone of the book's repository after "
        "`make setup`, or after `pip install -e .` in that clone.*"
    )
    cells.insert(0, nbformat.v4.new_markdown_cell(header))
    if any(cell.cell_type == "code" and "triton" in cell.source.lower() for cell in cells):
        cells.insert(1, nbformat.v4.new_code_cell(TRITON_SETUP))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    return with_stable_ids(notebook)


def with_stable_ids(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with cell ids by position (``cell-0``...): the same page, the same file."""
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{number}"
    return notebook


def jupytext_notebook(path: str | Path) -> nbformat.NotebookNode:
    """The notebook of a jupytext page (the Quick tour's ``.py``), with stable cell ids."""
    import jupytext

    notebook = jupytext.read(path)
    # What the page says about itself for the book's lists (booktools.plugin.structure): not
    # for readers.
    notebook.metadata.pop("book", None)
    notebook.metadata.get("jupytext", {}).pop("notebook_metadata_filter", None)
    return with_stable_ids(notebook)


def shown_as_markdown(fence: Fence, page: str) -> list[str]:
    """The Markdown lines of a fence that is not a code cell of the notebook.

    Args:
        fence: A listing of source, a block the page never runs, or any other fence.
        page: The page, named in errors.

    Returns:
        The fence's lines: a listing shortened as on the page, a block never run with the
        page's reason under it, anything else as it is (without its indentation).
    """
    if fence.runnable and fence.skip is not None:
        return ["```python", *fence.body, "```", "", f"*Not run here: {fence.skip.reason}.*"]
    body = listing(fence.listing, fence.body, page)[0].split("\n") if fence.listing else fence.body
    return [f"```{fence.language}", *body, "```"]


def notebook_uri(file: File) -> str:
    """Where the notebook of a chapter page lives in the site (``notebooks/x.ipynb``)."""
    return "notebooks/" + Path(file.src_uri).stem + ".ipynb"


def add_notebooks(files: Files, config, state: BuildState) -> None:
    """Write one notebook per chapter under ``.cache/notebooks`` and add it to the site.

    Args:
        files: The site's files (the notebooks are appended).
        config: The mkdocs configuration.
        state: This build's state, with its fragments drawn.
    """
    out_dir = CACHE / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    for file in list(files.documentation_pages()):
        path = out_dir / Path(notebook_uri(file)).name
        if file.src_uri.endswith(".py"):  # a jupytext notebook page: convert it as it is
            notebook = jupytext_notebook(file.abs_src_path)
            path.write_text(nbformat.writes(notebook), encoding="utf-8")
        elif file.src_uri.startswith(CHAPTERS):
            # The front matter is for the build; the book's lists are put in as on the page.
            markdown = get_data(Path(file.abs_src_path).read_text(encoding="utf-8"))[0]
            markdown = insert_structure(markdown, file.src_uri, state.book)
            site_url = config["site_url"] or ""
            page = f"docs/{file.src_uri}"
            notebook = chapter_notebook(markdown, file.url, site_url, page, state)
            path.write_text(nbformat.writes(notebook), encoding="utf-8")
        else:
            continue
        files.append(File.generated(config, notebook_uri(file), abs_src_path=str(path)))
