"""Plotting helpers shared by the chapters and by `attention_book.figures`.

Every drawing helper returns a matplotlib `Figure` and never calls `plt.show()`, so the same
code draws inline in a notebook, saves an SVG for the site, and runs headless in the tests.
`markdown_table` writes the tables that the build inserts into pages.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

__all__ = ["BOOK_STYLE", "markdown_table", "new_figure", "plot_lines", "show_heatmaps"]

#: Style applied to every figure of the book: white background (legible in dark mode),
#: no top/right spines, a font that ships with matplotlib so builds are reproducible.
BOOK_STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "svg.hashsalt": "attention-book",
    "svg.fonttype": "path",
}


def new_figure(figsize: tuple[float, float] = (5.0, 3.2)) -> Figure:
    """Create an empty figure in the book's style, outside pyplot's global figure list.

    Figures made this way are freed as soon as they are no longer referenced, so building
    many of them (as the site build does) never accumulates open pyplot windows.

    Args:
        figsize: Figure size in inches.

    Returns:
        A new, empty matplotlib figure.
    """
    with plt.rc_context(BOOK_STYLE):
        return Figure(figsize=figsize)


# --8<-- [start:show_heatmaps]
def show_heatmaps(
    matrices: torch.Tensor,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (2.5, 2.5),
    cmap: str = "Reds",
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
) -> Figure:
    """Draw a grid of attention-weight heatmaps that share one color bar.

    Args:
        matrices: Attention weights to draw, one heatmap per (row, column) cell.
        xlabel: Label of the x axis (usually "Keys").
        ylabel: Label of the y axis (usually "Queries").
        titles: Optional title for each column.
        figsize: Size of one heatmap in inches.
        cmap: Matplotlib colormap name.
        xticklabels: Optional tick labels for the keys (for example source words).
        yticklabels: Optional tick labels for the queries (for example generated words).

    Returns:
        The matplotlib figure.

    Shapes:
        - matrices: (num_rows, num_cols, num_queries, num_keys); a 2-D
          (num_queries, num_keys) tensor is drawn as a single heatmap.

    Raises:
        ValueError: If `matrices` does not have 2 or 4 dimensions, or `titles` does not
            match the number of columns.
    """
    matrices = _heatmap_grid(matrices, titles)  # (num_rows, num_cols, num_queries, num_keys)
    num_rows, num_cols = matrices.shape[:2]
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        fig = Figure(figsize=(figsize[0] * num_cols + 0.8, figsize[1] * num_rows))
        axes = fig.subplots(num_rows, num_cols, sharex=True, sharey=True, squeeze=False)
        vmax = float(matrices.max())  # one color scale for every heatmap
        for i in range(num_rows):
            for j in range(num_cols):
                weights = matrices[i, j].float().numpy()  # (num_queries, num_keys)
                image = axes[i, j].imshow(weights, cmap=cmap, vmin=0, vmax=vmax)
        _label_heatmaps(axes, xlabel, ylabel, titles, xticklabels, yticklabels)
        fig.colorbar(image, ax=axes, shrink=0.6)
    return fig


# --8<-- [end:show_heatmaps]


def _heatmap_grid(matrices: torch.Tensor, titles: Sequence[str] | None) -> torch.Tensor:
    """`show_heatmaps`' input as a 4-D tensor on the CPU, checked against its titles."""
    matrices = torch.as_tensor(matrices).detach().cpu()
    if matrices.dim() == 2:
        matrices = matrices[None, None]
    if matrices.dim() != 4:
        raise ValueError(
            "matrices must have shape (num_rows, num_cols, num_queries, num_keys) or "
            f"(num_queries, num_keys), got shape {tuple(matrices.shape)}"
        )
    num_cols = matrices.shape[1]
    if titles is not None and len(titles) != num_cols:
        raise ValueError(f"titles must have {num_cols} entries (one per column), got {len(titles)}")
    return matrices


def _label_heatmaps(
    axes,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None,
    xticklabels: Sequence[str] | None,
    yticklabels: Sequence[str] | None,
) -> None:
    """Label `show_heatmaps`' grid: keys under the last row, queries left of the first column."""
    num_rows, num_cols = axes.shape
    for i in range(num_rows):
        for j in range(num_cols):
            ax = axes[i, j]
            if i == num_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel)
            if titles is not None and i == 0:
                ax.set_title(titles[j])
            if xticklabels is not None:
                ax.set_xticks(range(len(xticklabels)), xticklabels, rotation=90)
            if yticklabels is not None:
                ax.set_yticks(range(len(yticklabels)), yticklabels)


def plot_lines(
    x: Sequence[float] | torch.Tensor,
    ys: Sequence[Sequence[float] | torch.Tensor],
    labels: Sequence[str] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    xscale: str = "linear",
    yscale: str = "linear",
    styles: Sequence[str] | None = None,
    figsize: tuple[float, float] = (5.0, 3.2),
) -> Figure:
    """Plot one or more curves that share an x axis.

    Args:
        x: The x values shared by every curve.
        ys: One sequence of y values per curve.
        labels: Legend entry for each curve.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Optional title.
        xscale: "linear" or "log".
        yscale: "linear" or "log".
        styles: Optional matplotlib format string per curve (for example "o-" or "--").
        figsize: Figure size in inches.

    Returns:
        The matplotlib figure.

    Shapes:
        - x: (num_points,)
        - each entry of ys: (num_points,)

    Raises:
        ValueError: If a curve's length differs from `x`, or `labels`/`styles` do not have
            one entry per curve.
    """
    x = torch.as_tensor(x).detach().cpu().float()
    for name, seq in (("labels", labels), ("styles", styles)):
        if seq is not None and len(seq) != len(ys):
            raise ValueError(f"{name} must have one entry per curve ({len(ys)}), got {len(seq)}")
    fig = new_figure(figsize)
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for i, y in enumerate(ys):
            y = torch.as_tensor(y).detach().cpu().float()
            if y.shape != x.shape:
                raise ValueError(
                    f"ys[{i}] must have the shape of x {tuple(x.shape)}, got {tuple(y.shape)}"
                )
            style = styles[i] if styles is not None else "-"
            label = labels[i] if labels is not None else None
            ax.plot(x.numpy(), y.numpy(), style, label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_xscale(xscale)
        ax.set_yscale(yscale)
        if title:
            ax.set_title(title)
        if labels is not None:
            ax.legend()
        fig.tight_layout()
    return fig


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table: one header row, then one row per item of `rows`.

    A ``|`` inside a cell is escaped, so a cell can hold any text.

    Args:
        header: The column titles.
        rows: The cells, one sequence per row, as many as `header`.

    Returns:
        The table's lines, ending with a newline.

    Raises:
        ValueError: If a row has another number of cells than `header`.
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"every row needs {len(header)} cells (the header's), got {list(row)}")

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"

    lines = [line(header), "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join([*lines, *(line(row) for row in rows)]) + "\n"
