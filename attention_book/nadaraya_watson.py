"""Nadaraya-Watson kernel regression: attention pooling in its simplest form.

A regression estimate at a query point x is a weighted average of the training targets y_i,
with weights that depend on how close x is to each training input x_i. Read with the words
of attention, the test inputs are the queries, the training inputs are the keys, the training
targets are the values, and the normalized kernel weights are the attention weights
(Nadaraya, 1964; Watson, 1964).

The module holds, in the order the chapter shows them: the synthetic data, average pooling
(the baseline that ignores the query), nonparametric attention pooling with a Gaussian, boxcar
or Epanechnikov kernel, and a parametric model whose kernel width is learned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = [
    "KERNELS",
    "NWKernelRegression",
    "RegressionData",
    "attention_pooling",
    "average_pooling",
    "boxcar_kernel",
    "epanechnikov_kernel",
    "gaussian_kernel",
    "kernel_weights",
    "leave_one_out",
    "leave_one_out_error",
    "make_regression_data",
    "target_function",
    "train_nw_kernel_regression",
]


# --8<-- [start:data]
def target_function(x: Tensor) -> Tensor:
    """The noise-free function the regression tries to recover: y = 2 sin(x) + x^0.8.

    Args:
        x: Inputs, non-negative (x^0.8 is not real for negative x).

    Returns:
        The function's values at `x`.

    Shapes:
        - x: any shape
        - returns: the shape of x
    """
    return 2 * torch.sin(x) + x**0.8


@dataclass(frozen=True)
class RegressionData:
    """Training pairs with noisy targets, and a grid of test inputs with exact targets.

    Attributes:
        x_train: Training inputs, sorted increasingly (the keys).
        y_train: Noisy training targets (the values).
        x_test: Test inputs on an evenly spaced grid (the queries).
        y_test: Noise-free targets at the test inputs (what an estimator should predict).
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def make_regression_data(
    num_train: int = 50,
    num_test: int = 50,
    noise_std: float = 0.5,
    x_max: float = 5.0,
    seed: int = 0,
) -> RegressionData:
    """Draw the synthetic regression data set, y = 2 sin(x) + x^0.8 + Gaussian noise.

    Training inputs are drawn uniformly from [0, x_max] and sorted, so that heatmaps with
    training inputs as keys read from left to right. Test inputs lie on an evenly spaced grid
    over the same interval; their targets carry no noise, so the test error measures how far
    an estimator is from the function itself.

    Args:
        num_train: Number of training pairs.
        num_test: Number of test inputs on the grid.
        noise_std: Standard deviation of the Gaussian noise added to the training targets.
        x_max: Right end of the input interval [0, x_max].
        seed: Seed of the random generator (the same seed gives the same data).

    Returns:
        The training and test data.

    Shapes:
        - x_train, y_train: (num_train,)
        - x_test, y_test: (num_test,)

    Raises:
        ValueError: If `num_train` or `num_test` is not positive, `noise_std` is negative or
            `x_max` is not positive.
    """
    if num_train < 1 or num_test < 1:
        raise ValueError(
            f"num_train and num_test must be positive, got num_train={num_train}, "
            f"num_test={num_test}"
        )
    if noise_std < 0:
        raise ValueError(f"noise_std must be non-negative, got {noise_std}")
    if x_max <= 0:
        raise ValueError(f"x_max must be positive, got {x_max}")
    generator = torch.Generator().manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(num_train, generator=generator) * x_max)
    noise = torch.randn(num_train, generator=generator) * noise_std
    y_train = target_function(x_train) + noise
    x_test = torch.linspace(0, x_max, num_test)
    return RegressionData(x_train, y_train, x_test, target_function(x_test))


# --8<-- [end:data]


def _check_queries_keys_values(queries: Tensor, keys: Tensor, values: Tensor) -> None:
    """Check the shapes shared by every pooling function of this module.

    Keys and values are either one set shared by every query, of shape (num_keys,), or one
    set per query, of shape (num_queries, num_keys).
    """
    if queries.dim() != 1:
        raise ValueError(
            f"queries must have shape (num_queries,), got shape {tuple(queries.shape)}"
        )
    if keys.dim() not in (1, 2) or (keys.dim() == 2 and keys.shape[0] != queries.shape[0]):
        raise ValueError(
            f"keys must have shape (num_keys,) or (num_queries={queries.shape[0]}, num_keys), "
            f"got shape {tuple(keys.shape)}"
        )
    if keys.shape[-1] == 0:
        raise ValueError(f"keys must hold at least one key, got shape {tuple(keys.shape)}")
    if values.shape != keys.shape:
        raise ValueError(
            f"values must have the shape of keys {tuple(keys.shape)}, "
            f"got shape {tuple(values.shape)}"
        )


# --8<-- [start:average_pooling]
def average_pooling(queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Predict the mean of the values for every query: attention that ignores the query.

    Args:
        queries: Query inputs (only their number matters).
        keys: Key inputs (only their number matters).
        values: The values to average.

    Returns:
        A pair (predictions, weights): every prediction is the mean of the values, and every
        weight is 1 / num_keys.

    Shapes:
        - queries: (num_queries,)
        - keys, values: (num_keys,) or (num_queries, num_keys)
        - predictions: (num_queries,)
        - weights: (num_queries, num_keys)

    Raises:
        ValueError: If the shapes do not match.
    """
    _check_queries_keys_values(queries, keys, values)
    num_queries, num_keys = queries.shape[0], keys.shape[-1]
    weights = torch.full((num_queries, num_keys), 1 / num_keys, dtype=values.dtype)
    values = values.expand(num_queries, num_keys)  # (num_queries, num_keys)
    predictions = (weights * values).sum(dim=-1)  # (num_queries,)
    return predictions, weights


# --8<-- [end:average_pooling]


# --8<-- [start:kernels]
def gaussian_kernel(u: Tensor) -> Tensor:
    """Gaussian kernel, K(u) = exp(-u^2 / 2): every key gets some weight.

    Args:
        u: Scaled distances (x - x_i) / bandwidth.

    Returns:
        The kernel values, in (0, 1].

    Shapes:
        - u: any shape
        - returns: the shape of u
    """
    return torch.exp(-(u**2) / 2)


def boxcar_kernel(u: Tensor) -> Tensor:
    """Boxcar kernel, K(u) = 1 if |u| <= 1 else 0: a plain average over a window.

    Args:
        u: Scaled distances (x - x_i) / bandwidth.

    Returns:
        The kernel values, 0 or 1.

    Shapes:
        - u: any shape
        - returns: the shape of u
    """
    return (u.abs() <= 1).to(u.dtype)


def epanechnikov_kernel(u: Tensor) -> Tensor:
    """Epanechnikov kernel, K(u) = max(0, 1 - u^2): a window whose weight fades to its edges.

    Args:
        u: Scaled distances (x - x_i) / bandwidth.

    Returns:
        The kernel values, in [0, 1].

    Shapes:
        - u: any shape
        - returns: the shape of u
    """
    return torch.clamp(1 - u**2, min=0)


#: The kernels `attention_pooling` accepts, by name.
KERNELS: dict[str, Callable[[Tensor], Tensor]] = {
    "gaussian": gaussian_kernel,
    "boxcar": boxcar_kernel,
    "epanechnikov": epanechnikov_kernel,
}
# --8<-- [end:kernels]


def _check_kernel_inputs(queries: Tensor, keys: Tensor, kernel: str, bandwidth: float) -> None:
    """Check the kernel's name, the bandwidth and the shapes of `kernel_weights`' inputs."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    _check_queries_keys_values(queries, keys, keys)


# --8<-- [start:attention_pooling]
def kernel_weights(
    queries: Tensor, keys: Tensor, kernel: str = "gaussian", bandwidth: float = 1.0
) -> Tensor:
    """Attention weights of Nadaraya-Watson regression: κ((q - k_i) / σ), normalized per query.

    The Gaussian weights are computed as a softmax of -u^2 / 2, which is the same quantity
    written in a way that cannot underflow to 0 / 0 for a small bandwidth. The boxcar and
    Epanechnikov kernels are zero outside |u| <= 1, so a query may have no key within one
    bandwidth: its row of weights is then all zeros (and its prediction 0). This is the
    book's convention for a query with nothing to attend to, the same as a fully masked row
    in `masked_softmax`; such rows are easy to find, because their weights sum to 0.

    Args:
        queries: Query inputs.
        keys: Key inputs, shared by every query or one set per query.
        kernel: "gaussian", "boxcar" or "epanechnikov".
        bandwidth: The kernel width σ; larger means smoother.

    Returns:
        The weights; each row sums to 1, or is all zeros if no key falls in the window.

    Shapes:
        - queries: (num_queries,)
        - keys: (num_keys,) or (num_queries, num_keys)
        - returns: (num_queries, num_keys)

    Raises:
        ValueError: If `kernel` is unknown, `bandwidth` is not positive, or the shapes do
            not match.
    """
    _check_kernel_inputs(queries, keys, kernel, bandwidth)
    u = (queries[:, None] - keys) / bandwidth  # (num_queries, num_keys)
    if kernel == "gaussian":
        return torch.softmax(-(u**2) / 2, dim=-1)
    scores = KERNELS[kernel](u)  # (num_queries, num_keys)
    totals = scores.sum(dim=-1, keepdim=True)  # (num_queries, 1)
    # An empty window has total 0: divide by 1 there, so its weights stay 0 instead of NaN.
    return scores / torch.where(totals > 0, totals, torch.ones_like(totals))


def attention_pooling(
    queries: Tensor, keys: Tensor, values: Tensor, kernel: str = "gaussian", bandwidth: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Nonparametric attention pooling: f(q) = sum_i alpha(q, k_i) v_i with kernel weights.

    Args:
        queries: Query inputs (the test inputs).
        keys: Key inputs (the training inputs).
        values: Values (the training targets), one per key.
        kernel: "gaussian", "boxcar" or "epanechnikov".
        bandwidth: The kernel width σ; larger means smoother.

    Returns:
        A pair (predictions, weights), the weights as returned by `kernel_weights`.

    Shapes:
        - queries: (num_queries,)
        - keys, values: (num_keys,) or (num_queries, num_keys)
        - predictions: (num_queries,)
        - weights: (num_queries, num_keys)

    Raises:
        ValueError: If `kernel` is unknown, `bandwidth` is not positive, or the shapes do
            not match.
    """
    _check_queries_keys_values(queries, keys, values)
    weights = kernel_weights(queries, keys, kernel, bandwidth)  # (num_queries, num_keys)
    predictions = (weights * values).sum(dim=-1)  # (num_queries,)
    return predictions, weights


# --8<-- [end:attention_pooling]


# --8<-- [start:leave_one_out]
def leave_one_out(x: Tensor) -> Tensor:
    """For each position i, every entry of `x` except the i-th.

    Args:
        x: A vector of n entries.

    Returns:
        Row i holds x without x[i], in the original order.

    Shapes:
        - x: (n,)
        - returns: (n, n - 1)

    Raises:
        ValueError: If `x` is not a vector of at least two entries.
    """
    if x.dim() != 1 or x.shape[0] < 2:
        raise ValueError(f"x must have shape (n,) with n >= 2, got shape {tuple(x.shape)}")
    n = x.shape[0]
    keep = ~torch.eye(n, dtype=torch.bool)  # (n, n), False on the diagonal
    return x.expand(n, n)[keep].reshape(n, n - 1)  # (n, n - 1)


def leave_one_out_error(
    x_train: Tensor, y_train: Tensor, kernel: str = "gaussian", bandwidth: float = 1.0
) -> float:
    """Mean squared error of predicting each training target from all the other pairs.

    It estimates the error at unseen inputs from the training data alone, so it can choose
    a bandwidth without looking at the test set. A point whose window holds no other point
    is predicted as 0 (see `kernel_weights`), which the error counts against the bandwidth.

    Args:
        x_train: Training inputs.
        y_train: Training targets.
        kernel: "gaussian", "boxcar" or "epanechnikov".
        bandwidth: The kernel width σ.

    Returns:
        The leave-one-out mean squared error.

    Shapes:
        - x_train, y_train: (num_train,)

    Raises:
        ValueError: If the shapes do not match or there are fewer than two training pairs,
            `kernel` is unknown, or `bandwidth` is not positive.
    """
    if x_train.shape != y_train.shape:
        raise ValueError(
            f"y_train must have the shape of x_train {tuple(x_train.shape)}, "
            f"got shape {tuple(y_train.shape)}"
        )
    keys, values = leave_one_out(x_train), leave_one_out(y_train)  # (n, n - 1) each
    predictions, _ = attention_pooling(x_train, keys, values, kernel, bandwidth)
    return torch.mean((predictions - y_train) ** 2).item()


# --8<-- [end:leave_one_out]


# --8<-- [start:NWKernelRegression]
class NWKernelRegression(nn.Module):
    """Parametric attention pooling: a Gaussian kernel whose width is learned.

    The weights are softmax_i(-((q - k_i) w)^2 / 2): the learnable scalar w plays the part of
    1 / bandwidth, so a larger w gives narrower, sharper attention.

    Args:
        init_width: The initial value of w.

    Attributes:
        w: The learnable scalar.
        attention_weights: The weights of the last forward pass, for plots.
    """

    def __init__(self, init_width: float = 1.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(float(init_width)))
        self.attention_weights: Tensor | None = None

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """Predict a value for each query as an attention-weighted average of `values`.

        Args:
            queries: Query inputs.
            keys: Key inputs, shared by every query or one set per query.
            values: Values, one per key.

        Returns:
            The predictions.

        Shapes:
            - queries: (num_queries,)
            - keys, values: (num_keys,) or (num_queries, num_keys)
            - returns: (num_queries,)

        Raises:
            ValueError: If the shapes do not match.
        """
        _check_queries_keys_values(queries, keys, values)
        scores = -(((queries[:, None] - keys) * self.w) ** 2) / 2  # (num_queries, num_keys)
        self.attention_weights = torch.softmax(scores, dim=-1)
        return (self.attention_weights * values).sum(dim=-1)  # (num_queries,)


# --8<-- [end:NWKernelRegression]


def _check_training_inputs(x_train: Tensor, y_train: Tensor, num_epochs: int) -> None:
    """Check the shapes of the training pairs and the number of epochs."""
    if x_train.dim() != 1 or x_train.shape != y_train.shape or x_train.shape[0] < 2:
        raise ValueError(
            "x_train and y_train must both have shape (num_train,) with num_train >= 2, "
            f"got {tuple(x_train.shape)} and {tuple(y_train.shape)}"
        )
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be positive, got {num_epochs}")


# --8<-- [start:train_nw_kernel_regression]
def train_nw_kernel_regression(
    x_train: Tensor,
    y_train: Tensor,
    num_epochs: int = 100,
    lr: float = 0.1,
    init_width: float = 1.0,
) -> tuple[NWKernelRegression, list[float]]:
    """Learn the width w of `NWKernelRegression` by leave-one-out squared error.

    Each training input is a query whose keys and values are all the OTHER training pairs.
    If a point could attend to itself, the loss would be smallest with an infinitely narrow
    kernel: every point would copy its own noisy target, the training error would reach 0,
    and the model would have learned nothing about new inputs. Leaving the point out makes
    the training loss an honest estimate of the error at an unseen input.

    Full-batch Adam updates make the run deterministic: the same data and settings give the
    same model and the same loss history.

    Args:
        x_train: Training inputs.
        y_train: Training targets.
        num_epochs: Number of gradient steps over the whole training set.
        lr: Learning rate of Adam.
        init_width: Initial value of w.

    Returns:
        A pair (model, losses): the trained model and the mean squared error of each epoch,
        measured before that epoch's update.

    Shapes:
        - x_train, y_train: (num_train,)

    Raises:
        ValueError: If the shapes do not match, there are fewer than two training pairs, or
            `num_epochs` is not positive.
    """
    _check_training_inputs(x_train, y_train, num_epochs)
    keys = leave_one_out(x_train)  # (num_train, num_train - 1)
    values = leave_one_out(y_train)  # (num_train, num_train - 1)
    model = NWKernelRegression(init_width)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(num_epochs):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x_train, keys, values), y_train)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


# --8<-- [end:train_nw_kernel_regression]
