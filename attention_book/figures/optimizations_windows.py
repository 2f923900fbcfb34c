"""Figures of the deep dive on sliding windows and sparse attention: reach and patterns.

The receptive field of stacked sliding windows, measured by autograd
(`attention_book.experiments.optimizations_measurements.receptive_fields`), and four attention
patterns drawn from the masks of `attention_book.masking`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.optimizations_measurements import receptive_fields
from attention_book.masking import block_sparse_mask, causal_mask, sliding_window_mask
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = ["FIGURES", "optimizations_receptive_field", "optimizations_sparse_patterns"]


def optimizations_receptive_field() -> Figure:
    """Which inputs reach each output, for 1 to 4 layers of the same sliding window."""
    data = receptive_fields()
    window, n, fields = data["window"], data["n"], data["fields"]
    fig = new_figure((2.3 * len(fields), 3.1))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, len(fields), sharey=True)
        for ax, (depth, field) in zip(axes, fields.items(), strict=True):
            reach = int(field[-1].sum())
            ax.imshow(field.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
            ax.set_title(f"{depth} layer{'s' * (depth > 1)}: reach {reach}", fontsize=9)
            ax.set_xlabel("input position")
        axes[0].set_ylabel("output position")
        fig.suptitle(
            f"Window of {window} keys per layer; measured by autograd (n = {n})", fontsize=10
        )
        fig.tight_layout()
    return fig


def _longformer_layout(num_blocks: int, global_blocks: int = 1) -> torch.Tensor:
    """Block layout: each block sees its neighbours; the first blocks see and are seen by all."""
    index = torch.arange(num_blocks)
    layout = (index[:, None] - index[None, :]).abs() <= 1
    layout[:global_blocks, :] = True
    layout[:, :global_blocks] = True
    return layout


def optimizations_sparse_patterns() -> Figure:
    """Four attention patterns of 32 tokens, with the share of (query, key) pairs each keeps."""
    n, block = 32, 4
    local = torch.eye(n // block, dtype=torch.bool)  # each block sees only itself
    patterns = {
        "causal (full)": causal_mask(n, n),
        "causal sliding window, 6 keys": sliding_window_mask(n, n, 6),
        "local blocks (Swin-like windows)": block_sparse_mask(local, block),
        "neighbour blocks + 1 global block": block_sparse_mask(
            _longformer_layout(n // block), block
        ),
    }
    fig = new_figure((2.4 * len(patterns), 2.9))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, len(patterns), sharey=True)
        for ax, (name, mask) in zip(axes, patterns.items(), strict=True):
            ax.imshow(mask.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
            ax.set_title(f"{name}\n{mask.float().mean():.0%} of the pairs", fontsize=8)
            ax.set_xlabel("key")
        axes[0].set_ylabel("query")
        fig.tight_layout()
    return fig


#: The figures and build-time tables of this module, in the order of the page.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    optimizations_receptive_field,
    optimizations_sparse_patterns,
)
