"""Figures of the Vision Transformer chapter on the trained ViT's attention, and on Swin's windows.

Drawing only: where the class token looks, how far each head looks (the mean attention
distance against depth), and what windows save; the trained models and the distances come
from `attention_book.experiments.vit`. The training results are drawn by
`attention_book.figures.vit`.
"""

from __future__ import annotations

from functools import cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attention_book.experiments.vit import (
    VIT_CONFIG,
    vit_attention_distances,
    vit_digits,
    vit_trained_model,
)
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure
from attention_book.vit import patch_distances

__all__ = [
    "FIGURES",
    "vit_attention_distance",
    "vit_cls_attention",
    "vit_distance_findings",
    "vit_distance_table",
    "vit_window_cost",
]


@cache
def _test_images() -> tuple[torch.Tensor, torch.Tensor]:
    _, _, test_images, test_labels = vit_digits()
    return test_images, test_labels


def vit_cls_attention() -> Figure:
    """Where the class token looks: its attention over the patches in every block.

    The first test image of the digits 0, 2, 4 and 7 (a fixed rule), the full-data ViT of
    seed 0, each block's class-token row averaged over the heads.
    """
    vit = vit_trained_model(0)
    images, labels = _test_images()
    chosen = [int((labels == digit).nonzero()[0]) for digit in (0, 2, 4, 7)]
    with torch.no_grad():
        predictions = vit(images[chosen]).argmax(dim=1)
    p = VIT_CONFIG.patch_size
    grid = 8 // p
    num_blks = len(vit.attention_weights)
    fig = new_figure((1.45 * (num_blks + 1), 1.5 * len(chosen)))
    with plt.rc_context(BOOK_STYLE):
        axes = fig.subplots(len(chosen), num_blks + 1, squeeze=False)
        for row, index in enumerate(chosen):
            axes[row, 0].imshow(images[index, 0], cmap="gray_r")
            axes[row, 0].set_ylabel(
                f"label {int(labels[index])}\npredicted {int(predictions[row])}"
            )
            for blk in range(num_blks):
                weights = vit.attention_weights[blk][row, :, 0, 1:].mean(0)  # (num_patches,)
                ax = axes[row, blk + 1]
                ax.imshow(weights.reshape(grid, grid), cmap="Reds", vmin=0)
                if row == 0:
                    ax.set_title(f"block {blk + 1}", fontsize=9)
        axes[0, 0].set_title("image", fontsize=9)
        for ax in axes.flat:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
        fig.tight_layout()
    return fig


@cache
def _distances() -> tuple[torch.Tensor, float]:
    """Mean attention distances of the full-data ViTs, and that of uniform attention.

    The table is (num_seeds, num_blks, num_heads), in pixels, over the test images.
    """
    images, _ = _test_images()
    table = torch.stack(
        [vit_attention_distances(vit_trained_model(s), images) for s in VIT_CONFIG.seeds]
    )
    p = VIT_CONFIG.patch_size
    return table, float(patch_distances(8 // p, p).mean())


def vit_attention_distance() -> Figure:
    """Mean attention distance of every head against depth (the ViT paper's Figure 7, right)."""
    table, uniform = _distances()
    num_seeds, num_blks, num_heads = table.shape
    fig = new_figure((5.6, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        markers = "o^s"
        for seed in range(num_seeds):
            for blk in range(num_blks):
                offsets = (np.arange(num_heads) - (num_heads - 1) / 2) * 0.05 + 0.2 * (seed - 1)
                ax.scatter(
                    blk + 1 + offsets,
                    table[seed, blk],
                    marker=markers[seed % len(markers)],
                    color=[f"C{h}" for h in range(num_heads)],
                    s=22,
                    label=f"seed {VIT_CONFIG.seeds[seed]}" if blk == 0 else None,
                )
        ax.axhline(uniform, color="gray", linestyle="--", linewidth=1)
        ax.text(0.6, uniform, "uniform attention", va="bottom", fontsize=8, color="gray")
        ax.set_xticks(range(1, num_blks + 1))
        ax.set_xlim(0.5, num_blks + 0.5)
        ax.set_ylim(0, None)
        ax.set_xlabel("block (network depth)")
        ax.set_ylabel("mean attention distance (pixels)")
        legend = ax.legend(loc="lower right", fontsize=8)
        for handle in legend.legend_handles:
            handle.set_color("black")
        fig.tight_layout()
    return fig


def vit_distance_table() -> str:
    """A Markdown table: the heads' mean attention distances per block, in pixels."""
    table, _ = _distances()
    rows = []
    for blk in range(table.shape[1]):
        values = table[:, blk].flatten()  # every head of every seed
        rows.append(
            [
                str(blk + 1),
                f"{values.min():.2f}",
                f"{values.mean():.2f}",
                f"{values.max():.2f}",
            ]
        )
    header = ["block", "smallest head", "mean of the heads", "largest head"]
    return markdown_table(header, rows)


def vit_distance_findings() -> dict[str, str]:
    """The numbers the chapter's reading of the attention distances cites.

    Returns:
        "images" and "models" (what the distances are averaged over), "blocks", "uniform"
        (the distance of uniform attention over the patches), "first_mean" and "last_mean"
        (the mean over the heads in the first and the last block), "mean_low" and
        "mean_high" (the lowest and highest of those per-block means), "band_percent" (the
        width of that band as a percentage of "uniform"), "head_low" and
        "head_high" (the most local and the farthest-looking head of all),
        "within_block" (the widest spread of the heads inside one block), and
        "closest_percent" ("head_low" as a percentage of "uniform"); distances in pixels.
    """
    table, uniform = _distances()
    means = table.mean(dim=(0, 2))  # (num_blks,): the mean over the seeds and heads
    within = (table.amax(dim=(0, 2)) - table.amin(dim=(0, 2))).max()
    return {
        "images": str(len(_test_images()[1])),
        "models": str(table.shape[0]),
        "blocks": str(table.shape[1]),
        "uniform": f"{uniform:.2f}",
        "first_mean": f"{means[0]:.2f}",
        "last_mean": f"{means[-1]:.2f}",
        "mean_low": f"{means.min():.2f}",
        "mean_high": f"{means.max():.2f}",
        "band_percent": f"{100 * float(means.max() - means.min()) / uniform:.0f}",
        "head_low": f"{table.min():.2f}",
        "head_high": f"{table.max():.2f}",
        "within_block": f"{within:.2f}",
        "closest_percent": f"{100 * float(table.min()) / uniform:.0f}",
    }


def vit_window_cost() -> Figure:
    """Multiply-adds of global and of window self-attention against the number of patches.

    The counts of Liu et al. (2021), eq. (1)-(2), for C = 96 channels and 7x7 windows:
    global 4hwC² + 2(hw)²C, windows 4hwC² + 2M²hwC.
    """
    channels, window = 96, 7
    sides = np.arange(7, 113, 7)  # h = w patches per side: 7 to 112
    patches = sides**2
    projections = 4 * patches * channels**2
    fig = new_figure((5.6, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        ax.plot(
            patches, (projections + 2 * patches**2 * channels) / 1e9, "o-", label="global (ViT)"
        )
        label = f"{window}×{window} windows (Swin)"
        ax.plot(
            patches, (projections + 2 * window**2 * patches * channels) / 1e9, "s--", label=label
        )
        ax.set_xlabel("patches h·w")
        ax.set_ylabel("multiply-adds of one layer (billions)")
        ax.set_title(f"C = {channels}", fontsize=9)
        ax.legend()
        fig.tight_layout()
    return fig


#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    vit_cls_attention,
    vit_attention_distance,
    vit_distance_table,
    vit_distance_findings,
    vit_window_cost,
)
