"""Figures and build-time tables of the chapter "Attention pooling: Nadaraya-Watson regression"."""

from __future__ import annotations

from functools import cache

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.nadaraya_watson import (
    KERNELS,
    NWKernelRegression,
    RegressionData,
    attention_pooling,
    average_pooling,
    leave_one_out,
    leave_one_out_error,
    make_regression_data,
    train_nw_kernel_regression,
)
from attention_book.plotting import BOOK_STYLE, new_figure, plot_lines, show_heatmaps

__all__ = [
    "nw_average_pooling",
    "nw_bandwidth_sweep",
    "nw_gaussian_heatmap",
    "nw_gaussian_pooling",
    "nw_heatmaps_compared",
    "nw_kernel_comparison",
    "nw_parametric_fit",
    "nw_test_error_table",
    "nw_training_curve",
]

#: The bandwidths that the sweep tries and that leave-one-out chooses from.
BANDWIDTHS = tuple(round(0.05 * i, 2) for i in range(1, 31))
KERNEL_NAMES = ("gaussian", "boxcar", "epanechnikov")


@cache
def _data() -> RegressionData:
    """The chapter's data set: 50 training pairs, 50 test inputs, seed 0."""
    return make_regression_data()


@cache
def _trained() -> tuple[NWKernelRegression, tuple[float, ...]]:
    """The parametric model trained with the package's defaults, and its loss history."""
    data = _data()
    model, losses = train_nw_kernel_regression(data.x_train, data.y_train)
    return model, tuple(losses)


@cache
def _loo_bandwidth(kernel: str) -> float:
    """The bandwidth of BANDWIDTHS with the smallest leave-one-out error on the training set."""
    data = _data()
    errors = [leave_one_out_error(data.x_train, data.y_train, kernel, h) for h in BANDWIDTHS]
    return BANDWIDTHS[min(range(len(errors)), key=errors.__getitem__)]


def _test_error(predictions: torch.Tensor) -> float:
    """Mean squared error against the noise-free targets on the test grid."""
    return torch.mean((predictions.detach() - _data().y_test) ** 2).item()


def _fit_axes(ax, title: str) -> None:
    """Draw the training points and the true function on `ax`."""
    data = _data()
    ax.plot(data.x_train, data.y_train, "o", color="#999999", markersize=3.5, label="training")
    ax.plot(data.x_test, data.y_test, "-", color="black", linewidth=1.2, label="truth")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title)


def nw_average_pooling() -> Figure:
    """The data and the average-pooling baseline, which predicts one number everywhere."""
    data = _data()
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
    data = _data()
    predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    fig = new_figure((5.2, 3.2))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        _fit_axes(ax, "Gaussian kernel, bandwidth h = 1")
        ax.plot(data.x_test, predictions, "--", color="#1f77b4", label="attention pooling")
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_gaussian_heatmap() -> Figure:
    """Attention weights of the Gaussian kernel with bandwidth 1 (test inputs x training inputs)."""
    data = _data()
    _, weights = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    return show_heatmaps(
        weights,
        xlabel="Sorted training inputs (keys)",
        ylabel="Test inputs (queries)",
        figsize=(3.6, 3.4),
    )


def nw_kernel_comparison() -> Figure:
    """The three kernels' shapes, and their fits with bandwidths chosen by leave-one-out."""
    data = _data()
    colors = {"gaussian": "#1f77b4", "boxcar": "#2ca02c", "epanechnikov": "#ff7f0e"}
    fig = new_figure((9.0, 3.3))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
        u = torch.linspace(-3, 3, 601)
        for name in KERNEL_NAMES:
            left.plot(u, KERNELS[name](u), color=colors[name], label=name)
        left.set_xlabel("u = (x - x_i) / h")
        left.set_ylabel("K(u)")
        left.set_title("Kernels")
        left.set_ylim(-0.05, 1.45)
        left.legend(loc="upper left", fontsize=8)
        _fit_axes(right, "Fits, bandwidth chosen by leave-one-out")
        for name in KERNEL_NAMES:
            h = _loo_bandwidth(name)
            predictions, _ = attention_pooling(
                data.x_test, data.x_train, data.y_train, name, bandwidth=h
            )
            right.plot(data.x_test, predictions, "--", color=colors[name], label=f"{name}, h={h}")
        right.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_bandwidth_sweep() -> Figure:
    """Test error of each kernel as the bandwidth grows: too narrow is noisy, too wide is flat."""
    data = _data()
    curves = []
    for name in KERNEL_NAMES:
        errors = []
        for h in BANDWIDTHS:
            predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, name, h)
            errors.append(_test_error(predictions))
        curves.append(errors)
    return plot_lines(
        BANDWIDTHS,
        curves,
        labels=list(KERNEL_NAMES),
        xlabel="bandwidth h",
        ylabel="test mean squared error",
        yscale="log",
        styles=["o-", "s-", "^-"],
        figsize=(5.2, 3.2),
    )


def nw_training_curve() -> Figure:
    """Leave-one-out training loss of the parametric model, epoch by epoch."""
    _, losses = _trained()
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
    data = _data()
    model, _ = _trained()
    with torch.no_grad():
        learned = model(data.x_test, data.x_train, data.y_train)
    fixed, _ = attention_pooling(data.x_test, data.x_train, data.y_train, "gaussian", 1.0)
    fig = new_figure((5.2, 3.2))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        _fit_axes(ax, f"Learned width w = {model.w.item():.2f}")
        ax.plot(data.x_test, fixed, ":", color="#1f77b4", label="h = 1 (w = 1)")
        ax.plot(data.x_test, learned, "--", color="#d62728", label="learned w")
        ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
    return fig


def nw_heatmaps_compared() -> Figure:
    """Attention weights before (w = 1) and after training (learned w): sharper after."""
    data = _data()
    model, _ = _trained()
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
    data = _data()
    keys, values = leave_one_out(data.x_train), leave_one_out(data.y_train)
    rows = []  # (estimator, bandwidth, leave-one-out error, test error)
    loo_predictions, _ = average_pooling(data.x_train, keys, values)
    predictions, _ = average_pooling(data.x_test, data.x_train, data.y_train)
    loo = torch.mean((loo_predictions - data.y_train) ** 2).item()
    rows.append(("Average pooling", "—", loo, _test_error(predictions)))
    settings = [("gaussian", 1.0, "h = 1")]
    settings += [(name, _loo_bandwidth(name), "h by leave-one-out") for name in KERNEL_NAMES]
    for name, h, how in settings:
        predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, name, h)
        loo = leave_one_out_error(data.x_train, data.y_train, name, h)
        rows.append(
            (f"{name.capitalize()} kernel, {how}", f"{h:.2f}", loo, _test_error(predictions))
        )
    model, _ = _trained()
    with torch.no_grad():
        loo = torch.mean((model(data.x_train, keys, values) - data.y_train) ** 2).item()
        predictions = model(data.x_test, data.x_train, data.y_train)
    bandwidth = f"{1 / model.w.item():.2f} (1/w)"
    rows.append(("Parametric Gaussian, learned w", bandwidth, loo, _test_error(predictions)))
    lines = [
        "| Estimator | Bandwidth | Leave-one-out MSE (training data) | Test MSE |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {name} | {h} | {loo:.3f} | {test:.3f} |" for name, h, loo, test in rows]
    return "\n".join(lines)
