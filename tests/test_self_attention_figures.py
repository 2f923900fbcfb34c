"""The timing sentences of the self-attention chapter are worded from the numbers.

`self_attention_timing_verdicts` reads the measured slopes against the layers' FLOP counts.
Each test feeds it timings made from a known law and checks the sentence it picks, so that a
build whose numbers say something else cannot get the old sentence.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
import torch

from attention_book.experiments.self_attention import (
    SEQUENCE_LENGTHS,
    TIMING_WIDTH,
    fitted_slope,
    self_attention_flops,
    self_attention_gradient_reach,
)
from attention_book.figures.self_attention import (
    self_attention_reach_facts,
    self_attention_reach_verdicts,
    self_attention_timing_facts,
    self_attention_timing_table,
    self_attention_timing_verdicts,
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


def test_the_flop_count_gives_the_numbers_of_the_prose():
    facts = self_attention_timing_verdicts(timings(power_law(1), power_law(1), power_law(2)))
    # n / 2d at the first and last fitted lengths, with d = 64.
    assert (facts["ratio_first"], facts["ratio_last"]) == ("2", "16")
    assert (facts["projections_share_first"], facts["projections_share_last"]) == ("33%", "6%")
    assert facts["flop_slope"] == "1.84"
    # The local slopes of a FLOP-proportional time rise towards 2, as the page says.
    assert 1.7 < float(facts["flop_local_first"]) < float(facts["flop_local_last"]) < 2


def test_slopes_close_to_the_counts_are_called_so():
    facts = self_attention_timing_verdicts(
        timings(power_law(1), power_law(1.02, scale=1e-5), flop_proportional())
    )
    assert "Both slopes are close to 1, as Table 1 predicts." in facts["linear"]
    assert facts["attention_slope"] == facts["flop_slope"] == "1.84"
    assert "That is close to the FLOP count's 1.84." in facts["attention"]
    assert "still rose over the last doubling" in facts["attention"]
    assert "stays below 2 at these lengths" in facts["summary"]


def test_slopes_away_from_the_counts_are_not_called_linear_or_expected():
    # The second review's build: convolution 1.45, GRU 1.00, self-attention 1.73, its local
    # slope falling over the last doubling.
    attention = power_law(1.75)
    attention[-1] = attention[-2] * 2**1.64
    facts = self_attention_timing_verdicts(timings(power_law(1.45), power_law(1.0), attention))
    assert facts["conv_slope"] == "1.45" and facts["gru_slope"] == "1.00"
    assert "Both slopes are close to 1" not in facts["linear"]
    assert "The GRU's slope is close to 1" in facts["linear"]
    assert "The convolution's time grew faster than linearly" in facts["linear"]
    assert "below the FLOP count's 1.84" in facts["attention"]
    assert "fell over the last doubling" in facts["attention"]
    steep = self_attention_timing_verdicts(timings(power_law(1), power_law(1), power_law(2.3)))
    assert "above the FLOP count's" in steep["attention"]
    assert "above its FLOP count's" in steep["summary"]
    assert "stays below 2" not in steep["summary"]


def test_the_short_lengths_are_explained_only_when_their_slopes_show_it():
    fixed = self_attention_timing_verdicts(
        timings(power_law(1, fixed=1e-3), power_law(1), power_law(2, fixed=1e-2))
    )
    assert "as for the convolution and self-attention" in fixed["short"]
    assert "That is why the fit starts at 256." in fixed["short"]
    plain = self_attention_timing_verdicts(timings(power_law(1), power_law(1), power_law(2)))
    assert "None is far below 1" in plain["short"]


def test_the_gru_gap_is_explained_only_when_it_exceeds_the_flops():
    slow = self_attention_timing_verdicts(
        timings(power_law(1), power_law(1, scale=3e-5), power_law(2))
    )
    assert "GRU took 30.0 times as long" in slow["gru"]
    assert "sequential operations" in slow["gru"]
    fast = self_attention_timing_verdicts(
        timings(power_law(1), power_law(1, scale=2e-6), power_law(2))
    )
    assert "GRU took 2.0 times as long" in fast["gru"]
    assert "cost little beyond their FLOPs" in fast["gru"]


@pytest.mark.parametrize("key", ["conv_slope", "gru_slope", "attention_slope"])
def test_the_facts_are_those_of_the_run_the_table_shows(key):
    facts, table = self_attention_timing_facts(), self_attention_timing_table()
    assert f"| {facts[key]} |" in table


# ---------------------------------------------------------------------------------------------
# The gradient reach and the encodings' dot products, as the chapter's prose and alt texts read
# them.


def reach(gru: list[float], attention: list[float]) -> dict[str, list[float]]:
    """A made-up gradient reach over 64 distances; the convolutions reach back 4."""
    conv = [0.3] * 5 + [0.0] * 59
    return {"4 convolutions": conv, "GRU": gru, "self-attention": attention}


def test_an_exponential_gru_and_a_flat_attention_are_called_so():
    facts = self_attention_reach_verdicts(reach([1.6**-d for d in range(64)], [0.03] * 64))
    assert facts["conv_reach"] == "4"
    assert "falls by 13 orders of magnitude from distance 0 to 63" in facts["gru"]
    assert "close to a straight line" in facts["gru"] and "factor of 1.6" in facts["gru"]
    assert "within a factor of 1.0" in facts["attention"]
    assert "distance barely matters" in facts["attention"]
    assert "fades exponentially" in facts["summary"] and "about equally" in facts["summary"]


def test_other_shapes_are_not_called_exponential_or_equal():
    bumpy = [10.0 ** -(d // 16 * 4) for d in range(64)]  # flat steps, then a drop of 4 decades
    facts = self_attention_reach_verdicts(reach(bumpy, [0.03 * 1.1**d for d in range(64)]))
    assert "not along a straight line" in facts["gru"]
    assert "exponentially" not in facts["summary"]
    assert "barely matters" not in facts["attention"]
    assert "varies with distance" in facts["summary"]
    flat = self_attention_reach_verdicts(reach([1.0] * 64, [0.03] * 64))
    assert "does not fall by a factor of 10" in flat["gru"]


def test_the_measured_reach_reads_as_the_alt_text_says():
    measured = self_attention_gradient_reach()
    conv = next(iter(measured.values()))
    assert all(g > 0 for g in conv[:5]) and not any(conv[5:])  # four back, then exactly zero
    facts = self_attention_reach_facts()
    assert facts["conv_reach"] == "4"
    assert "close to a straight line" in facts["gru"]  # "close to a straight line"
    gru = measured["GRU"]
    assert gru[0] / gru[-1] > 1e10  # "many orders of magnitude"
    attention = measured["self-attention"]
    assert "distance barely matters" in facts["attention"]  # "a small band"
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
    page = Path(__file__).resolve().parents[1] / "docs" / "chapters" / "self-attention.md"
    text = page.read_text(encoding="utf-8")
    for key in ("conv_reach", "gru", "attention", "summary"):
        assert f"{{{{ build:self_attention_reach_facts.{key} }}}}" in text, key
