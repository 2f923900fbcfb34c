"""Figures and build-time tables of the chapter "Self-attention and positional encoding".

Drawing only: the timing and gradient measurements live in
`attention_book.experiments.self_attention`; the encodings come from
`attention_book.positional`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.self_attention import (
    FIT_FROM,
    SEQUENCE_LENGTHS,
    TIMING_WIDTH,
    self_attention_gradient_reach,
    self_attention_timings,
)
from attention_book.plotting import BOOK_STYLE, new_figure
from attention_book.positional import sinusoidal_table

__all__ = [
    "FIGURES",
    "self_attention_encoding_columns",
    "self_attention_encoding_dot_products",
    "self_attention_encoding_heatmap",
    "self_attention_gradient_reach_plot",
    "self_attention_timing_plot",
    "self_attention_timing_table",
]

COLORS = {"convolution": "#2ca02c", "GRU": "#d62728", "self-attention": "#1f77b4"}


def self_attention_timing_plot() -> Figure:
    """Log-log forward time against sequence length, with the fitted slope in the legend."""
    timings = self_attention_timings()
    fig = new_figure((5.6, 3.6))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, result in timings.items():
            milliseconds = [1e3 * t for t in result["seconds"]]
            label = f"{name} (slope {result['slope']:.2f})"
            ax.plot(SEQUENCE_LENGTHS, milliseconds, "o-", color=COLORS[name], label=label)
        ax.axvspan(FIT_FROM, SEQUENCE_LENGTHS[-1], color="#999999", alpha=0.12, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel("forward time (ms, median)")
        ax.set_title(f"Width {TIMING_WIDTH}, one sequence, one CPU thread")
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def self_attention_timing_table() -> str:
    """Markdown table of the measured times and fitted slopes (the run the plot shows)."""
    timings = self_attention_timings()
    shown = [n for n in SEQUENCE_LENGTHS if n in (16, 128, 512, 1024, 2048)]
    header = " | ".join(f"n = {n}" for n in shown)
    lines = [
        f"| layer | {header} | slope for n ≥ {FIT_FROM} |",
        "| --- | " + "--- | " * len(shown) + "--- |",
    ]
    for name, result in timings.items():
        cells = [f"{1e3 * result['seconds'][SEQUENCE_LENGTHS.index(n)]:.2f} ms" for n in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {result['slope']:.2f} |")
    attention, gru = timings["self-attention"]["seconds"], timings["GRU"]["seconds"]
    faster = [n for n, a, g in zip(SEQUENCE_LENGTHS, attention, gru, strict=True) if a < g]
    lines.append("")
    if faster:
        lines.append(
            f"*In this build self-attention was faster than the GRU up to n = {max(faster)} "
            f"(at {len(faster)} of the {len(SEQUENCE_LENGTHS)} lengths measured).*"
        )
    else:
        lines.append("*In this build the GRU was faster than self-attention at every length.*")
    return "\n".join(lines)


def self_attention_gradient_reach_plot() -> Figure:
    """Gradient norm of the last output with respect to each input, against the distance."""
    reach = self_attention_gradient_reach()
    fig = new_figure((5.6, 3.4))
    colors = ["#2ca02c", "#d62728", "#1f77b4"]
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for (name, norms), color in zip(reach.items(), colors, strict=True):
            distances = [j for j, g in enumerate(norms) if g > 0]  # zero: no path at all
            values = [norms[j] for j in distances]
            ax.plot(distances, values, "o-", markersize=3, color=color, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("distance back from the last position")
        ax.set_ylabel("gradient norm (log)")
        ax.set_title("How far back the last output reaches (untrained)")
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def self_attention_encoding_heatmap() -> Figure:
    """The sinusoidal table for 60 positions and 32 features, as a heatmap."""
    table = sinusoidal_table(60, 32)
    fig = new_figure((6.0, 3.4))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        ax = fig.add_subplot()
        image = ax.imshow(table.T.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        ax.set_xlabel("position (row of P)")
        ax.set_ylabel("encoding dimension (column of P)")
        ax.set_title("Sinusoidal positional encoding, transposed")
        fig.colorbar(image, ax=ax, shrink=0.8)
        fig.tight_layout()
    return fig


def self_attention_encoding_columns() -> Figure:
    """Columns 6 to 9 of the table (60 positions, 32 features) as curves."""
    table = sinusoidal_table(60, 32)
    fig = new_figure((6.0, 3.0))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for column, style in zip(range(6, 10), ("-", "--", "-.", ":"), strict=True):
            ax.plot(table[:, column].numpy(), style, label=f"column {column}")
        ax.set_xlabel("position")
        ax.set_ylabel("value")
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
    return fig


def self_attention_encoding_dot_products() -> Figure:
    """Dot products of encodings: the Gram matrix, and against the distance from several i."""
    num_positions, num_hiddens = 100, 64
    table = sinusoidal_table(num_positions + 60, num_hiddens, dtype=torch.float64)
    gram = table[:num_positions] @ table[:num_positions].T  # (positions, positions)
    fig = new_figure((9.4, 3.5))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2)
        image = left.imshow(gram.numpy(), cmap="RdBu_r", vmin=-num_hiddens / 2,
                            vmax=num_hiddens / 2)  # fmt: skip
        left.grid(False)
        left.set_xlabel("position j")
        left.set_ylabel("position i")
        left.set_title("p_i · p_j (d = 64)")
        fig.colorbar(image, ax=left, shrink=0.8)
        offsets = torch.arange(0, 60)
        for start, style in zip((0, 20, 50), ("-", "--", ":"), strict=True):
            dots = table[start + offsets] @ table[start]  # (num_offsets,)
            right.plot(offsets.numpy(), dots.numpy(), style, label=f"from i = {start}")
        right.set_xlabel("distance δ")
        right.set_ylabel("p_i · p_(i+δ)")
        right.set_title("Depends on δ only; largest at δ = 0")
        right.legend(fontsize=8)
        fig.tight_layout()
    return fig


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    self_attention_timing_plot,
    self_attention_timing_table,
    self_attention_gradient_reach_plot,
    self_attention_encoding_heatmap,
    self_attention_encoding_columns,
    self_attention_encoding_dot_products,
)
