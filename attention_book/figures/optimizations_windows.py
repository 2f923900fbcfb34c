"""Figures of the deep dive on sliding windows and sparse attention: buffer, reach and patterns.

The slots of a rolling-buffer cache as tokens arrive (with and without an attention sink), the
receptive field of stacked sliding windows, measured by autograd
(`attention_book.experiments.optimizations_measurements.receptive_fields`), and four attention
patterns drawn from the masks of `attention_book.masking`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attention_book.experiments.optimizations_measurements import receptive_fields
from attention_book.masking import block_sparse_mask, causal_mask, sliding_window_mask
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "optimizations_receptive_field",
    "optimizations_rolling_buffer",
    "optimizations_sparse_patterns",
    "rolling_buffer_rows",
]


def rolling_buffer_rows(num_tokens: int, slots: int, sinks: int = 0) -> list[list[int | None]]:
    """Which token each slot of a rolling-buffer cache holds after each token is written.

    Token ``p < sinks`` is pinned in slot ``p`` (an attention sink, kept for good); every later
    token goes to slot ``sinks + (p - sinks) mod (slots - sinks)``, over the oldest of the
    rolling slots. With ``sinks = 0`` that is Mistral's slot ``p mod slots``.

    Args:
        num_tokens: Tokens written, one per row.
        slots: Size of the cache, sinks included.
        sinks: Slots pinned to the first tokens.

    Returns:
        One row per token written: the token (its position) in each slot, None where empty.

    Raises:
        ValueError: If ``sinks`` leaves no rolling slot.
    """
    if not 0 <= sinks < slots:
        raise ValueError(f"sinks must be in [0, slots) = [0, {slots}), got {sinks}")
    held: list[int | None] = [None] * slots
    rows = []
    for p in range(num_tokens):
        slot = p if p < sinks else sinks + (p - sinks) % (slots - sinks)
        held[slot] = p
        rows.append(list(held))
    return rows


_SLOT_COLOR, _SINK_COLOR, _NEW_COLOR = "#deebf7", "#e5d8f0", "#d95f0e"


def _draw_slot(ax, slot: int, step: int, token: int | None, color: str) -> None:
    """One slot of one row: a dashed empty box, or a filled box labelled with its token."""
    if token is None:
        box = {"facecolor": "white", "edgecolor": "#999999", "linestyle": "--"}
    else:
        box = {"facecolor": color, "edgecolor": "#333333"}
    ax.add_patch(Rectangle((slot + 0.05, step + 0.08), 0.9, 0.84, linewidth=0.8, **box))
    if token is not None:
        text = "white" if color == _NEW_COLOR else "black"
        label = f"$x_{{{token}}}$"
        ax.text(slot + 0.5, step + 0.5, label, ha="center", va="center", fontsize=9, color=text)


def optimizations_rolling_buffer() -> Figure:
    """A rolling-buffer cache of 4 slots as 8 tokens arrive, and the same with a pinned sink."""
    num_tokens, slots = 8, 4
    panels = {
        f"rolling buffer: token p in slot p mod {slots}": 0,
        f"first token kept (a sink) + last {slots - 1}": 1,
    }
    fig = new_figure((7.2, 3.9))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, len(panels))
        for ax, (title, sinks) in zip(axes, panels.items(), strict=True):
            for step, row in enumerate(rolling_buffer_rows(num_tokens, slots, sinks)):
                for slot, token in enumerate(row):
                    color = _SINK_COLOR if slot < sinks else _SLOT_COLOR
                    _draw_slot(ax, slot, step, token, _NEW_COLOR if token == step else color)
            ax.set_xlim(0, slots)
            ax.set_ylim(num_tokens, 0)  # the first token at the top
            names = [f"sink {s}" if s < sinks else f"slot {s}" for s in range(slots)]
            ax.set_xticks([s + 0.5 for s in range(slots)], names, fontsize=8)
            ax.xaxis.tick_top()
            rows = [f"$x_{{{t}}}$ written" for t in range(num_tokens)]
            ax.set_yticks([t + 0.5 for t in range(num_tokens)], rows, fontsize=8)
            ax.tick_params(length=0)
            for spine in ax.spines.values():
                spine.set_visible(False)
            ax.set_title(title, fontsize=9, pad=18)
        fig.text(0.5, 0.02, "each row is the cache after one more token; the newest in orange",
                 ha="center", fontsize=8, color="#444444")  # fmt: skip
        fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


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
FIGURES = (
    optimizations_rolling_buffer,
    optimizations_receptive_field,
    optimizations_sparse_patterns,
)
