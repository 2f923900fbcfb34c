"""The timing and reach sentences of the self-attention chapter are worded from the numbers.

`self_attention_verdict` reads the measured slopes against the layers' FLOP counts, and the
shape of the gradient reach; it returns the words that depend on them, and the page holds the
rest of each sentence. Each test feeds it timings or gradients made from a known law and checks
the words it picks, so that a build whose numbers say something else cannot get the old ones.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from repo import ROOT

from attention_book.experiments.self_attention import (
    SEQUENCE_LENGTHS,
    TIMING_WIDTH,
    fitted_slope,
    self_attention_flops,
    self_attention_gradient_reach,
)
from attention_book.figures.self_attention import (
    self_attention_facts,
    self_attention_timing_table,
    self_attention_verdict,
)
from attention_book.positional import sinusoidal_table


def power_law(exponent: float, scale: float = 1e-6, fixed: float = 0.0) -> list[float]:
    """Seconds growing like ``n ** exponent``, plus a fixed cost per call."""
    return [fixed + scale * n**exponent for n in SEQUENCE_LENGTHS]


def flop_proportional(scale: float = 1e-10) -> list[float]:
    """Seconds exactly proportional to self-attention's FLOPs."""
    counts = [self_attention_flops(n, TIMING_WIDTH) for n in SEQUENCE_LENGTHS]
    return [scale * (c["self-attention projections"] + c["self-attention scores"]) for c in counts]


def timings(conv: list[float], gru: list[float], attention: list[float]) -> dict:
    """The shape of `self_attention_timings`'s result, slopes fitted as it fits them."""
    fit = [i for i, n in enumerate(SEQUENCE_LENGTHS) if n >= 256]
    result = {}
    for name, seconds in (("convolution", conv), ("GRU", gru), ("self-attention", attention)):
        slope = fitted_slope([SEQUENCE_LENGTHS[i] for i in fit], [seconds[i] for i in fit])
        result[name] = {"seconds": seconds, "slope": slope}
    return result


def reach(gru: list[float], attention: list[float]) -> dict[str, list[float]]:
    """A made-up gradient reach over 64 distances; the convolutions reach back 4."""
    conv = [0.3] * 5 + [0.0] * 59
    return {"4 convolutions": conv, "GRU": gru, "self-attention": attention}


def verdict(measured: dict | None = None, gradients: dict | None = None) -> dict[str, str]:
    """`self_attention_verdict` of these timings and gradients, or of plain laws."""
    measured = measured or timings(power_law(1), power_law(1), power_law(2))
    gradients = gradients or reach([1.6**-d for d in range(64)], [0.03] * 64)
    return self_attention_verdict(measured, gradients)


def test_the_flop_count_gives_the_numbers_of_the_prose():
    facts = self_attention_facts()  # the counts do not depend on the timings
    # n / 2d at the first and last fitted lengths, with d = 64.
    assert (facts["ratio_first"], facts["ratio_last"]) == ("2", "16")
    assert (facts["projections_share_first"], facts["projections_share_last"]) == ("33%", "6%")
    assert facts["flop_slope"] == "1.84"
    # The local slopes of a FLOP-proportional time rise towards 2, as the page says.
    assert 1.7 < float(facts["flop_local_first"]) < float(facts["flop_local_last"]) < 2


def test_slopes_close_to_the_counts_are_called_so():
    words = verdict(timings(power_law(1), power_law(1.02, scale=1e-5), flop_proportional()))
    assert words["linear_close"] == "Both slopes are close to 1 in every run, as Table 1 predicts."
    assert words["attention_vs_flops"] == "close to the FLOP count's 1.84."
    assert words["attention_local"].startswith("still rose over the last doubling")
    assert words["summary_attention"].startswith("stays below 2 at these lengths")
    assert (
        "do 33% of its FLOPs at $n = 256$ and still 6% at $n = 2048$"
        in (words["summary_attention"])
    )


def test_slopes_away_from_the_counts_are_not_called_linear_or_expected():
    # The second review's build: convolution 1.45, GRU 1.00, self-attention 1.73, its local
    # slope falling over the last doubling.
    attention = power_law(1.75)
    attention[-1] = attention[-2] * 2**1.64
    words = verdict(timings(power_law(1.45), power_law(1.0), attention))
    assert "Both slopes are close to 1" not in words["linear_close"]
    assert words["linear_close"].startswith(
        "The GRU's slope is close to 1 in every run, as Table 1 predicts."
    )
    assert "The convolution's time grew faster than linearly in every run" in words["linear_close"]
    assert words["attention_vs_flops"].startswith("below the FLOP count's 1.84: ")
    assert "grew more slowly than the FLOPs" in words["attention_vs_flops"]
    assert words["attention_local"].startswith("fell over the last doubling")
    steep = verdict(timings(power_law(1), power_law(1), power_law(2.3)))
    assert steep["attention_vs_flops"].startswith("above the FLOP count's")
    assert steep["summary_attention"].startswith("is above its FLOP count's")
    assert "stays below 2" not in steep["summary_attention"]


def test_the_short_lengths_are_explained_only_when_their_slopes_show_it():
    fixed = verdict(timings(power_law(1, fixed=1e-3), power_law(1), power_law(2, fixed=1e-2)))
    assert "as for the convolution and self-attention" in fixed["short_flat"]
    assert fixed["short_flat"].endswith("That is why the fit starts at 256.")
    assert verdict()["short_flat"].startswith("None is far below 1")


def test_the_gru_gap_is_explained_only_when_it_exceeds_the_flops():
    slow = verdict(timings(power_law(1), power_law(1, scale=3e-5), power_law(2)))
    assert "sequential operations" in slow["gru_gap"]
    fast = verdict(timings(power_law(1), power_law(1, scale=2e-6), power_law(2)))
    assert fast["gru_gap"] == "In this build its sequential steps cost little beyond their FLOPs."


def test_the_table_note_says_where_self_attention_was_faster_than_the_gru():
    # 1e-6 n^2 against 1e-4 n: self-attention is the faster below n = 100.
    faster = verdict(timings(power_law(1), power_law(1, scale=1e-4), power_law(2)))
    assert faster["faster"] == (
        "self-attention was faster than the GRU up to n = 64 (at 3 of the 8 lengths measured)."
    )
    slower = verdict(timings(power_law(1), power_law(1, scale=1e-9), power_law(2)))
    assert slower["faster"] == "the GRU was faster than self-attention at every length."


@pytest.mark.parametrize("key", ["conv_slope", "gru_slope", "attention_slope"])
def test_the_facts_are_those_of_the_run_the_table_shows(key):
    facts, table = self_attention_facts(), self_attention_timing_table()
    assert f"| {facts[key]} |" in table


# ---------------------------------------------------------------------------------------------
# The gradient reach and the encodings' dot products, as the chapter's prose and alt texts read
# them.


def test_an_exponential_gru_and_a_flat_attention_are_called_so():
    words = verdict()
    assert "falls by 13 orders of magnitude from distance 0 to 63" in words["gru_reach"]
    assert "close to a straight line" in words["gru_reach"]
    assert "factor of 1.6" in words["gru_reach"]
    assert words["attention_reach"] == "On the figure's scale, distance barely matters."
    assert words["gru_summary"] == "fades exponentially with distance"
    assert words["attention_summary"] == "self-attention reaches every distance about equally"


def test_other_shapes_are_not_called_exponential_or_equal():
    bumpy = [10.0 ** -(d // 16 * 4) for d in range(64)]  # flat steps, then a drop of 4 decades
    words = verdict(gradients=reach(bumpy, [0.03 * 1.1**d for d in range(64)]))
    assert "not along a straight line" in words["gru_reach"]
    assert words["gru_summary"] == "fades with distance"
    assert words["attention_reach"] == ""
    assert "varies with distance" in words["attention_summary"]
    flat = verdict(gradients=reach([1.0] * 64, [0.03] * 64))
    assert "does not fall by a factor of 10" in flat["gru_reach"]
    assert flat["gru_summary"] == "does not fade here"


def test_the_measured_reach_reads_as_the_alt_text_says():
    measured = self_attention_gradient_reach()
    conv = next(iter(measured.values()))
    assert all(g > 0 for g in conv[:5]) and not any(conv[5:])  # four back, then exactly zero
    facts = self_attention_facts()
    assert facts["conv_reach"] == "4"
    assert "close to a straight line" in facts["gru_reach"]  # "close to a straight line"
    gru = measured["GRU"]
    assert gru[0] / gru[-1] > 1e10  # "many orders of magnitude"
    attention = measured["self-attention"]
    assert "distance barely matters" in facts["attention_reach"]  # "a small band"
    assert attention[0] > max(attention[1:])  # "at every distance but the first"


def test_the_encodings_dot_products_read_as_the_figure_says():
    table = sinusoidal_table(160, 64, dtype=torch.float64)
    gram = table @ table.T
    for offset in (1, 7, 30):  # the heatmap is constant along every diagonal
        diagonal = gram.diagonal(offset)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-9)
    curve = [float(table[0] @ table[d]) for d in range(60)]  # the figure's distances
    assert curve[0] == pytest.approx(32.0) and max(curve) == curve[0]
    assert min(curve[1:4]) > max(curve[10:])  # near positions are more similar than distant
    assert any(b > a for a, b in pairwise(curve))  # not monotonic: bumps
    small = sinusoidal_table(60, 32)  # the heatmap: its last pair is nearly constant (0, 1)
    assert small[:, -2].abs().max() < 0.02 and small[:, -1].min() > 0.99


def test_the_page_words_the_reach_from_the_build():
    page = ROOT / "docs" / "chapters" / "self-attention.md"
    text = page.read_text(encoding="utf-8")
    for key in ("conv_reach", "gru_reach", "attention_reach", "gru_summary", "attention_summary"):
        assert f"{{{{ build:self_attention_facts.{key} }}}}" in text, key


def test_slopes_the_runs_disagree_on_are_worded_as_undecided():
    # The medians' fits say 1.0 and 1.84, but the runs' fits straddle both thresholds.
    measured = timings(power_law(1), power_law(1), flop_proportional())
    measured["convolution"]["run_slopes"] = [0.8, 1.0, 1.1]
    measured["self-attention"]["run_slopes"] = [1.6, 1.84, 1.9]
    words = verdict(measured)
    assert words["linear_close"] == (
        "The GRU's slope is close to 1 in every run, as Table 1 predicts. The convolution's slope "
        "ranged from 0.80 to 1.10 over the runs: they cannot say whether it is close to 1."
    )
    assert words["attention_vs_flops"] == (
        "not told apart from the FLOP count's 1.84: the runs' slopes range from 1.60 to 1.90."
    )


def test_a_local_slope_the_runs_move_both_ways_is_not_read():
    measured = timings(power_law(1), power_law(1), power_law(2))
    rising, falling = power_law(2), power_law(2)
    rising[-1] *= 1.2  # the last doubling steeper in one run ...
    falling[-1] /= 1.2  # ... and flatter in the other
    measured["self-attention"]["runs"] = [[a, b] for a, b in zip(rising, falling, strict=True)]
    words = verdict(measured)
    assert words["attention_local"].startswith("changed over the last doubling by -0.26 to +0.26")
    assert words["attention_local"].endswith("the runs do not say which way it moves there.")


def test_a_local_slope_that_moves_one_way_by_little_says_so():
    measured = timings(power_law(1), power_law(1), power_law(2))
    steeper, slightly = power_law(2), power_law(2)
    steeper[-1] *= 1.2  # +0.26 over the last doubling in one run ...
    slightly[-1] *= 1.01  # ... +0.01 in the other: the same way, not by 0.05 in both
    measured["self-attention"]["runs"] = [[a, b] for a, b in zip(steeper, slightly, strict=True)]
    words = verdict(measured)
    assert words["attention_local"] == (
        "rose over the last doubling in every run, by +0.01 to +0.26: in some runs by no more "
        "than the 0.05 this page counts as a change."
    )
