"""The Nadaraya-Watson chapter's sentences that read the build's numbers hold for those numbers.

The chapter's experiment is computed afresh at every build (a fraction of a second, no cache),
from one seeded data set. Where the prose, a caption or a figure's alt text reads its numbers
in words ("less than half", "a band that is darker at the ends", "nearly the same curve",
"levels off"), a test here checks the words against the numbers, so that a change of the data
or of the estimators that makes a sentence wrong fails here. The sentences that carry a number
come from `nw_facts`; the words among them that depend on the numbers come from `nw_verdict`,
tested here on made-up numbers.
"""

from __future__ import annotations

import re

import pytest
import torch
from repo import ROOT

from attention_book.experiments.nadaraya_watson import (
    BANDWIDTHS,
    KERNEL_NAMES,
    nw_bandwidth_sweep_errors,
    nw_data,
    nw_loo_bandwidth,
    nw_test_errors,
    nw_trained_model,
    nw_without_leave_one_out,
)
from attention_book.figures.nadaraya_watson import (
    EXPLORER_BANDWIDTHS,
    nw_verdict,
    nw_weight_spread,
)
from attention_book.nadaraya_watson import attention_pooling

PAGE = ROOT / "docs" / "chapters" / "nadaraya-watson.md"


def text() -> str:
    return " ".join(PAGE.read_text(encoding="utf-8").split())


def fit(kernel: str, bandwidth: float) -> tuple[torch.Tensor, torch.Tensor]:
    data = nw_data()
    return attention_pooling(data.x_test, data.x_train, data.y_train, kernel, bandwidth)


def test_weight_spread_counts_the_keys_a_query_averages_over():
    even = torch.full((2, 8), 1 / 8)
    one_hot = torch.eye(4)
    assert nw_weight_spread(even) == pytest.approx(8.0)
    assert nw_weight_spread(one_hot) == pytest.approx(1.0)


def test_the_width_verdict_follows_the_distance_between_the_two_bandwidths():
    near = nw_verdict(0.26, 0.25, 0.05, lowest=0.342, noise=0.315)
    assert "within one step of the grid (0.05)" in near["agreement"]
    assert "found the same answer as the search" in near["agreement"]
    assert near["summary"].startswith("recovers what a grid search")
    far = nw_verdict(0.40, 0.25, 0.05, lowest=0.342, noise=0.315)
    assert "more than one step of the grid" in far["agreement"]
    assert "same answer" not in far["agreement"] and far["summary"].startswith("did not land")
    page = text()
    assert "Learning one attention parameter by gradient descent {{ build:nw_facts.summary }}" in (
        page
    )
    assert "{{ build:nw_facts.agreement }}" in page


def test_the_noise_floor_says_on_which_side_the_lowest_error_lies():
    assert nw_verdict(0.26, 0.25, 0.05, lowest=0.342, noise=0.315)["noise_relation"] == "above"
    assert nw_verdict(0.26, 0.25, 0.05, lowest=0.2, noise=0.315)["noise_relation"] == "below"
    assert "{{ build:nw_facts.noise_relation }} this sample's own noise" in text()


def test_the_learned_width_lands_on_the_grid_search():
    """'close to the one that leave-one-out picked': within one step of the grid."""
    model, _ = nw_trained_model()
    step = BANDWIDTHS[1] - BANDWIDTHS[0]
    assert abs(1 / model.w.item() - nw_loo_bandwidth("gaussian")) <= step
    rows = {name: (loo, test) for name, _, loo, test in nw_test_errors()}
    learned = rows["Parametric Gaussian, learned w"]
    searched = rows["Gaussian kernel, σ by leave-one-out"]
    assert learned[0] == pytest.approx(searched[0], abs=1e-3)  # the same leave-one-out loss
    # "Before: a faint, wide band. After: a narrow, dark band" (the heatmaps' alt text).
    data = nw_data()
    with torch.no_grad():
        model(data.x_test, data.x_train, data.y_train)
    _, initial = fit("gaussian", 1.0)
    assert nw_weight_spread(model.attention_weights) < 0.5 * nw_weight_spread(initial)
    assert model.attention_weights.max() > 2 * initial.max()


def test_the_fixed_gaussian_is_too_smooth():
    """'less than half that of average pooling'; 'misses the height of the peak and the depth
    of the valley'; the band is wide and darker at the ends of the interval."""
    data = nw_data()
    rows = {name: test for name, _, _, test in nw_test_errors()}
    assert rows["Gaussian kernel, σ = 1"] < 0.5 * rows["Average pooling"]
    predictions, weights = fit("gaussian", 1.0)
    assert predictions.max() < data.y_test.max() - 0.2  # the peak
    valley = data.x_test > 3  # the truth's valley lies in the right part of the interval
    assert predictions[valley].min() > data.y_test[valley].min() + 0.1
    assert nw_weight_spread(weights) > 20  # "averages over many training points"
    largest = weights.max(dim=-1).values  # (num_test,): how dark each row's band is
    middle = largest[len(largest) // 3 : 2 * len(largest) // 3].max()
    assert largest[:3].min() > middle and largest[-3:].min() > middle  # darker at both ends


def test_the_bandwidth_sweep_reads_as_its_caption_says():
    """Too narrow is noisy, too wide is flat; similar best errors at different bandwidths; the
    width matters more than the kernel; the Gaussian's minimum lies at the smallest width."""
    sweep = nw_bandwidth_sweep_errors()
    best = {}
    for name, errors in sweep.items():
        low = min(errors)
        best[name] = (low, BANDWIDTHS[errors.index(low)])
        assert errors[0] > 2 * low and errors[-1] > 2 * low, name  # falls, then rises again
    lows = [low for low, _ in best.values()]
    assert max(lows) < 1.25 * min(lows)  # similar best errors
    assert best["gaussian"][1] < min(best["boxcar"][1], best["epanechnikov"][1])
    for errors in sweep.values():  # across the widths, the error varies far more
        assert max(errors) > 3 * max(lows)


def test_the_explorer_ends_read_as_its_alt_text_says():
    """At 0.05 the weights are a thin diagonal line; at 4 the fit is nearly flat and the
    weights almost uniform."""
    data = nw_data()
    assert EXPLORER_BANDWIDTHS[0] == 0.05 and EXPLORER_BANDWIDTHS[-1] == 4.0
    _, narrow = fit("gaussian", 0.05)
    assert nw_weight_spread(narrow) < 3
    wide_fit, wide = fit("gaussian", 4.0)
    assert nw_weight_spread(wide) > 0.9 * data.x_train.numel()
    truth_range = data.y_test.max() - data.y_test.min()
    assert wide_fit.max() - wide_fit.min() < 0.1 * truth_range


def test_the_kernels_at_their_chosen_bandwidths_give_nearly_the_same_curve():
    data = nw_data()
    fits = [fit(name, nw_loo_bandwidth(name))[0] for name in KERNEL_NAMES]
    truth_range = data.y_test.max() - data.y_test.min()
    for i, first in enumerate(fits):
        for second in fits[i + 1 :]:
            assert (first - second).abs().max() < 0.1 * truth_range


def test_the_training_curve_falls_quickly_then_levels_off_above_the_noise():
    _, losses = nw_trained_model()
    drop = losses[0] - losses[-1]
    fifth = len(losses) // 5
    assert losses[0] - losses[fifth] > 0.8 * drop  # most of the fall in the first fifth
    assert losses[-fifth - 1] - losses[-1] < 0.01 * drop  # flat over the last fifth
    assert losses[-1] > 0.25  # well above zero: above the noise's variance


def test_the_conclusions_hold_for_the_table():
    rows = {name: test for name, _, _, test in nw_test_errors()}
    average = rows.pop("Average pooling")
    assert average > 2 * max(rows.values())  # "by far the largest error"
    chosen = [rows[f"{name.capitalize()} kernel, σ by leave-one-out"] for name in KERNEL_NAMES]
    assert max(chosen) < 1.25 * min(chosen)  # "land close together"
    fixed = rows["Gaussian kernel, σ = 1"]
    assert max(chosen) < 0.25 * fixed  # "all far below the Gaussian with σ = 1"
    assert rows["Parametric Gaussian, learned w"] < 0.25 * fixed  # "much closer" (alt text)


def test_without_leave_one_out_each_point_mostly_copies_itself():
    """Exercise 2: 'the kernel narrows until each point mostly copies its own noisy target'."""
    data = nw_data()
    _, w, _, _ = nw_without_leave_one_out()[-1]
    _, weights = attention_pooling(
        data.x_train, data.x_train, data.y_train, "gaussian", bandwidth=1 / w
    )
    assert weights.diagonal().mean() > 0.5


def test_the_page_words_its_numbers_from_the_build():
    page = text()
    for key in ("w", "bandwidth", "agreement", "spread_initial", "spread_learned", "summary"):
        assert f"{{{{ build:nw_facts.{key} }}}}" in page, key
    assert "{{ build:nw_facts.train_seconds }} seconds" in page
    assert not re.search(r"fraction of a second|over a few nearby", page)
