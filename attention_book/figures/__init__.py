"""One function per figure (or build-time table) that the site shows.

Each chapter has its own module here, and `CHAPTERS` names them. Each module lists its figure
functions in a tuple named ``FIGURES``, and only those are figures: `find_figure` looks a
page's name up in these lists, so a helper or an experiment (which returns a dict, not a
drawing) cannot be named from a page by mistake. Adding a figure is writing its function and
adding it to its module's ``FIGURES``; a new module is found by `CHAPTERS` on its own. Names
are unique across the modules.

A figure function returns a matplotlib `Figure`, which the site build saves as
``figures/<name>.svg``, a `Frames` (one drawing per value of a control, which the page shows with a
slider, offline, by swapping precomputed SVGs), or a Markdown string (a table, a sentence with
measured numbers), which the build inserts where a page writes ``{{ build:<name> }}``, or a dict of
values (names to formatted strings), one of which the build inserts where a sentence of the page
writes ``{{ build:<name>.<key> }}``: the prose stays in the page, the numbers come from the build.
It takes no argument, except the figures that show results committed by the scripts in
``benchmarks/``: those take one argument, ``results_dir``, the directory of those results. The
caller passes it: ``draw(name, results_dir=...)`` or ``python -m attention_book.figures NAME
--out-dir DIR --results-dir RESULTS``; the site's build plugin passes the repository's
``benchmarks/results``. The package never looks for that directory itself, so it works the same from
an installed wheel.

Computations that are not drawing (training runs, measurements) live in
`attention_book.experiments`; the figure modules import them.

What a figure is drawn from: the code of its module and of every module of the package it
imports, and the stored runs it shows. The site build keys every drawn figure by a hash of that
code with docstrings, comments and layout left out (`booktools.plugin.code_keys`), the keys of
those runs in the store (`declaration`), `RENDER_VERSION` (how a figure is saved) and the
library versions, and trains the declared runs a cold build lacks before it draws. A figure is
cheap to draw again, so nothing needs to be bumped by hand: any change to the code it runs
draws it again, and editing prose draws nothing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from matplotlib.figure import Figure

__all__ = [
    "CHAPTERS",
    "RENDER_VERSION",
    "Frames",
    "dark_color",
    "declaration",
    "draw",
    "figure_functions",
    "find_figure",
    "inline_svg",
    "needs_results",
    "recolor_for_dark",
    "save_svg",
]

#: The modules of this package that hold figures, each with its ``FIGURES`` tuple: every module
#: of the package (read from its folder, so a new module needs no entry anywhere), by name.
CHAPTERS = tuple(
    sorted(module.name for module in pkgutil.iter_modules(__path__) if module.name[0] != "_")
)


#: How a drawn figure is saved (`save_svg`, `recolor_for_dark`, ``__main__``): bump it when that
#: changes, and every figure is drawn again.
RENDER_VERSION = 1

#: The packages whose modules a figure's declaration follows: the drawing code, and the
#: computations whose declared runs it adds.
_DECLARING = ("attention_book.figures.", "attention_book.experiments.", "attention_book.data.")


def _imports(module: str) -> set[str]:
    """The figure, experiment and data modules that `module` imports, read from its source.

    Every ``import`` statement counts (those inside functions too), without running anything.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"no module named {module!r}")
    found = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(_DECLARING) and _is_module(name):
                found.add(name)
    return found - {module}


def _is_module(name: str) -> bool:
    """Whether `name` is a module (not a function or constant imported from one)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name inside a module that is not a package
        return False


def _versions(module: object) -> dict[str, int]:
    """A module's declared versions: its integer constants whose name ends in ``VERSION``."""
    return {
        name: value
        for name, value in sorted(vars(module).items())
        if name.endswith("VERSION") and type(value) is int
    }


def declaration(module: str) -> dict[str, Any]:
    """The stored runs the figures of a figure module show, as the modules it imports declare.

    It follows the module's imports (`_imports`) through the figure, experiment and data
    modules of the package, and gathers:

    - ``computations``: for every experiment and data module it reaches, its ``VERSION``
      constants and, for each run it declares (``RUNS``), the run's key in the store (None
      where that key needs another run's stored result, with the run's version instead);
    - ``runs``: the names of those runs, which a cold build trains before it draws.

    The code the figures run is keyed apart, by its content (`booktools.plugin.code_keys`).

    Args:
        module: A figure module (``attention_book.figures.x``).

    Returns:
        The declaration, as JSON values.
    """
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_imports(name))
    computations, runs = {}, []
    for name in sorted(seen):
        if name.startswith("attention_book.figures."):
            continue
        imported = importlib.import_module(name)
        declared = {}
        for run in getattr(imported, "RUNS", ()):
            declared[run.name] = run.key() or {"version": run.version, "key": None}
            runs.append(run.name)
        computations[name] = {"versions": _versions(imported), "runs": declared}
    return {"computations": computations, "runs": runs}


@dataclass
class Frames:
    """A figure the reader explores: one drawing per value of a control (a slider on the page).

    The build saves every frame as an SVG (and its dark variant); the page shows frame
    `start` with a slider over `labels`, and a few lines of JavaScript swap the image, so it
    works offline and without a Python kernel. Where the page cannot move (a notebook, a
    printout), the start frame is the figure.

    Attributes:
        control: What the slider changes, e.g. "kernel width σ".
        labels: One label per frame, shown beside the slider.
        figures: One drawn figure per frame, all of the same size.
        start: The frame shown first.
    """

    control: str
    labels: list[str]
    figures: list[Figure]
    start: int = 0

    def __post_init__(self) -> None:
        if not self.figures or len(self.labels) != len(self.figures):
            raise ValueError(
                f"Frames needs one label per figure, got {len(self.labels)} labels and "
                f"{len(self.figures)} figures"
            )
        if not 0 <= self.start < len(self.figures):
            raise ValueError(
                f"start must index a frame (0..{len(self.figures) - 1}), got {self.start}"
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
            f"tuple of one of {modules} (add it there)"
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


def draw(
    name: str, results_dir: str | Path | None = None
) -> Figure | Frames | str | dict[str, str]:
    """Call the figure function called `name`, with the results directory if it needs one.

    Args:
        name: The figure's name.
        results_dir: The directory of the results that ``benchmarks/`` scripts commit; needed
            only by figures that show them, ignored by the others.

    Returns:
        The matplotlib figure, the frames, the Markdown string, or the dict of values.

    Raises:
        ValueError: If `name` is not a figure, or the figure needs `results_dir` and got none
            or a path that is not a directory.
        TypeError: If the function returns something else than a Figure, Frames, a string or
            a dict of strings by names.
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
    is_values = isinstance(result, dict) and all(
        isinstance(key, str) and key.isidentifier() and isinstance(value, str)
        for key, value in result.items()
    )
    if not (isinstance(result, Figure | Frames | str) or is_values):
        raise TypeError(
            f"figure function {name!r} returned {type(result).__name__}; it must return a "
            "matplotlib Figure, Frames, a Markdown string, or a dict of values (names to "
            "strings) that the page's prose cites"
        )
    return result


def save_svg(fig: Figure, path: str | Path | BinaryIO) -> None:
    """Save `fig` as a deterministic SVG: no date in the metadata, fixed element ids.

    Args:
        fig: The figure to save.
        path: Where to write the SVG file (or a binary file object).
    """
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "attention-book", "svg.fonttype": "path"}):
        fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})


def inline_svg(fig: Figure, alt: str) -> str:
    """Markdown for a figure drawn inside a build-time fragment (a function that returns text).

    The figure is saved as `save_svg` saves the build's figures, for the light page and, after
    `recolor_for_dark`, for the dark one; both are inlined as data URIs that Material shows one
    at a time (``#only-light``, ``#only-dark``), like the build's figure files.

    Args:
        fig: The figure, drawn for a light page (it is recoloured in place).
        alt: The images' alt text.

    Returns:
        Two Markdown images.
    """
    import base64
    import io

    def encoded(figure: Figure) -> str:
        buffer = io.BytesIO()
        save_svg(figure, buffer)
        return base64.b64encode(buffer.getvalue()).decode()

    light = encoded(fig)
    dark = encoded(recolor_for_dark(fig))
    return (
        f"![{alt}](data:image/svg+xml;base64,{light}#only-light)"
        f"![{alt}](data:image/svg+xml;base64,{dark}#only-dark)"
    )


def dark_color(color: str | tuple[float, ...]) -> tuple[float, float, float, float]:
    """The colour to draw `color` with on a dark page: extremes of lightness are flipped.

    Near-white backgrounds and pale fills become dark, near-black text and lines become light,
    with their hue kept; mid-lightness colours (the data's palette) stay as they are, since
    they read on both backgrounds.

    Args:
        color: Any matplotlib colour.

    Returns:
        The RGBA colour for the dark variant, alpha unchanged.
    """
    import colorsys

    from matplotlib.colors import to_rgba

    red, green, blue, alpha = to_rgba(color)
    hue, lightness, saturation = colorsys.rgb_to_hls(red, green, blue)
    if lightness > 0.75:  # white, pale fills: a dark tint of the same hue
        lightness = 0.12 + (1.0 - lightness) * 0.6
    elif lightness < 0.3:  # black, dark gray, navy text: a light tint
        lightness = 0.92 - lightness * 0.5
    else:  # the palette: exactly as it was
        return (red, green, blue, alpha)
    return (*colorsys.hls_to_rgb(hue, lightness, saturation), alpha)


def recolor_for_dark(fig: Figure) -> Figure:
    """Recolour a drawn figure for a dark page, in place: the same data, drawn for dark.

    Every artist's colours (text, lines, markers, patches, spines, ticks, grids, legend
    frames, backgrounds) go through `dark_color`, and the figure's background becomes
    transparent, so the page's own colour shows. Colours that encode data through a colormap
    (images, meshes, scatter plots coloured by value) are left alone, so they still match
    their colorbar.

    Args:
        fig: The figure, already drawn.

    Returns:
        The same figure.
    """
    import numpy as np
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import to_rgba_array

    def flipped(colors):
        rgba = to_rgba_array(colors)
        return np.array([dark_color(c) for c in rgba]) if len(rgba) else rgba

    for artist in fig.findobj():
        if isinstance(artist, ScalarMappable) and artist.get_array() is not None:
            continue  # colours that stand for values
        for name in ("color", "facecolor", "edgecolor", "markerfacecolor", "markeredgecolor"):
            getter, setter = (
                getattr(artist, f"get_{name}", None),
                getattr(artist, f"set_{name}", None),
            )
            if getter is None or setter is None:
                continue
            try:
                value = getter()
                if isinstance(value, str) and value in ("none", "auto"):
                    continue
                colors = flipped(value)
                setter(colors[0] if len(colors) == 1 else colors)
            except (TypeError, ValueError, AttributeError):
                continue  # an artist whose colour is not a plain colour (e.g. "face")
    for text in fig.findobj(lambda artist: hasattr(artist, "get_bbox_patch")):
        box = text.get_bbox_patch()  # the box behind a label, drawn by the text itself
        if box is not None:
            box.set_facecolor(dark_color(box.get_facecolor()))
            box.set_edgecolor(dark_color(box.get_edgecolor()))
    fig.patch.set_alpha(0.0)
    for ax in fig.axes:
        ax.patch.set_alpha(0.0)
    return fig
