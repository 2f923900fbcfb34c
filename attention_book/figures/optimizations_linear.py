"""Figures of the deep dive "Linear attention": its time and memory against softmax attention.

The measurements are `attention_book.experiments.optimizations_measurements`'s
(`linear_attention_measurements`: causal, forward only, one CPU thread).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.experiments.optimizations_measurements import (
    LINEAR_HEAD_DIM,
    linear_attention_measurements,
)
from attention_book.figures.optimizations import COLORS
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "optimizations_linear_crossover",
    "optimizations_linear_facts",
    "optimizations_linear_scaling",
]


def optimizations_linear_scaling() -> Figure:
    """Time and peak memory of causal softmax and linear attention against n (log-log)."""
    data = linear_attention_measurements()
    n = data["seq_lens"]
    labels = {
        "softmax": "softmax, explicit (book's DotProductAttention)",
        "softmax_fused": "softmax, PyTorch fused SDPA",
        "linear": "linear attention (elu + 1)",
    }
    fig = new_figure((8.6, 3.5))
    with plt.rc_context(BOOK_STYLE):
        time_ax, memory_ax = fig.subplots(1, 2)
        for method, label in labels.items():
            milliseconds = [1e3 * t for t in data[method]["seconds"]]
            mib = [b / 2**20 for b in data[method]["bytes"]]
            time_ax.plot(n, milliseconds, "o-", color=COLORS[method], label=label, ms=3)
            memory_ax.plot(n, mib, "o-", color=COLORS[method], label=label, ms=3)
        for ax, ylabel in (
            (time_ax, "CPU time (ms, median)"),
            (memory_ax, "peak tensor memory (MiB)"),
        ):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length n")
            ax.set_ylabel(ylabel)
        time_ax.legend(fontsize=7)
        fig.suptitle(
            f"Causal, forward only, 4 heads of {LINEAR_HEAD_DIM}, float32, one CPU thread",
            fontsize=10,
        )
        fig.tight_layout()
    return fig


def _crossover(seq_lens: list[int], ours: list[float], theirs: list[float]) -> int | None:
    """The first length from which `ours` stays below `theirs`, or None."""
    for index, n in enumerate(seq_lens):
        if all(a < b for a, b in zip(ours[index:], theirs[index:], strict=True)):
            return n
    return None


def optimizations_linear_crossover() -> str:
    """Markdown table: from which length linear attention is faster and smaller."""
    data = linear_attention_measurements()
    n = data["seq_lens"]
    linear = data["linear"]
    lines = [
        "| linear attention compared with | faster from | less memory from |",
        "| --- | --- | --- |",
    ]
    for method, name in (("softmax", "explicit softmax"), ("softmax_fused", "fused SDPA")):
        cells = []
        for quantity in ("seconds", "bytes"):
            at = _crossover(n, linear[quantity], data[method][quantity])
            cells.append(f"n = {at:,}" if at else "no measured length")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def optimizations_linear_facts() -> dict[str, str]:
    """The numbers the caption of the crossover table cites, from the same measurements.

    Returns:
        The lengths measured ("first_length", "previous_length" and "last_length": the
        shortest, the second longest and the longest), "fused_ratio" (fused softmax
        attention's time over linear attention's at the longest), and how the peak memory
        grew from the second longest to the longest ("growth_softmax", "growth_fused",
        "growth_linear").
    """
    data = linear_attention_measurements()
    n = data["seq_lens"]
    growth = {
        m: data[m]["bytes"][-1] / data[m]["bytes"][-2]
        for m in ("softmax", "softmax_fused", "linear")
    }
    seconds = {m: data[m]["seconds"][-1] for m in ("softmax_fused", "linear")}
    return {
        "first_length": str(n[0]),
        "previous_length": f"{n[-2]:,}",
        "last_length": f"{n[-1]:,}",
        "fused_ratio": f"{seconds['softmax_fused'] / seconds['linear']:.1f}",
        "growth_softmax": f"{growth['softmax']:.1f}",
        "growth_fused": f"{growth['softmax_fused']:.1f}",
        "growth_linear": f"{growth['linear']:.1f}",
    }


#: The figures and build-time tables of this module, in the order of the page.
FIGURES = (
    optimizations_linear_scaling,
    optimizations_linear_crossover,
    optimizations_linear_facts,
)
