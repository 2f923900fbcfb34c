"""The multi-head chapter's verdicts are worded from the numbers they read.

`multihead_binding_verdict` says whether the one-head model's failure is one of binding
(both neighbours' tokens known, their sides not); `multihead_loss_verdict` where the loss
curves end and how fast the models with more heads fall; `multihead_head_verdict` how the
four heads share the two neighbours. Each branch is fed numbers that call for it, and the
cached experiment is checked against what the figures' alt texts say of it.
"""

from __future__ import annotations

from pathlib import Path

from attention_book.figures.multihead import (
    multihead_binding_facts,
    multihead_binding_verdict,
    multihead_head_facts,
    multihead_head_verdict,
    multihead_loss_facts,
    multihead_loss_verdict,
)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "chapters" / "multihead-attention.md"

TWO_HEADS = {
    "top1": [1.0, 1.0],
    "top2": [1.0, 1.0],
    "neighbour_mass": [1.0, 1.0],
    "wrong_is_other": [0.0, 0.0],
}


def one_head(top1: float, top2: float, mass: float, other: float) -> dict[str, list[float]]:
    """A one-head result whose "after" answer is the weak one."""
    return {
        "top1": [0.98, top1],
        "top2": [1.0, top2],
        "neighbour_mass": [1.0, mass],
        "wrong_is_other": [0.0, other],
    }


def test_a_mix_up_of_the_two_sides_is_called_a_binding_failure():
    facts = multihead_binding_verdict(one_head(0.165, 0.998, 0.904, 1.0), TWO_HEADS)
    assert facts["weak"] == "after"
    assert (facts["weak_top1"], facts["weak_top2"], facts["weak_mass"]) == (
        "16.5%",
        "99.8%",
        "90.4%",
    )
    assert facts["strong_top1"] == "98.0%" and facts["two_heads_top1"] == "100.0%"
    assert "fails to bind tokens to positions" in facts["verdict"]


def test_a_model_that_loses_the_tokens_is_not_called_a_binding_failure():
    facts = multihead_binding_verdict(one_head(0.165, 0.6, 0.5, 1.0), TWO_HEADS)
    assert "not even among the two most probable" in facts["verdict"]
    assert "fails to bind" not in facts["verdict"]


def test_errors_that_are_not_mix_ups_are_not_called_a_binding_failure():
    facts = multihead_binding_verdict(one_head(0.3, 0.99, 0.95, 0.4), TWO_HEADS)
    assert "only in part" in facts["verdict"]
    better = multihead_binding_verdict(one_head(0.7, 0.99, 0.95, 1.0), TWO_HEADS)
    assert "only in part" in better["verdict"]


def test_the_weak_answer_is_found_on_either_side():
    result = one_head(0.165, 0.998, 0.904, 1.0)
    swapped = {key: values[::-1] for key, values in result.items()}
    assert multihead_binding_verdict(swapped, TWO_HEADS)["weak"] == "before"


def test_the_cached_one_head_model_fails_to_bind():
    # The chapter's statement about the stored experiment (the block on the page asserts the
    # same numbers): its weak answer is a mix-up of the two sides.
    assert "fails to bind tokens to positions" in multihead_binding_facts()["verdict"]


def runs(one_head_last: float, more_heads: list[float]) -> list[dict]:
    """Three one-head runs ending at `one_head_last`, and runs of two heads with the losses
    `more_heads`, epoch by epoch."""
    one = [{"num_heads": 1, "train_loss": [2.3, 1.0, one_head_last]} for _ in range(3)]
    return [*one, {"num_heads": 2, "train_loss": more_heads}]


def test_the_loss_caption_says_where_the_runs_end_and_how_fast_the_others_fall():
    facts = multihead_loss_verdict(runs(0.55, [2.4, 0.6, 0.0021, 0.0002]))
    assert "the one-head runs end far above the others: at 0.55 to 0.55" in facts["caption"]
    assert "(at least 2,750 times lower)" in facts["caption"]
    assert "below 1% of its first epoch's loss by epoch 3." in facts["caption"]
    close = multihead_loss_verdict(runs(0.05, [2.4, 0.6, 0.1, 0.03]))
    assert "not far above" in close["caption"] and "only 1.7 times theirs" in close["caption"]
    assert "Not every two- or four-head run falls below 1%" in close["caption"]


def test_the_head_verdict_names_how_the_heads_share_the_neighbours():
    facts = multihead_head_verdict([0.12, 0.94, 0.68, 0.01], [0.71, 0.01, 0.08, 0.94])
    assert "each head serves one of the two neighbours" in facts["spread"]
    assert "two of them sharply" in facts["spread"] and "two with part of" in facts["spread"]
    assert facts["pairs"].endswith("gives two to the token before and two to the token after")
    sharp = multihead_head_verdict([0.95, 0.95, 0.95, 0.01], [0.01, 0.01, 0.01, 0.95])
    assert "every one of them sharply" in sharp["spread"]
    assert "three to the token before and one to the token after" in sharp["spread"]
    blurred = multihead_head_verdict([0.45, 0.9, 0.9, 0.0], [0.4, 0.0, 0.0, 0.9])
    assert "do not each serve one neighbour" in blurred["spread"]
    one_sided = multihead_head_verdict([0.9, 0.9, 0.9, 0.9], [0.0, 0.0, 0.0, 0.0])
    assert "do not each serve one neighbour" in one_sided["spread"]


def test_the_cached_runs_read_as_the_alt_texts_say():
    # The loss curves: "the one-head runs level off far above most two- and four-head runs,
    # which fall steeply in the first epochs". Most, not all: with some seeds a two-head run
    # falls into the one-head model's failure too (one of the 15 recorded two-head runs did,
    # seed offset 2), and the caption then says so.
    from attention_book.experiments.multihead import multihead_experiment

    runs = multihead_experiment()["runs"]
    one = min(r["train_loss"][-1] for r in runs if r["num_heads"] == 1)
    more = [r["train_loss"] for r in runs if r["num_heads"] > 1]
    steep = [loss for loss in more if loss[-1] * 10 <= one and loss[4] <= loss[0] / 100]
    assert len(steep) > len(more) / 2
    caption = multihead_loss_facts()["caption"]
    if len(steep) < len(more):
        assert "Not every two- or four-head run falls below 1%" in caption
    # The heatmaps: "four heads: each attends mostly to one of the two neighbours".
    assert "each head serves one of the two neighbours" in multihead_head_facts()["spread"]


def test_the_page_words_its_verdicts_from_the_build():
    text = PAGE.read_text(encoding="utf-8")
    assert "{{ build:multihead_loss_facts.caption }}" in text
    assert "{{ build:multihead_head_facts.spread }}" in text
    assert "{{ build:multihead_head_facts.pairs }}" in text


def test_the_spread_sentence_says_whether_two_heads_always_solved_it():
    from attention_book.figures.multihead import multihead_spread_verdict

    always = multihead_spread_verdict([100.0, 100.0, 100.0])
    assert "two heads answered both questions every time" in always
    once = multihead_spread_verdict([100.0, 90.26, 100.0])
    assert "in 2 and fell short in 1, where a seed's run fell into the one-head failure" in once
    assert "down to 90.3%" in once and "reachable, not certain" in once
    assert multihead_spread_verdict([]) == ""
