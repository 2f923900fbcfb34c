"""One function per figure (or build-time table) that the site shows.

Each chapter has its own module here, and `CHAPTERS` names them. Each module lists its figure
functions in a tuple named ``FIGURES``, and only those are figures: `find_figure` looks a
page's name up in these lists, so a helper or an experiment (which returns a dict, not a
drawing) cannot be named from a page by mistake. Adding a figure is writing its function and
adding it to its module's ``FIGURES``; adding a chapter module is adding its name to
`CHAPTERS`. Names are unique across the modules.

A figure function returns a matplotlib `Figure`, which the site build saves as
``figures/<name>.svg``, or a Markdown string (a table, a sentence with measured numbers),
which the build inserts where a page writes ``{{ build:<name> }}``. It takes no argument,
except the figures that show results committed by the scripts in ``benchmarks/``: those take
one argument, ``results_dir``, the directory of those results. The caller passes it:
``draw(name, results_dir=...)`` or ``python -m attention_book.figures NAME --out-dir DIR
--results-dir RESULTS``; the site's hook passes the repository's ``benchmarks/results``. The
package never looks for that directory itself, so it works the same from an installed wheel.

Computations that are not drawing (training runs, measurements) live in
`attention_book.experiments`; the figure modules import them.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

__all__ = ["CHAPTERS", "draw", "figure_functions", "find_figure", "needs_results", "save_svg"]

#: The modules of this package that hold figures, each with its ``FIGURES`` tuple.
CHAPTERS = (
    "home",
    "attention_cues",
    "nadaraya_watson",
    "scoring",
    "bahdanau",
    "multihead",
    "self_attention",
    "transformer",
    "vit",
    "flash",
    "optimizations",
)


def figure_functions() -> dict[str, Callable[..., Figure | str]]:
    """Every figure function, by name: the ``FIGURES`` of each module in `CHAPTERS`.

    Returns:
        ``{name: function}``, in the order of `CHAPTERS` and of each ``FIGURES``.

    Raises:
        ValueError: If two modules list figures of the same name.
    """
    functions: dict[str, Callable[..., Figure | str]] = {}
    for chapter in CHAPTERS:
        module = importlib.import_module(f"{__name__}.{chapter}")
        for function in module.FIGURES:
            name = function.__name__
            if name in functions:
                raise ValueError(
                    f"figure name {name!r} is listed twice: in {functions[name].__module__} "
                    f"and in {module.__name__}"
                )
            functions[name] = function
    return functions


def find_figure(name: str) -> Callable[..., Figure | str]:
    """Return the figure function called `name`.

    Args:
        name: The function's name, as written in a page (``figures/<name>.svg``).

    Returns:
        The figure function.

    Raises:
        ValueError: If no module of `CHAPTERS` lists a figure called `name` in its ``FIGURES``.
    """
    functions = figure_functions()
    if name not in functions:
        modules = ", ".join(f"{__name__}.{chapter}" for chapter in CHAPTERS)
        raise ValueError(
            f"no figure function named {name!r}: a figure is a function listed in the FIGURES "
            f"tuple of one of {modules} (add it there, or the module to CHAPTERS)"
        )
    return functions[name]


def needs_results(function: Callable[..., Figure | str]) -> bool:
    """Whether a figure function shows committed benchmark results (takes ``results_dir``).

    Args:
        function: A figure function.

    Returns:
        True if it has a parameter named ``results_dir``.
    """
    return "results_dir" in inspect.signature(function).parameters


def draw(name: str, results_dir: str | Path | None = None) -> Figure | str:
    """Call the figure function called `name`, with the results directory if it needs one.

    Args:
        name: The figure's name.
        results_dir: The directory of the results that ``benchmarks/`` scripts commit; needed
            only by figures that show them, ignored by the others.

    Returns:
        The matplotlib figure, or the Markdown string.

    Raises:
        ValueError: If `name` is not a figure, or the figure needs `results_dir` and got none
            or a path that is not a directory.
        TypeError: If the function returns something else than a Figure or a string.
    """
    function = find_figure(name)
    if not needs_results(function):
        result = function()
    elif results_dir is None:
        raise ValueError(
            f"figure {name!r} shows benchmark results: pass results_dir (--results-dir), "
            "the directory the benchmarks/ scripts write to"
        )
    elif not Path(results_dir).is_dir():
        raise ValueError(f"results_dir must be a directory, got {str(results_dir)!r}")
    else:
        result = function(Path(results_dir))
    if not isinstance(result, Figure | str):
        raise TypeError(
            f"figure function {name!r} returned {type(result).__name__}; "
            "it must return a matplotlib Figure or a Markdown string"
        )
    return result


def save_svg(fig: Figure, path: str | Path) -> None:
    """Save `fig` as a deterministic SVG: no date in the metadata, fixed element ids.

    Args:
        fig: The figure to save.
        path: Where to write the SVG file.
    """
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "attention-book", "svg.fonttype": "path"}):
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
