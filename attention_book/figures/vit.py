"""Figures and build-time tables of the Vision Transformer chapter.

Drawing only: the experiment they show (the ViT and the CNN, their training on digits of
several training-set sizes, the cached result) lives in `attention_book.experiments.vit`,
imported here. What the trained ViT attends to is drawn by `attention_book.figures.vit_inside`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from attention_book.experiments.vit import (
    VIT_CONFIG,
    vit_digits,
    vit_experiment,
)
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure

__all__ = [
    "FIGURES",
    "data_efficiency_readings",
    "vit_augmentation_facts",
    "vit_augmentation_table",
    "vit_data_efficiency",
    "vit_data_efficiency_table",
    "vit_findings",
    "vit_lr_table",
    "vit_patches",
    "vit_summary",
    "vit_total_time",
    "vit_training_curves",
    "vit_verdict",
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


def vit_total_time() -> dict[str, str]:
    """How long the build's training of all the models took (CPU and wall clock)."""
    result = vit_experiment()
    return {
        "models": str(len(result["runs"]) + len(result["lr_trials"])),
        "cpu_seconds": f"{result['total_cpu_seconds']:.0f}",
        "seconds": f"{result['total_seconds']:.0f}",
    }


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
        ("ratio_small", "ratio_full"), the mean number of test images each gets wrong
        ("vit_wrong_small", "cnn_wrong_full", ...: a ratio of small counts moves a lot with
        one image; "ratio_step_full" is how much one CNN mistake more or fewer moves the
        full-data ratio) and the share of its full-data accuracy each model keeps with the
        smallest set ("kept_vit", "kept_cnn", in %).
    """
    num_test = len(vit_digits()[3])
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
        values[f"vit_wrong_{end}"] = f"{(100 - vit[i]) * num_test / 100:.0f}"
        values[f"cnn_wrong_{end}"] = f"{(100 - cnn[i]) * num_test / 100:.0f}"
    values["num_test"] = f"{num_test:,}"
    # One CNN mistake more or fewer, over the seeds' mean, moves the full-data ratio this much.
    cnn_wrong = (100 - cnn[-1]) * num_test / 100
    values["ratio_step_full"] = f"{readings['error_ratio'][-1] / max(cnn_wrong, 1):.1f}"
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


def vit_verdict(plain: dict[str, list[float]], shifted: dict[str, list[float]]) -> dict[str, str]:
    """The chapter's words that depend on its numbers: what the shifts did to each model.

    Args:
        plain: For "vit" and "cnn", the full-data test accuracy (%) of each seed's run without
            augmentation (the augmented runs' seeds only).
        shifted: The same with shifted training images.

    Returns:
        For each model, "<model>_effect": a phrase on the change of its mean test accuracy,
        or that the change lies within the spread of the seeds (the sum of both standard
        deviations).
    """
    words = {}
    for model in plain:
        change = statistics.mean(shifted[model]) - statistics.mean(plain[model])
        spread = statistics.stdev(plain[model]) + statistics.stdev(shifted[model])
        if abs(change) <= spread:
            words[f"{model}_effect"] = (
                f"changes by {change:+.1f} points, within the spread of the seeds"
            )
        else:
            words[f"{model}_effect"] = (
                f"{'gains' if change > 0 else 'loses'} {abs(change):.1f} points"
            )
    return words


def vit_augmentation_facts() -> dict[str, str]:
    """The numbers the chapter's reading of the augmentation runs cites, and `vit_verdict`'s words.

    Returns:
        "shift" (pixels), "seeds" (how many runs per setting), for each model the lowest and
        highest final training loss of its runs without and with shifts
        ("<model>_loss_plain", "<model>_loss_shifted"), and "<model>_effect" (`vit_verdict`).
    """
    full, shift = VIT_CONFIG.train_sizes[-1], VIT_CONFIG.augmented_shift
    seeds = VIT_CONFIG.augmented_seeds
    values = {"shift": str(shift), "seeds": str(len(seeds))}
    plain, shifted = {}, {}
    for model in NAMES:
        plain[model] = [100 * r["accuracy"] for r in _runs(model, full) if r["seed"] in seeds]
        shifted[model] = _accuracies(model, full, shift=shift)
        values[f"{model}_loss_plain"] = _span(_final_losses(model, VIT_CONFIG.max_shift))
        values[f"{model}_loss_shifted"] = _span(_final_losses(model, shift))
    return values | vit_verdict(plain, shifted)


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
)
