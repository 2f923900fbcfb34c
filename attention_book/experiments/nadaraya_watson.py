"""The Nadaraya-Watson chapter's experiment: which estimator predicts the test curve best.

On one data set (50 noisy training pairs, 50 test inputs with noise-free targets, seed 0) the
chapter compares average pooling, three kernels with a fixed bandwidth or one chosen by
leave-one-out, and the parametric Gaussian kernel whose width is learned. This module holds
that data set, the trained model, the bandwidth selection and the errors; each is computed
once per process (a fraction of a second, so no disk cache is needed).
"""

from __future__ import annotations

from functools import cache

import torch

from attention_book.nadaraya_watson import (
    NWKernelRegression,
    RegressionData,
    attention_pooling,
    average_pooling,
    leave_one_out,
    leave_one_out_error,
    make_regression_data,
    target_function,
    train_nw_kernel_regression,
)

__all__ = [
    "BANDWIDTHS",
    "KERNEL_NAMES",
    "VERSION",
    "nw_bandwidth_sweep_errors",
    "nw_data",
    "nw_loo_bandwidth",
    "nw_test_error",
    "nw_test_errors",
    "nw_trained_model",
    "nw_training_noise",
    "nw_without_leave_one_out",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 1

#: The bandwidths that the sweep tries and that leave-one-out chooses from.
BANDWIDTHS = tuple(round(0.05 * i, 2) for i in range(1, 31))
#: The kernels the chapter compares.
KERNEL_NAMES = ("gaussian", "boxcar", "epanechnikov")


@cache
def nw_data() -> RegressionData:
    """The chapter's data set: 50 training pairs, 50 test inputs, seed 0.

    Returns:
        The training pairs and the test grid with its noise-free targets.
    """
    return make_regression_data()


@cache
def nw_trained_model() -> tuple[NWKernelRegression, tuple[float, ...]]:
    """The parametric model trained with the package's defaults, and its loss history.

    Returns:
        (trained model, leave-one-out training loss of each epoch).
    """
    data = nw_data()
    model, losses = train_nw_kernel_regression(data.x_train, data.y_train)
    return model, tuple(losses)


@cache
def nw_loo_bandwidth(kernel: str) -> float:
    """The bandwidth of BANDWIDTHS with the smallest leave-one-out error on the training set.

    Args:
        kernel: A kernel name of KERNEL_NAMES.

    Returns:
        The chosen bandwidth.
    """
    data = nw_data()
    errors = [leave_one_out_error(data.x_train, data.y_train, kernel, h) for h in BANDWIDTHS]
    return BANDWIDTHS[min(range(len(errors)), key=errors.__getitem__)]


def nw_test_error(predictions: torch.Tensor) -> float:
    """Mean squared error against the noise-free targets on the test grid.

    Args:
        predictions: One prediction per test input.

    Returns:
        The test mean squared error.

    Shapes:
        - predictions: (num_test,)
    """
    return torch.mean((predictions.detach() - nw_data().y_test) ** 2).item()


def nw_bandwidth_sweep_errors() -> dict[str, list[float]]:
    """Test error of each kernel at each bandwidth of BANDWIDTHS.

    Returns:
        ``{kernel name: [test error at each bandwidth]}``, kernels in KERNEL_NAMES order.
    """
    data = nw_data()
    curves = {}
    for name in KERNEL_NAMES:
        errors = []
        for h in BANDWIDTHS:
            predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, name, h)
            errors.append(nw_test_error(predictions))
        curves[name] = errors
    return curves


def nw_test_errors() -> list[tuple[str, str, float, float]]:
    """Every estimator of the chapter, with its leave-one-out and test errors on the same data.

    Returns:
        Rows of (estimator, bandwidth as text, leave-one-out MSE on the training data,
        test MSE): average pooling, the Gaussian kernel with h = 1, each kernel with the
        bandwidth chosen by leave-one-out, and the trained parametric model.
    """
    data = nw_data()
    keys, values = leave_one_out(data.x_train), leave_one_out(data.y_train)
    rows = []
    loo_predictions, _ = average_pooling(data.x_train, keys, values)
    predictions, _ = average_pooling(data.x_test, data.x_train, data.y_train)
    loo = torch.mean((loo_predictions - data.y_train) ** 2).item()
    rows.append(("Average pooling", "—", loo, nw_test_error(predictions)))
    settings = [("gaussian", 1.0, "σ = 1")]
    settings += [(name, nw_loo_bandwidth(name), "σ by leave-one-out") for name in KERNEL_NAMES]
    for name, h, how in settings:
        predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, name, h)
        loo = leave_one_out_error(data.x_train, data.y_train, name, h)
        rows.append(
            (f"{name.capitalize()} kernel, {how}", f"{h:.2f}", loo, nw_test_error(predictions))
        )
    model, _ = nw_trained_model()
    with torch.no_grad():
        loo = torch.mean((model(data.x_train, keys, values) - data.y_train) ** 2).item()
        predictions = model(data.x_test, data.x_train, data.y_train)
    bandwidth = f"{1 / model.w.item():.2f} (1/w)"
    rows.append(("Parametric Gaussian, learned w", bandwidth, loo, nw_test_error(predictions)))
    return rows


def nw_training_noise() -> float:
    """Mean square of the noise in this data set's training targets, y_i - f(x_i).

    Its expectation is noise_std**2 = 0.25; for one sample of 50 points it is a random number
    around that value, and it is what the leave-one-out error of this sample is compared with.

    Returns:
        The mean of (y_i - f(x_i))^2 over the training pairs.
    """
    data = nw_data()
    return torch.mean((data.y_train - target_function(data.x_train)) ** 2).item()


@cache
def nw_without_leave_one_out(
    num_epochs: int = 300, lr: float = 1.0, report: tuple[int, ...] = (1, 10, 30, 100, 300)
) -> tuple[tuple[int, float, float, float], ...]:
    """Train the width with every training point among its own keys (exercise 2's mistake).

    Args:
        num_epochs: Full-batch Adam steps.
        lr: Learning rate.
        report: The epochs at which to record the state.

    Returns:
        One (epoch, w, training loss, test MSE) per epoch of `report`.
    """
    data = nw_data()
    model = NWKernelRegression(init_width=1.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    rows = []
    for epoch in range(1, num_epochs + 1):
        optimizer.zero_grad()
        predictions = model(data.x_train, data.x_train, data.y_train)
        loss = torch.mean((predictions - data.y_train) ** 2)
        loss.backward()
        optimizer.step()
        if epoch in report:
            with torch.no_grad():
                test = nw_test_error(model(data.x_test, data.x_train, data.y_train))
            rows.append((epoch, model.w.item(), loss.item(), test))
    return tuple(rows)
