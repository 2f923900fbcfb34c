"""Figures and build-time tables of the Vision Transformer chapter.

Drawing only: the experiment they show (the ViT and the CNN, their training on digits of
several training-set sizes, the cached result, the attention distances) lives in
`attention_book.experiments.vit`, imported here.
"""

from __future__ import annotations

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
    "data_efficiency_readings",
    "vit_attention_distance",
    "vit_augmentation_facts",
    "vit_augmentation_table",
    "vit_cls_attention",
    "vit_data_efficiency",
    "vit_data_efficiency_table",
    "vit_distance_findings",
    "vit_distance_table",
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


def data_efficiency_readings(vit: Sequence[float], cnn: Sequence[float]) -> dict[str, list[float]]:
    """The ViT's shortfall against the CNN at each training size, read two ways.

    As the stronger model nears 100 %, its lead in accuracy points must shrink, whatever the
    weaker one does; the ratio of the error rates says how many times as many test images
    the ViT gets wrong.

    Args:
        vit: The ViT's mean test accuracy at each training size, in percent.
        cnn: The CNN's, at the same sizes.

    Returns:
        ``{"points": [...], "error_ratio": [...]}``, one value per size: the CNN's accuracy
        minus the ViT's, in points, and the ViT's error rate divided by the CNN's.

    Raises:
        ValueError: If the two lists differ in length or are empty, or an accuracy is not in
            [0, 100] (the CNN's below 100, so that its error rate can divide).
    """
    if len(vit) != len(cnn) or not vit:
        raise ValueError(
            f"vit and cnn need one accuracy per training size each, got {len(vit)} and {len(cnn)}"
        )
    if not all(0 <= a <= 100 for a in vit) or not all(0 <= a < 100 for a in cnn):
        raise ValueError(
            "accuracies must be percentages, in [0, 100] for the ViT and [0, 100) for the CNN, "
            f"got vit={list(vit)}, cnn={list(cnn)}"
        )
    return {
        "points": [c - v for v, c in zip(vit, cnn, strict=True)],
        "error_ratio": [(100 - v) / (100 - c) for v, c in zip(vit, cnn, strict=True)],
    }


def _mean_accuracies(model: str) -> list[float]:
    """Mean test accuracy (in %) over the seeds, at each training size of the main runs."""
    return [statistics.mean(_accuracies(model, size)) for size in VIT_CONFIG.train_sizes]


def vit_data_efficiency() -> Figure:
    """Test accuracy, and test error on a log scale, against the number of training images."""
    sizes = VIT_CONFIG.train_sizes
    fig = new_figure((8.4, 3.4))
    with plt.rc_context(BOOK_STYLE):
        accuracy_ax, error_ax = fig.subplots(1, 2)
        for model, name in NAMES.items():
            values = np.array([_accuracies(model, size) for size in sizes])  # (sizes, seeds)
            style, color = STYLES[model]
            for ax, shown in ((accuracy_ax, values), (error_ax, 100 - values)):
                mean = shown.mean(1)
                errors = [mean - shown.min(1), shown.max(1) - mean]
                ax.errorbar(sizes, mean, yerr=errors, fmt=style, color=color, capsize=3, label=name)
        error_ax.set_yscale("log")
        error_ax.set_ylabel("test error (%, log scale)")
        accuracy_ax.set_ylabel("test accuracy (%)")
        for ax in (accuracy_ax, error_ax):
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.minorticks_off()
            ax.set_xlabel("training images (log scale)")
        error_ax.set_yticks([1, 2, 5, 10, 20, 50], ["1", "2", "5", "10", "20", "50"])
        accuracy_ax.legend(loc="lower right")
        error_ax.legend(loc="upper right")
        fig.tight_layout()
    return fig


def vit_data_efficiency_table() -> str:
    """A Markdown table: test accuracy of both models at each training size, and the gap.

    The gap is given in accuracy points and as the ratio of the error rates
    (`data_efficiency_readings`).
    """
    readings = data_efficiency_readings(_mean_accuracies("vit"), _mean_accuracies("cnn"))
    rows = []
    for i, size in enumerate(VIT_CONFIG.train_sizes):
        vit, cnn = _accuracies("vit", size), _accuracies("cnn", size)
        rows.append(
            [
                f"{size:,}",
                f"{_mean_std(vit)} %",
                f"{_mean_std(cnn)} %",
                f"{readings['points'][i]:+.1f}",
                f"{readings['error_ratio'][i]:.1f}",
            ]
        )
    header = [
        "training images",
        "ViT",
        "CNN",
        "CNN − ViT (points)",
        "ViT error ÷ CNN error",
    ]
    return markdown_table(header, rows)


def vit_findings() -> dict[str, str]:
    """The numbers the chapter's reading of the data-efficiency runs cites.

    Returns:
        The training sizes at the two ends ("small", "full"), the number of seeds, and at
        each end the gap in points ("gap_small", "gap_full", CNN minus ViT), both models'
        error rates in % ("vit_error_small", "cnn_error_small", ...), their ratio
        ("ratio_small", "ratio_full") and the share of its full-data accuracy each model
        keeps with the smallest set ("kept_vit", "kept_cnn", in %).
    """
    sizes = VIT_CONFIG.train_sizes
    vit, cnn = _mean_accuracies("vit"), _mean_accuracies("cnn")
    readings = data_efficiency_readings(vit, cnn)
    values = {
        "seeds": str(len(VIT_CONFIG.seeds)),
        "small": f"{sizes[0]:,}",
        "full": f"{sizes[-1]:,}",
        "kept_vit": f"{100 * vit[0] / vit[-1]:.0f}",
        "kept_cnn": f"{100 * cnn[0] / cnn[-1]:.0f}",
    }
    for end, i in (("small", 0), ("full", -1)):
        values[f"gap_{end}"] = f"{readings['points'][i]:+.1f}"
        values[f"ratio_{end}"] = f"{readings['error_ratio'][i]:.1f}"
        values[f"vit_error_{end}"] = f"{100 - vit[i]:.1f}"
        values[f"cnn_error_{end}"] = f"{100 - cnn[i]:.1f}"
    return values


def _final_losses(model: str, shift: int) -> list[float]:
    """The last epoch's training loss of each full-data run, the augmented runs' seeds only."""
    full, seeds = VIT_CONFIG.train_sizes[-1], VIT_CONFIG.augmented_seeds
    return [r["train_loss"][-1] for r in _runs(model, full, shift=shift) if r["seed"] in seeds]


def _span(values: Sequence[float]) -> str:
    """The lowest and the highest value, "0.05–0.09", or one value where they print alike."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low}–{high}"


def vit_augmentation_table() -> str:
    """A Markdown table: full-data accuracy and final training loss, without and with shifts."""
    full, shift = VIT_CONFIG.train_sizes[-1], VIT_CONFIG.augmented_shift
    seeds = VIT_CONFIG.augmented_seeds  # the same seeds in both columns
    rows = []
    for model, name in NAMES.items():
        plain = [100 * r["accuracy"] for r in _runs(model, full) if r["seed"] in seeds]
        shifted = _accuracies(model, full, shift=shift)
        change = statistics.mean(shifted) - statistics.mean(plain)
        rows.append(
            [
                name,
                f"{_mean_std(plain)} %",
                f"{_mean_std(shifted)} %",
                f"{change:+.1f}",
                _span(_final_losses(model, VIT_CONFIG.max_shift)),
                _span(_final_losses(model, shift)),
            ]
        )
    header = [
        "model",
        "test accuracy, no augmentation",
        f"test accuracy, shifts of up to {shift} pixel",
        "change (points)",
        "final training loss, no augmentation",
        "final training loss, with shifts",
    ]
    return markdown_table(header, rows)


def vit_augmentation_facts() -> dict[str, str]:
    """The numbers the chapter's reading of the augmentation runs cites.

    Returns:
        "shift" (pixels), "seeds" (how many runs per setting), for each model "<model>_effect"
        (a phrase: the change of the mean test accuracy, or that it lies within the spread of
        the seeds), and the lowest and highest final training loss of its runs without and
        with shifts ("<model>_loss_plain", "<model>_loss_shifted").
    """
    full, shift = VIT_CONFIG.train_sizes[-1], VIT_CONFIG.augmented_shift
    seeds = VIT_CONFIG.augmented_seeds
    values = {"shift": str(shift), "seeds": str(len(seeds))}
    for model in NAMES:
        plain = [100 * r["accuracy"] for r in _runs(model, full) if r["seed"] in seeds]
        shifted = _accuracies(model, full, shift=shift)
        change = statistics.mean(shifted) - statistics.mean(plain)
        spread = statistics.stdev(plain) + statistics.stdev(shifted)
        if abs(change) <= spread:
            effect = f"changes by {change:+.1f} points, within the spread of the seeds"
        else:
            effect = f"{'gains' if change > 0 else 'loses'} {abs(change):.1f} points"
        values[f"{model}_effect"] = effect
        values[f"{model}_loss_plain"] = _span(_final_losses(model, VIT_CONFIG.max_shift))
        values[f"{model}_loss_shifted"] = _span(_final_losses(model, shift))
    return values


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
    vit_augmentation_facts,
    vit_cls_attention,
    vit_attention_distance,
    vit_distance_table,
    vit_distance_findings,
    vit_window_cost,
)
