"""Figures of the Vision Transformer chapter on the trained ViT's attention, and on Swin's windows.

Drawing only: where the class token looks, how far each head looks (the mean attention
distance against depth), how alike the learned position embeddings are (the cosine similarity
of every pair of patches' embeddings, and the words that read it), and what windows save; the
trained models and the distances come from `attention_book.experiments.vit`. The training
results are drawn by `attention_book.figures.vit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor
from torch.nn import functional as F

from attention_book.experiments.vit import (
    VIT_CONFIG,
    vit_attention_distances,
    vit_digits,
    vit_make_models,
    vit_trained_model,
)
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure
from attention_book.store import seed_offset
from attention_book.vit import ViT, patch_distances

__all__ = [
    "FIGURES",
    "position_similarity",
    "position_similarity_readings",
    "position_similarity_verdict",
    "vit_attention_distance",
    "vit_cls_attention",
    "vit_distance_findings",
    "vit_distance_table",
    "vit_position_findings",
    "vit_position_similarity",
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


# ---------------------------------------------------------------------------------------------
# The learned position embeddings (the ViT paper's Figure 7, centre)


def position_similarity(vit: ViT, *, num_prefix_tokens: int = 1) -> Tensor:
    """Cosine similarity of every patch's position embedding with every other patch's.

    The rows of the learned table ``vit.pos_embedding.P`` that belong to the patches (the
    class token's row, and any other prefix row, left out), compared pairwise: 1 for two
    vectors that point the same way, 0 for orthogonal ones, -1 for opposite ones.

    Args:
        vit: A ViT with a learned position table.
        num_prefix_tokens: Rows of the table before the patches' (1: the class token).

    Returns:
        The similarities, patches in row-major order, float64.

    Shapes:
        - returns: ``(num_patches, num_patches)``, symmetric, ones on the diagonal
    """
    table = vit.pos_embedding.P.detach()[0, num_prefix_tokens:].double()  # (num_patches, D)
    unit = F.normalize(table, dim=-1)  # (num_patches, D): each row of length 1
    return unit @ unit.T  # (num_patches, num_patches)


def position_similarity_readings(similarity: Tensor, grid_size: int) -> dict[str, float]:
    """Mean similarities of the pairs of patches the chapter compares, on a square grid.

    Args:
        similarity: `position_similarity` of a ViT whose patches form a ``grid_size`` square.
        grid_size: Patches per row and per column.

    Returns:
        "near": the mean over the pairs of neighbours one patch apart (above, below, left,
        right); "far": over the pairs three or more patches apart; "line": over the pairs in
        the same row or the same column (a patch and itself left out); "off_line": over the
        pairs that share neither.

    Raises:
        ValueError: If `similarity` is not a square matrix with one row per patch.
    """
    num_patches = grid_size * grid_size
    if similarity.shape != (num_patches, num_patches):
        raise ValueError(
            f"similarity must have shape (num_patches, num_patches) = ({num_patches}, "
            f"{num_patches}) for a {grid_size}x{grid_size} grid, got {tuple(similarity.shape)}"
        )
    distance = patch_distances(grid_size)  # (num_patches, num_patches), in patches
    row = torch.arange(num_patches) // grid_size
    col = torch.arange(num_patches) % grid_size
    shared = (row[:, None] == row[None]) | (col[:, None] == col[None])  # same row or column
    similarity = similarity.double()
    return {
        "near": float(similarity[distance == 1].mean()),
        "far": float(similarity[distance >= 3].mean()),
        "line": float(similarity[shared & (distance > 0)].mean()),
        "off_line": float(similarity[~shared].mean()),
    }


def position_similarity_verdict(readings: Sequence[Mapping[str, float]]) -> dict[str, str]:
    """The chapter's words on the position embeddings, from each model's readings.

    A comparison is stated only in the direction every model agrees on; where the models
    disagree, the words say so, and how many of them found each direction.

    Args:
        readings: One `position_similarity_readings` per trained model.

    Returns:
        "distance_verdict": neighbours against far positions; "line_verdict": the patch's row
        and column against the rest. Each also says whether it agrees with the ViT paper
        (closer patches, and patches in the same row or column, are more alike).

    Raises:
        ValueError: If `readings` is empty.
    """
    if not readings:
        raise ValueError("readings must hold one model's readings at least, got none")
    n = len(readings)
    models = "both models" if n == 2 else f"every one of the {n} models"
    if n == 1:
        models = "the one model"
    near = sum(r["near"] > r["far"] for r in readings)
    nearer = sum(r["near"] < r["far"] for r in readings)
    if near == n:
        distance = f"in {models}, neighbours are more alike than far positions, as in the paper"
    elif nearer == n:
        distance = (
            f"in {models}, neighbours are less alike than far positions, the opposite of the "
            "paper's finding"
        )
    else:
        distance = (
            f"the models disagree ({near} of {n} find neighbours more alike than far "
            "positions), so distance leaves no consistent mark, unlike in the paper"
        )
    line = sum(r["line"] > r["off_line"] for r in readings)
    off_line = sum(r["line"] < r["off_line"] for r in readings)
    if line == n:
        lines = (
            f"in {models}, a patch resembles its row and column more than the rest, as in the paper"
        )
    elif off_line == n:
        lines = (
            f"in {models}, a patch resembles its row and column less than the rest, the "
            "opposite of the paper's finding"
        )
    else:
        lines = (
            f"the models disagree ({line} of {n} find the row and column more alike than "
            "the rest), so rows and columns leave no consistent mark, unlike in the paper"
        )
    return {"distance_verdict": distance, "line_verdict": lines}


@cache
def _position_similarities() -> Tensor:
    """`position_similarity` of each full-data ViT: (num_seeds, num_patches, num_patches)."""
    return torch.stack([position_similarity(vit_trained_model(s)) for s in VIT_CONFIG.seeds])


def vit_position_similarity() -> Figure:
    """Cosine similarity of the learned position embeddings (the ViT paper's Figure 7, centre).

    One small grid per patch of the full-data ViT of seed 0, at that patch's place: the
    similarity of its position embedding with every patch's, on the same red-blue scale
    from -1 to 1 (its own place is 1).
    """
    similarity = _position_similarities()[0]
    grid = 8 // VIT_CONFIG.patch_size
    fig = new_figure((5.0, 4.0))
    fig.set_layout_engine("constrained")
    with plt.rc_context(BOOK_STYLE):
        axes = fig.subplots(grid, grid, squeeze=False)
        for patch in range(grid * grid):
            row, col = divmod(patch, grid)
            ax = axes[row, col]
            image = ax.imshow(
                similarity[patch].reshape(grid, grid), cmap="RdBu_r", vmin=-1.0, vmax=1.0
            )
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            for spine in ax.spines.values():  # a thin frame, so pale cells keep their edge
                spine.set_visible(True)
                spine.set_linewidth(0.5)
                spine.set_color("gray")
            if row == 0:
                ax.set_title(f"column {col + 1}", fontsize=9)
            if col == 0:
                ax.set_ylabel(f"row {row + 1}", fontsize=9)
        fig.supxlabel(
            "the small grid at row r, column c: that patch against every patch", fontsize=9
        )
        bar = fig.colorbar(image, ax=axes, shrink=0.8, ticks=[-1, -0.5, 0, 0.5, 1])
        bar.set_label("cosine similarity of position embeddings")
    return fig


def vit_position_findings() -> dict[str, str]:
    """The numbers the chapter's reading of the position embeddings cites, and its verdict.

    Returns:
        "models" (how many full-data ViTs), their mean "near", "far", "line" and "off_line"
        similarities (see `position_similarity_readings`), "growth" (how many times longer
        the patches' position embeddings are after training than at its start, on average)
        and `position_similarity_verdict`'s "distance_verdict" and "line_verdict".
    """
    grid = 8 // VIT_CONFIG.patch_size
    readings = [position_similarity_readings(s, grid) for s in _position_similarities()]
    lengths, starts = [], []
    for seed in VIT_CONFIG.seeds:
        lengths.append(vit_trained_model(seed).pos_embedding.P.detach()[0, 1:].norm(dim=-1))
        with torch.random.fork_rng(devices=[]):  # leave the caller's generator alone
            torch.manual_seed(seed + seed_offset())  # as `set_seed` seeds the training run,
            start, _ = vit_make_models()  # which builds its ViT first: where it started
        starts.append(start.pos_embedding.P.detach()[0, 1:].norm(dim=-1))
    growth = float(torch.cat(lengths).mean() / torch.cat(starts).mean())
    values = {"models": str(len(readings)), "growth": f"{growth:.0f}"}
    for key in ("near", "far", "line", "off_line"):
        mean = sum(r[key] for r in readings) / len(readings)
        values[key] = f"{mean:.2f}".replace("-", "−")
    return values | position_similarity_verdict(readings)


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


FIGURES = (
    vit_cls_attention,
    vit_attention_distance,
    vit_distance_table,
    vit_distance_findings,
    vit_position_similarity,
    vit_position_findings,
    vit_window_cost,
)
