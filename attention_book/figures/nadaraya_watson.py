"""Figures and build-time tables of the chapter "Attention pooling: Nadaraya-Watson regression".

Drawing only: the data set, the trained model, the bandwidths chosen by leave-one-out and the
test errors come from `attention_book.experiments.nadaraya_watson`.
"""

from __future__ import annotations

import time

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.nadaraya_watson import (
    BANDWIDTHS,
    KERNEL_NAMES,
    nw_bandwidth_sweep_errors,
    nw_data,
    nw_loo_bandwidth,
    nw_test_errors,
    nw_trained_model,
    nw_training_noise,
    nw_without_leave_one_out,
)
from attention_book.figures import Frames
from attention_book.nadaraya_watson import (
    KERNELS,
    attention_pooling,
    average_pooling,
    train_nw_kernel_regression,
)
from attention_book.plotting import BOOK_STYLE, new_figure, plot_lines, show_heatmaps
from attention_book.timing import median_seconds, torch_threads

__all__ = [
    "FIGURES",
    "nw_average_pooling",
    "nw_bandwidth_explorer",
    "nw_bandwidth_sweep",
    "nw_exercise_without_leave_one_out",
    "nw_facts",
    "nw_gaussian_heatmap",
    "nw_gaussian_pooling",
    "nw_heatmaps_compared",
    "nw_kernel_comparison",
    "nw_parametric_fit",
    "nw_test_error_table",
    "nw_training_curve",
    "nw_verdict",
    "nw_weight_spread",
]


def _fit_axes(ax, title: str) -> None:
    """Draw the training points and the true function on `ax`."""
    data = nw_data()
    ax.plot(data.x_train, data.y_train, "o", color="#999999", markersize=3.5, label="training")
    ax.plot(data.x_test, data.y_test, "-", color="black", linewidth=1.2, label="truth")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title)


def nw_average_pooling() -> Figure:
    """The data and the average-pooling baseline, which predicts one number everywhere."""
    data = nw_data()
    predictions, _ = average_pooling(data.x_test, data.x_train, data.y_train)
    fig = new_figure((5.2, 3.2))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        _fit_axes(ax, "Average pooling ignores the query")
        ax.plot(data.x_test, predictions, "--", color="#d62728", label="average pooling")
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_gaussian_pooling() -> Figure:
    """Gaussian-kernel attention pooling with bandwidth 1: the prediction follows the data."""
    data = nw_data()
    predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    fig = new_figure((5.2, 3.2))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        _fit_axes(ax, "Gaussian kernel, bandwidth σ = 1")
        ax.plot(data.x_test, predictions, "--", color="#1f77b4", label="attention pooling")
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_gaussian_heatmap() -> Figure:
    """Attention weights of the Gaussian kernel with bandwidth 1 (test inputs x training inputs)."""
    data = nw_data()
    _, weights = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    return show_heatmaps(
        weights,
        xlabel="Sorted training inputs (keys)",
        ylabel="Test inputs (queries)",
        figsize=(3.6, 3.4),
    )


#: The bandwidths the explorer steps through; it starts at sigma = 1, the figures above.
EXPLORER_BANDWIDTHS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)


def nw_bandwidth_explorer() -> Frames:
    """The Gaussian fit and its attention weights, one frame per bandwidth (a slider)."""
    data = nw_data()
    figures = []
    for sigma in EXPLORER_BANDWIDTHS:
        predictions, weights = attention_pooling(
            data.x_test, data.x_train, data.y_train, "gaussian", sigma
        )
        error = float(((predictions - data.y_test) ** 2).mean())
        fig = new_figure((8.4, 3.3))
        with plt.rc_context(BOOK_STYLE):
            fit, heat = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.35, 1]})
            _fit_axes(fit, f"σ = {sigma:g}: test error {error:.3f}")
            fit.plot(data.x_test, predictions, "--", color="#1f77b4", label="attention pooling")
            fit.set_ylim(-1.5, 5.5)
            fit.legend(loc="upper right", fontsize=8)
            largest = float(weights.max())
            heat.imshow(weights.numpy(), cmap="Reds", vmin=0, vmax=largest, aspect="auto")
            heat.set_title(f"weights (darkest = {largest:.2f})")
            heat.set_xlabel("sorted training inputs (keys)")
            heat.set_ylabel("test inputs (queries)")
            heat.grid(False)
            fig.tight_layout()
        figures.append(fig)
    labels = [f"σ = {sigma:g}" for sigma in EXPLORER_BANDWIDTHS]
    return Frames("kernel width", labels, figures, start=EXPLORER_BANDWIDTHS.index(1.0))


def nw_kernel_comparison() -> Figure:
    """The three kernels' shapes, and their fits with bandwidths chosen by leave-one-out."""
    data = nw_data()
    colors = {"gaussian": "#1f77b4", "boxcar": "#2ca02c", "epanechnikov": "#ff7f0e"}
    fig = new_figure((9.0, 3.3))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
        u = torch.linspace(-3, 3, 601)
        for name in KERNEL_NAMES:
            left.plot(u, KERNELS[name](u), color=colors[name], label=name)
        left.set_xlabel("u = (x - x_i) / σ")
        left.set_ylabel("κ(u)")
        left.set_title("Kernels")
        left.set_ylim(-0.05, 1.45)
        left.legend(loc="upper left", fontsize=8)
        _fit_axes(right, "Fits, bandwidth chosen by leave-one-out")
        for name in KERNEL_NAMES:
            sigma = nw_loo_bandwidth(name)
            predictions, _ = attention_pooling(
                data.x_test, data.x_train, data.y_train, name, bandwidth=sigma
            )
            label = f"{name}, σ={sigma}"
            right.plot(data.x_test, predictions, "--", color=colors[name], label=label)
        right.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_bandwidth_sweep() -> Figure:
    """Test error of each kernel as the bandwidth grows: too narrow is noisy, too wide is flat."""
    curves = list(nw_bandwidth_sweep_errors().values())
    return plot_lines(
        BANDWIDTHS,
        curves,
        labels=list(KERNEL_NAMES),
        xlabel="bandwidth σ",
        ylabel="test mean squared error",
        yscale="log",
        styles=["o-", "s-", "^-"],
        figsize=(5.2, 3.2),
    )


def nw_training_curve() -> Figure:
    """Leave-one-out training loss of the parametric model, epoch by epoch."""
    _, losses = nw_trained_model()
    epochs = list(range(1, len(losses) + 1))
    return plot_lines(
        epochs,
        [list(losses)],
        labels=["leave-one-out MSE"],
        xlabel="epoch",
        ylabel="training loss",
        figsize=(5.0, 3.0),
    )


def nw_parametric_fit() -> Figure:
    """Predictions of the trained parametric model next to the Gaussian kernel with h = 1."""
    data = nw_data()
    model, _ = nw_trained_model()
    with torch.no_grad():
        learned = model(data.x_test, data.x_train, data.y_train)
    fixed, _ = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    fig = new_figure((5.2, 3.2))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        _fit_axes(ax, f"Learned width w = {model.w.item():.2f}")
        ax.plot(data.x_test, fixed, ":", color="#1f77b4", label="σ = 1 (w = 1)")
        ax.plot(data.x_test, learned, "--", color="#d62728", label="learned w")
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_heatmaps_compared() -> Figure:
    """Attention weights before (w = 1) and after training (learned w): sharper after."""
    data = nw_data()
    model, _ = nw_trained_model()
    with torch.no_grad():
        model(data.x_test, data.x_train, data.y_train)
    _, initial = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    weights = torch.stack([initial, model.attention_weights])[None]
    # (1, 2, num_test, num_train)
    return show_heatmaps(
        weights,
        xlabel="Sorted training inputs (keys)",
        ylabel="Test inputs (queries)",
        titles=["w = 1 (untrained)", f"learned w = {model.w.item():.2f}"],
        figsize=(3.2, 3.0),
    )


def nw_test_error_table() -> str:
    """Markdown table: the test error of every estimator of the chapter, on the same data."""
    rows = nw_test_errors()  # (estimator, bandwidth, leave-one-out error, test error)
    lines = [
        "| Estimator | Bandwidth | Leave-one-out MSE (training data) | Test MSE |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {name} | {sigma} | {loo:.3f} | {test:.3f} |" for name, sigma, loo, test in rows]
    return "\n".join(lines)


def nw_weight_spread(weights: torch.Tensor) -> float:
    """How many keys a query averages over, at the median query: ``1 / sum_i alpha_i^2``.

    The count is ``k`` for a weight spread evenly over ``k`` keys and 1 for a one-hot row.

    Args:
        weights: Attention weights, one row per query, each summing to 1.

    Returns:
        The median over the queries of ``1 / sum_i alpha_i^2``.

    Shapes:
        - weights: (num_queries, num_keys)
    """
    return (1 / (weights**2).sum(dim=-1)).median().item()


def nw_verdict(
    learned: float, chosen: float, step: float, lowest: float, noise: float
) -> dict[str, str]:
    """The chapter's words that depend on its numbers; the rest of each sentence is the page's.

    Args:
        learned: The bandwidth ``1/w`` of the trained model.
        chosen: The Gaussian bandwidth that leave-one-out picked from `BANDWIDTHS`.
        step: The spacing of that grid.
        lowest: The smallest leave-one-out error of the chapter's estimators.
        noise: The mean of the squared noise over the training targets.

    Returns:
        ``"agreement"``: the end of the sentence that compares the two bandwidths, whether
        gradient descent found the one the search picked (within one step of the grid);
        ``"summary"``: the end of the sentence that opens the chapter's conclusion on
        learning; ``"noise_relation"``: whether the lowest leave-one-out error is ``"above"``
        or ``"below"`` the sample's own noise.
    """
    if abs(learned - chosen) <= step + 1e-9:
        words = {
            "agreement": (
                f"within one step of the grid ({step:g}) of the one that leave-one-out picked "
                f"from it, {chosen:.2f}: gradient descent found the same answer as the search, "
                "because it minimizes the same loss."
            ),
            "summary": "recovers what a grid search over the same leave-one-out loss finds.",
        }
    else:
        words = {
            "agreement": (
                f"more than one step of the grid ({step:g}) away from the one that leave-one-out "
                f"picked from it, {chosen:.2f}: although both minimize the same loss, gradient "
                "descent stopped elsewhere than the search."
            ),
            "summary": (
                "did not land where a grid search over the same leave-one-out loss lands, in this "
                "build."
            ),
        }
    return words | {"noise_relation": "above" if lowest > noise else "below"}


def nw_facts() -> dict[str, str]:
    """The numbers the chapter's sentences cite, and `nw_verdict`'s words on them.

    Returns:
        ``"w"`` and ``"bandwidth"`` (``1/w``) of the trained model; ``"spread_initial"`` and
        ``"spread_learned"``: `nw_weight_spread` of the test queries' weights with
        ``sigma = 1`` and with the learned width; ``"train_seconds"``: the CPU time of one
        training with the package's defaults on one thread (the median of three, after an
        untimed one); ``"noise"`` (this sample's mean squared noise over the training targets)
        and ``"lowest_loo"``, ``"lowest_estimator"`` (the smallest leave-one-out error of the
        chapter, and whose); and `nw_verdict`'s words.
    """
    data = nw_data()
    model, _ = nw_trained_model()
    with torch.no_grad():
        model(data.x_test, data.x_train, data.y_train)
    _, initial = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    bandwidth = 1 / model.w.item()
    step = BANDWIDTHS[1] - BANDWIDTHS[0]
    with torch_threads(1):
        seconds = median_seconds(
            lambda: train_nw_kernel_regression(data.x_train, data.y_train), 3, time.thread_time
        )
    rows = nw_test_errors()  # (estimator, bandwidth, leave-one-out error, test error)
    name, _, lowest, _ = min(rows, key=lambda row: row[2])
    noise = nw_training_noise()
    return {
        "w": f"{model.w.item():.2f}",
        "bandwidth": f"{bandwidth:.2f}",
        "spread_initial": f"{nw_weight_spread(initial):.0f}",
        "spread_learned": f"{nw_weight_spread(model.attention_weights):.0f}",
        "train_seconds": f"{seconds:.2f}",
        "noise": f"{noise:.3f}",
        "lowest_loo": f"{lowest:.3f}",
        "lowest_estimator": name.lower(),
        **nw_verdict(bandwidth, nw_loo_bandwidth("gaussian"), step, lowest, noise),
    }


def nw_exercise_without_leave_one_out() -> dict[str, str]:
    """What exercise 2's training without leave-one-out printed at build time, line by line.

    Returns:
        ``"epoch_<n>"``: the line printed at epoch ``n``, for each reported epoch.
    """
    return {
        f"epoch_{epoch}": (
            f"epoch {epoch:3d}: w = {w:6.2f}, training loss {train:.3f}, test MSE {test:.3f}"
        )
        for epoch, w, train, test in nw_without_leave_one_out()
    }


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    nw_average_pooling,
    nw_gaussian_pooling,
    nw_gaussian_heatmap,
    nw_kernel_comparison,
    nw_bandwidth_sweep,
    nw_bandwidth_explorer,
    nw_training_curve,
    nw_parametric_fit,
    nw_heatmaps_compared,
    nw_facts,
    nw_test_error_table,
    nw_exercise_without_leave_one_out,
)
