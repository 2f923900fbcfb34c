"""One function per figure (or build-time table) that the site shows.

Each chapter has its own module here (`attention_book.figures.<chapter>`). A figure function
takes no arguments and returns either a matplotlib `Figure`, which the site build saves as
``figures/<name>.svg``, or a Markdown string (a table, a sentence with measured numbers), which
the build inserts where a page writes ``{{ build:<name> }}``. The mkdocs hook in
``docs/hooks/book.py`` finds a function by its name with `find_figure`, so adding a figure is
adding a function: there is no list to keep in sync.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

__all__ = ["find_figure", "save_svg"]


def find_figure(name: str) -> Callable[[], Figure | str]:
    """Return the figure function called `name` from any module of this package.

    Args:
        name: The function's name, as written in a page (``figures/<name>.svg``).

    Returns:
        The figure function.

    Raises:
        ValueError: If no module defines `name`, or more than one does.
    """
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        function = getattr(module, name, None)
        if callable(function) and getattr(function, "__module__", None) == module.__name__:
            found.append(function)
    if not found:
        raise ValueError(
            f"no figure function named {name!r} in attention_book.figures; "
            "define it in the chapter's module there"
        )
    if len(found) > 1:
        modules = sorted(f.__module__ for f in found)
        raise ValueError(f"figure name {name!r} is defined in several modules: {modules}")
    return found[0]


def save_svg(fig: Figure, path: str | Path) -> None:
    """Save `fig` as a deterministic SVG: no date in the metadata, fixed element ids.

    Args:
        fig: The figure to save.
        path: Where to write the SVG file.
    """
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "attention-book", "svg.fonttype": "path"}):
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
