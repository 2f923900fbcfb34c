import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.nadaraya_watson import (
    KERNELS,
    NWKernelRegression,
    attention_pooling,
    average_pooling,
    kernel_weights,
    leave_one_out,
    leave_one_out_error,
    make_regression_data,
    target_function,
    train_nw_kernel_regression,
)


@pytest.fixture(scope="module")
def data():
    return make_regression_data(num_train=30, num_test=20, seed=1)


# ----- data -----------------------------------------------------------------------------------


def test_data_shapes_range_and_order(data):
    assert data.x_train.shape == data.y_train.shape == (30,)
    assert data.x_test.shape == data.y_test.shape == (20,)
    assert torch.all(data.x_train[1:] >= data.x_train[:-1])
    assert data.x_train.min() >= 0 and data.x_train.max() <= 5
    assert data.x_test[0] == 0 and data.x_test[-1] == 5


def test_data_targets_follow_the_function():
    x = torch.tensor([0.0, 1.0, 4.0])
    expected = torch.tensor([2 * math.sin(v) + v**0.8 for v in (0.0, 1.0, 4.0)])
    torch.testing.assert_close(target_function(x), expected)
    clean = make_regression_data(num_train=40, noise_std=0.0)
    torch.testing.assert_close(clean.y_train, target_function(clean.x_train))


def test_data_noise_has_the_requested_spread():
    big = make_regression_data(num_train=20000, noise_std=0.5, seed=3)
    residual = big.y_train - target_function(big.x_train)
    assert abs(residual.std().item() - 0.5) < 0.02
    assert abs(residual.mean().item()) < 0.02


def test_data_is_determined_by_the_seed():
    a, b, c = make_regression_data(seed=7), make_regression_data(seed=7), make_regression_data()
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.x_train, c.x_train)


# ----- average pooling ------------------------------------------------------------------------


def test_average_pooling_predicts_the_mean_for_every_query(data):
    predictions, weights = average_pooling(data.x_test, data.x_train, data.y_train)
    assert predictions.shape == (20,) and weights.shape == (20, 30)
    torch.testing.assert_close(predictions, data.y_train.mean().expand(20))
    torch.testing.assert_close(weights, torch.full((20, 30), 1 / 30))


# ----- kernel weights -------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_shapes_and_rows_sum_to_one(data, kernel):
    predictions, weights = attention_pooling(
        data.x_test, data.x_train, data.y_train, kernel, bandwidth=1.0
    )
    assert predictions.shape == (20,) and weights.shape == (20, 30)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(20))
    torch.testing.assert_close(predictions, weights @ data.y_train)


def test_gaussian_weights_are_a_softmax_of_minus_half_squared_distance():
    queries = torch.tensor([0.0, 1.5, 3.0], dtype=torch.float64)
    keys = torch.tensor([0.2, 1.0, 2.5, 4.0], dtype=torch.float64)
    expected = torch.empty(3, 4, dtype=torch.float64)
    for i, q in enumerate(queries.tolist()):
        scores = [math.exp(-((q - k) ** 2) / 2) for k in keys.tolist()]
        expected[i] = torch.tensor([s / sum(scores) for s in scores], dtype=torch.float64)
    torch.testing.assert_close(kernel_weights(queries, keys), expected, rtol=0, atol=1e-12)
    # A bandwidth h divides the distances: the same as scaling queries and keys by 1 / h.
    torch.testing.assert_close(
        kernel_weights(queries, keys, bandwidth=0.5), kernel_weights(queries * 2, keys * 2)
    )


def test_gaussian_weights_do_not_underflow_for_a_tiny_bandwidth():
    weights = kernel_weights(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 2.0]), bandwidth=0.01)
    assert not torch.isnan(weights).any()
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


def test_boxcar_weights_are_uniform_over_the_window():
    queries = torch.tensor([0.0, 1.0, 2.6])
    keys = torch.tensor([0.1, 0.5, 0.9, 1.4, 2.0, 3.0])
    weights = kernel_weights(queries, keys, "boxcar", bandwidth=0.5)
    for i, q in enumerate(queries.tolist()):
        inside = [abs(q - k) <= 0.5 for k in keys.tolist()]
        expected = torch.tensor([1 / sum(inside) if flag else 0.0 for flag in inside])
        torch.testing.assert_close(weights[i], expected)


def test_epanechnikov_weights_follow_one_minus_u_squared():
    queries = torch.tensor([0.0, 2.0], dtype=torch.float64)
    keys = torch.tensor([0.3, 0.8, 1.7, 2.4, 5.0], dtype=torch.float64)
    weights = kernel_weights(queries, keys, "epanechnikov", bandwidth=1.0)
    for i, q in enumerate(queries.tolist()):
        raw = [max(0.0, 1 - (q - k) ** 2) for k in keys.tolist()]
        expected = torch.tensor([r / sum(raw) for r in raw], dtype=torch.float64)
        torch.testing.assert_close(weights[i], expected)


@pytest.mark.parametrize("kernel", ["boxcar", "epanechnikov"])
def test_a_query_with_an_empty_window_gets_zero_weights_not_nan(kernel):
    queries = torch.tensor([0.0, 10.0])
    keys = torch.tensor([0.1, 0.3, 0.6])
    values = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    predictions, weights = attention_pooling(queries, keys, values, kernel, bandwidth=1.0)
    assert not torch.isnan(weights).any() and not torch.isnan(predictions).any()
    torch.testing.assert_close(weights[1], torch.zeros(3))
    assert predictions[1].item() == 0.0
    torch.testing.assert_close(weights[0].sum(), torch.tensor(1.0))
    predictions.sum().backward()
    torch.testing.assert_close(values.grad, weights.sum(dim=0))  # d(sum of predictions)/dv


def test_per_query_keys_match_shared_keys(data):
    shared = attention_pooling(data.x_test, data.x_train, data.y_train, bandwidth=0.4)
    per_query = attention_pooling(
        data.x_test,
        data.x_train.expand(20, 30),
        data.y_train.expand(20, 30),
        bandwidth=0.4,
    )
    torch.testing.assert_close(shared, per_query)


def test_a_small_bandwidth_approaches_nearest_neighbour(data):
    predictions, _ = attention_pooling(data.x_test, data.x_train, data.y_train, bandwidth=1e-3)
    nearest = (data.x_test[:, None] - data.x_train).abs().argmin(dim=-1)
    torch.testing.assert_close(predictions, data.y_train[nearest])


@settings(max_examples=40, deadline=None)
@given(
    num_queries=st.integers(1, 6),
    num_keys=st.integers(1, 8),
    kernel=st.sampled_from(sorted(KERNELS)),
    bandwidth=st.floats(0.01, 10.0),
    seed=st.integers(0, 1000),
)
def test_weights_are_a_distribution_or_all_zero(num_queries, num_keys, kernel, bandwidth, seed):
    generator = torch.Generator().manual_seed(seed)
    queries = torch.rand(num_queries, generator=generator) * 5
    keys = torch.rand(num_keys, generator=generator) * 5
    weights = kernel_weights(queries, keys, kernel, bandwidth)
    assert weights.shape == (num_queries, num_keys)
    assert torch.all(weights >= 0) and not torch.isnan(weights).any()
    totals = weights.sum(dim=-1)
    assert torch.all(((totals - 1).abs() < 1e-5) | (totals == 0))
    if kernel == "gaussian":
        assert torch.all(totals > 0)


# ----- leave one out and the parametric model -------------------------------------------------


def test_leave_one_out_drops_the_diagonal():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    expected = torch.tensor([[v for j, v in enumerate(x.tolist()) if j != i] for i in range(4)])
    assert torch.equal(leave_one_out(x), expected)


def test_leave_one_out_error_matches_a_python_loop(data):
    xs, ys = data.x_train.tolist(), data.y_train.tolist()
    errors = []
    for i, x in enumerate(xs):
        scores = [math.exp(-((x - k) ** 2) / (2 * 0.3**2)) for j, k in enumerate(xs) if j != i]
        others = [y for j, y in enumerate(ys) if j != i]
        prediction = sum(s * y for s, y in zip(scores, others, strict=True)) / sum(scores)
        errors.append((prediction - ys[i]) ** 2)
    expected = sum(errors) / len(errors)
    assert leave_one_out_error(data.x_train, data.y_train, "gaussian", 0.3) == pytest.approx(
        expected, rel=1e-4
    )


def test_model_equals_gaussian_pooling_with_bandwidth_one_over_w(data):
    model = NWKernelRegression(init_width=2.5)
    predictions = model(data.x_test, data.x_train, data.y_train)
    expected, weights = attention_pooling(data.x_test, data.x_train, data.y_train, bandwidth=0.4)
    torch.testing.assert_close(predictions, expected)
    torch.testing.assert_close(model.attention_weights, weights)
    assert model.attention_weights.shape == (20, 30)


def test_model_gradient_is_correct():
    generator = torch.Generator().manual_seed(0)
    queries = torch.rand(4, generator=generator, dtype=torch.float64)
    keys = torch.rand(4, 3, generator=generator, dtype=torch.float64)
    values = torch.rand(4, 3, generator=generator, dtype=torch.float64)
    model = NWKernelRegression(1.5).double()
    assert torch.autograd.gradcheck(lambda q: model(q, keys, values), (queries.requires_grad_(),))
    model(queries, keys, values).sum().backward()
    assert model.w.grad is not None and torch.isfinite(model.w.grad)


def test_without_leave_one_out_the_training_loss_rewards_an_ever_narrower_kernel(data):
    # The reason for leave-one-out: when a point may attend to itself, the training loss
    # keeps falling as w grows and reaches 0 (each point copies its own noisy target).
    losses = []
    for w in (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0):
        predictions = NWKernelRegression(w)(data.x_train, data.x_train, data.y_train)
        losses.append(torch.mean((predictions - data.y_train) ** 2).item())
    assert all(a > b for a, b in itertools.pairwise(losses))
    assert losses[-1] < 1e-3 * losses[0]


def test_training_reduces_the_leave_one_out_loss_and_sharpens_the_kernel(data):
    model, losses = train_nw_kernel_regression(data.x_train, data.y_train, num_epochs=60)
    assert len(losses) == 60
    assert losses[-1] < 0.8 * losses[0]
    assert model.w.item() > 1.0  # narrower than the initial kernel
    # The learned width is better on unseen inputs than the initial one.
    test_error = torch.mean((model(data.x_test, data.x_train, data.y_train) - data.y_test) ** 2)
    initial = NWKernelRegression(1.0)(data.x_test, data.x_train, data.y_train)
    assert test_error < torch.mean((initial - data.y_test) ** 2)


def test_training_is_deterministic(data):
    model_a, losses_a = train_nw_kernel_regression(data.x_train, data.y_train, num_epochs=20)
    model_b, losses_b = train_nw_kernel_regression(data.x_train, data.y_train, num_epochs=20)
    assert losses_a == losses_b
    assert model_a.w.item() == model_b.w.item()


# ----- errors ---------------------------------------------------------------------------------


def test_unknown_kernel_is_rejected(data):
    with pytest.raises(ValueError, match="kernel must be one of"):
        attention_pooling(data.x_test, data.x_train, data.y_train, kernel="triangle")


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, float("nan")])
def test_non_positive_bandwidth_is_rejected(data, bandwidth):
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        attention_pooling(data.x_test, data.x_train, data.y_train, bandwidth=bandwidth)


def test_mismatched_shapes_are_rejected(data):
    with pytest.raises(ValueError, match=r"values must have the shape of keys \(30,\)"):
        attention_pooling(data.x_test, data.x_train, data.y_train[:-1])
    with pytest.raises(ValueError, match=r"queries must have shape \(num_queries,\)"):
        attention_pooling(data.x_test[:, None], data.x_train, data.y_train)
    with pytest.raises(ValueError, match=r"keys must have shape .* got shape \(3, 30\)"):
        average_pooling(data.x_test, data.x_train.expand(3, 30), data.y_train.expand(3, 30))
    with pytest.raises(ValueError, match="at least one key"):
        kernel_weights(data.x_test, torch.empty(0))
    with pytest.raises(ValueError, match="values must have the shape"):
        NWKernelRegression()(data.x_test, data.x_train, data.y_train[:5])


def test_bad_training_arguments_are_rejected(data):
    with pytest.raises(ValueError, match="x_train and y_train"):
        train_nw_kernel_regression(data.x_train, data.y_train[:-1])
    with pytest.raises(ValueError, match="num_epochs"):
        train_nw_kernel_regression(data.x_train, data.y_train, num_epochs=0)
    with pytest.raises(ValueError, match=r"n >= 2"):
        leave_one_out(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="y_train must have the shape"):
        leave_one_out_error(data.x_train, data.y_train[:3])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_train": 0}, "num_train"),
        ({"num_test": 0}, "num_test"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"x_max": 0.0}, "x_max"),
    ],
)
def test_bad_data_arguments_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_regression_data(**kwargs)
