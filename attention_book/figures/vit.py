"""Figures and build-time tables of the Vision Transformer chapter.

Drawing only: the experiment they show (the ViT and the CNN, their training on digits of
several training-set sizes, the cached result, the attention distances) lives in
`attention_book.experiments.vit`, imported here.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from functools import cache
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attention_book.experiments.vit import (
    VIT_CONFIG,
    vit_attention_distances,
    vit_digits,
    vit_experiment,
    vit_trained_model,
)
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure
from attention_book.vit import patch_distances

__all__ = [
    "FIGURES",
    "vit_attention_distance",
    "vit_augmentation_table",
    "vit_cls_attention",
    "vit_data_efficiency",
    "vit_data_efficiency_table",
    "vit_distance_findings",
    "vit_findings",
    "vit_lr_table",
    "vit_patches",
    "vit_summary",
    "vit_total_time",
    "vit_training_curves",
    "vit_window_cost",
]

NAMES = {"vit": "ViT", "cnn": "ResNet-style CNN"}
STYLES = {"vit": ("o-", "C0"), "cnn": ("s--", "C1")}


def _runs(model: str, size: int | None = None, *, shift: int | None = None) -> list[dict[str, Any]]:
    """The cached runs of one model: at one training size (or every size), one augmentation.

    ``shift=None`` means the main runs' augmentation, ``VIT_CONFIG.max_shift``.
    """
    shift = VIT_CONFIG.max_shift if shift is None else shift
    return [
        r
        for r in vit_experiment()["runs"]
        if r["model"] == model and r["shift"] == shift and (size is None or r["size"] == size)
    ]


def _accuracies(model: str, size: int, *, shift: int | None = None) -> list[float]:
    """Final test accuracy (in %) of each seed's run."""
    return [100 * r["accuracy"] for r in _runs(model, size, shift=shift)]


def _mean_std(values: Sequence[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {spread:.1f}"


# ---------------------------------------------------------------------------------------------
# The model


def vit_patches() -> Figure:
    """A test digit cut into its 2x2 patches, and the sequence of flattened patches."""
    _, _, test_images, test_labels = vit_digits()
    image = test_images[int((test_labels == 3).nonzero()[0])][0]  # the first test "3"
    p = VIT_CONFIG.patch_size
    grid = image.shape[0] // p
    patches = image.unfold(0, p, p).unfold(1, p, p)  # (rows, cols, p, p)
    tokens = patches.reshape(grid * grid, p * p)  # (num_patches, p * p), row-major
    fig = new_figure((7.2, 2.9))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2, width_ratios=[1, 2.6])
        left.imshow(image, cmap="gray_r")
        for k in range(1, grid):
            left.axhline(k * p - 0.5, color="C3", linewidth=1.5)
            left.axvline(k * p - 0.5, color="C3", linewidth=1.5)
        for i in range(grid):
            for j in range(grid):
                left.text(j * p - 0.3, i * p - 0.05, str(i * grid + j + 1), color="C3", fontsize=7)
        left.set_title(f"8×8 image, {grid * grid} patches of {p}×{p}", fontsize=9)
        right.imshow(tokens.T, cmap="gray_r", aspect="auto")
        right.set_xticks(range(grid * grid), [str(k + 1) for k in range(grid * grid)], fontsize=7)
        right.set_yticks(range(p * p), [f"pixel {k + 1}" for k in range(p * p)], fontsize=7)
        right.set_xlabel("token (patch number)")
        right.set_title(f"the sequence: {grid * grid} tokens of c·p² = {p * p} numbers", fontsize=9)
        for ax in (left, right):
            ax.grid(False)
        left.set_xticks([])
        left.set_yticks([])
        fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# The experiment


def vit_summary() -> str:
    """A Markdown table: parameters, learning rate, full-data accuracy, time, both models."""
    result = vit_experiment()
    full = VIT_CONFIG.train_sizes[-1]
    cpu = {m: statistics.mean(r["cpu_seconds"] for r in _runs(m, full)) for m in NAMES}
    wall = {m: statistics.mean(r["train_seconds"] for r in _runs(m, full)) for m in NAMES}
    rows = []
    for model, name in NAMES.items():
        rows.append(
            [
                name,
                f"{result['num_parameters'][model]:,}",
                f"{result['lr'][model]:g}",
                f"{_mean_std(_accuracies(model, full))} %",
                f"{cpu[model]:.1f} s ({wall[model]:.1f} s)",
                f"{cpu[model] / cpu['cnn']:.2f}",
            ]
        )
    header = [
        "model",
        "parameters",
        "learning rate",
        f"test accuracy, {full:,} images (mean ± sd)",
        "CPU time per run (wall clock)",
        "CPU time ratio",
    ]
    return markdown_table(header, rows)


def vit_total_time() -> str:
    """A phrase: how long the build's training of all the models took (CPU and wall clock)."""
    result = vit_experiment()
    return (
        f"{len(result['runs']) + len(result['lr_trials'])} models, "
        f"{result['total_cpu_seconds']:.0f} s of CPU time "
        f"and {result['total_seconds']:.0f} s on the wall clock"
    )


def vit_lr_table() -> str:
    """A Markdown table: validation accuracy of each model at each learning rate tried."""
    result = vit_experiment()
    rows = []
    for lr in VIT_CONFIG.lr_choices:
        row = [f"{lr:g}"]
        for model in NAMES:
            (trial,) = [t for t in result["lr_trials"] if t["model"] == model and t["lr"] == lr]
            chosen = " (chosen)" if result["lr"][model] == lr else ""
            row.append(f"{100 * trial['validation_accuracy']:.1f} %{chosen}")
        rows.append(row)
    return markdown_table(
        ["learning rate", *(f"{n}, validation accuracy" for n in NAMES.values())], rows
    )


def vit_training_curves() -> Figure:
    """Training loss and test accuracy per epoch, full training split, mean and range of seeds."""
    full = VIT_CONFIG.train_sizes[-1]
    fig = new_figure((8.0, 3.2))
    with plt.rc_context(BOOK_STYLE):
        loss_ax, accuracy_ax = fig.subplots(1, 2)
        for model, name in NAMES.items():
            runs = _runs(model, full)
            style, color = STYLES[model]
            for ax, key, scale in ((loss_ax, "train_loss", 1), (accuracy_ax, "test_accuracy", 100)):
                values = np.array([r[key] for r in runs]) * scale  # (seeds, epochs)
                epochs = np.arange(1, values.shape[1] + 1)
                ax.plot(epochs, values.mean(0), style, color=color, markersize=3, label=name)
                ax.fill_between(epochs, values.min(0), values.max(0), color=color, alpha=0.2)
        loss_ax.set_yscale("log")
        loss_ax.set_ylabel("training loss (log scale)")
        accuracy_ax.set_ylabel("test accuracy (%)")
        accuracy_ax.set_ylim(0, 100)
        for ax in (loss_ax, accuracy_ax):
            ax.set_xlabel("epoch")
            ax.legend()
        fig.tight_layout()
    return fig


def vit_data_efficiency() -> Figure:
    """Test accuracy against the number of training images: mean and range over seeds."""
    sizes = VIT_CONFIG.train_sizes
    fig = new_figure((6.0, 3.6))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for model, name in NAMES.items():
            values = np.array([_accuracies(model, size) for size in sizes])  # (sizes, seeds)
            mean = values.mean(1)
            errors = [mean - values.min(1), values.max(1) - mean]
            style, color = STYLES[model]
            ax.errorbar(sizes, mean, yerr=errors, fmt=style, color=color, capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("training images (log scale)")
        ax.set_ylabel("test accuracy (%)")
        ax.legend(loc="lower right")
        fig.tight_layout()
    return fig


def vit_data_efficiency_table() -> str:
    """A Markdown table: test accuracy of both models at each training size."""
    rows = []
    for size in VIT_CONFIG.train_sizes:
        vit, cnn = _accuracies("vit", size), _accuracies("cnn", size)
        gap = statistics.mean(cnn) - statistics.mean(vit)
        rows.append([f"{size:,}", f"{_mean_std(vit)} %", f"{_mean_std(cnn)} %", f"{gap:+.1f}"])
    header = ["training images", "ViT", "CNN", "CNN − ViT (points)"]
    return markdown_table(header, rows)


def vit_findings() -> str:
    """Sentences that state what the data-efficiency runs show, from the cached numbers."""
    sizes = VIT_CONFIG.train_sizes
    gaps = [
        statistics.mean(_accuracies("cnn", s)) - statistics.mean(_accuracies("vit", s))
        for s in sizes
    ]
    seeds = len(VIT_CONFIG.seeds)
    if all(g > 0 for g in gaps):
        winner = f"The CNN is ahead at every training size, averaged over {seeds} seeds"
    elif all(g < 0 for g in gaps):
        winner = f"The ViT is ahead at every training size, averaged over {seeds} seeds"
    else:
        winner = f"Neither model is ahead at every size (averages over {seeds} seeds)"
    trend = "shrinks" if abs(gaps[-1]) < abs(gaps[0]) else "does not shrink"
    ratio = (
        100
        * statistics.mean(_accuracies("vit", sizes[0]))
        / statistics.mean(_accuracies("vit", sizes[-1]))
    )
    cnn_ratio = (
        100
        * statistics.mean(_accuracies("cnn", sizes[0]))
        / statistics.mean(_accuracies("cnn", sizes[-1]))
    )
    return (
        f"{winner}. The gap {trend} as the training set grows: {gaps[0]:+.1f} points "
        f"(CNN minus ViT) with {sizes[0]:,} images, {gaps[-1]:+.1f} points with all "
        f"{sizes[-1]:,}. With {sizes[0]:,} images the ViT keeps {ratio:.0f} % of its "
        f"full-data accuracy, the CNN {cnn_ratio:.0f} %.\n"
    )


def vit_augmentation_table() -> str:
    """A Markdown table and a sentence: full-data accuracy without and with random shifts."""
    full, shift = VIT_CONFIG.train_sizes[-1], VIT_CONFIG.augmented_shift
    rows, changes = [], {}
    for model, name in NAMES.items():
        seeds = VIT_CONFIG.augmented_seeds  # the same seeds in both columns
        plain = [100 * r["accuracy"] for r in _runs(model, full) if r["seed"] in seeds]
        shifted = _accuracies(model, full, shift=shift)
        changes[model] = statistics.mean(shifted) - statistics.mean(plain)
        rows.append(
            [name, f"{_mean_std(plain)} %", f"{_mean_std(shifted)} %", f"{changes[model]:+.1f}"]
        )
    header = ["model", "no augmentation", f"random shifts of up to {shift} pixel", "change"]

    def effect(model: str) -> str:
        plain = [100 * r["accuracy"] for r in _runs(model, full) if r["seed"] in seeds]
        spread = statistics.stdev(plain) + statistics.stdev(_accuracies(model, full, shift=shift))
        size = abs(changes[model])
        if size <= spread:
            return f"changes by {changes[model]:+.1f} points, within the spread of the seeds"
        return f"{'gains' if changes[model] > 0 else 'loses'} {size:.1f} points"

    sentence = f"With the same number of steps, the ViT {effect('vit')}; the CNN {effect('cnn')}."
    return markdown_table(header, rows) + "\n" + sentence + "\n"


# ---------------------------------------------------------------------------------------------
# Inside the trained ViT


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


def vit_distance_findings() -> str:
    """A Markdown table and a sentence: the heads' mean attention distances per block."""
    table, uniform = _distances()
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
    means = table.mean(dim=(0, 2))
    rising = all(b >= a for a, b in itertools.pairwise(means.tolist()))
    trend = "grows with every block" if rising else "does not grow steadily with depth"
    first, last = table[:, 0].flatten(), table[:, -1].flatten()
    closest = float(table.min())
    return (
        markdown_table(header, rows)
        + f"\nDistances in pixels, over the {len(_test_images()[1])} test images and the heads of "
        f"the {table.shape[0]} full-data ViTs; uniform attention over the patches would give "
        f"{uniform:.2f}. The mean over the heads {trend}, from {means[0]:.2f} in block 1 to "
        f"{means[-1]:.2f} in block {table.shape[1]}; the heads of block 1 spread from "
        f"{first.min():.2f} to {first.max():.2f}, those of block {table.shape[1]} from "
        f"{last.min():.2f} to {last.max():.2f}. The most local head of all still looks "
        f"{100 * closest / uniform:.0f} % as far as uniform attention would.\n"
    )


# ---------------------------------------------------------------------------------------------
# Where the field went


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
    vit_patches,
    vit_lr_table,
    vit_summary,
    vit_total_time,
    vit_training_curves,
    vit_data_efficiency,
    vit_data_efficiency_table,
    vit_findings,
    vit_augmentation_table,
    vit_cls_attention,
    vit_attention_distance,
    vit_distance_findings,
    vit_window_cost,
)
