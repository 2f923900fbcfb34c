"""The multi-head chapter's verdict is worded from the numbers it reads.

`multihead_verdict` returns the words of the chapter that depend on its numbers: whether the
one-head model's failure is one of binding (both neighbours' tokens known, their sides not),
where the loss curves end and how fast the models with more heads fall, how the four heads
share the two neighbours, and how often two heads solved the task in the recorded trainings.
Each branch is fed numbers that call for it, and the cached experiment is checked against what
the figures' alt texts say of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from repo import ROOT

from attention_book.figures.multihead import multihead_facts, multihead_verdict

PAGE = ROOT / "docs" / "chapters" / "multihead-attention.md"


def one_head(top1: float, top2: float, mass: float, other: float) -> dict[str, list[float]]:
    """A one-head result whose "after" answer is the weak one."""
    return {
        "top1": [0.98, top1],
        "top2": [1.0, top2],
        "neighbour_mass": [1.0, mass],
        "wrong_is_other": [0.0, other],
    }


def runs(one_head_last: float, more_heads: list[float]) -> list[dict]:
    """Three one-head runs ending at `one_head_last`, and runs of two heads with the losses
    `more_heads`, epoch by epoch."""
    one = [{"num_heads": 1, "train_loss": [2.3, 1.0, one_head_last]} for _ in range(3)]
    return [*one, {"num_heads": 2, "train_loss": more_heads}]


def verdict(**numbers: Any) -> dict[str, str]:
    """`multihead_verdict` of numbers like the chapter's, with `numbers` in their place."""
    given = {
        "one_head": one_head(0.165, 0.998, 0.904, 1.0),
        "runs": runs(0.55, [2.4, 0.6, 0.0021, 0.0002]),
        "before": [0.12, 0.94, 0.68, 0.01],
        "after": [0.71, 0.01, 0.08, 0.94],
        "recorded": [100.0, 100.0, 100.0],
    }
    return multihead_verdict(**{**given, **numbers})


def test_a_mix_up_of_the_two_sides_is_called_a_binding_failure():
    words = verdict()
    assert words["weak"] == "after"
    assert "fails to bind tokens to positions" in words["binding"]


def test_a_model_that_loses_the_tokens_is_not_called_a_binding_failure():
    words = verdict(one_head=one_head(0.165, 0.6, 0.5, 1.0))
    assert "not even among the two most probable" in words["binding"]
    assert "fails to bind" not in words["binding"]


def test_errors_that_are_not_mix_ups_are_not_called_a_binding_failure():
    assert "only in part" in verdict(one_head=one_head(0.3, 0.99, 0.95, 0.4))["binding"]
    assert "only in part" in verdict(one_head=one_head(0.7, 0.99, 0.95, 1.0))["binding"]


def test_the_weak_answer_is_found_on_either_side():
    result = one_head(0.165, 0.998, 0.904, 1.0)
    swapped = {key: values[::-1] for key, values in result.items()}
    assert verdict(one_head=swapped)["weak"] == "before"


def test_the_cached_one_head_model_fails_to_bind():
    # The chapter's statement about the stored experiment (the block on the page asserts the
    # same numbers): its weak answer is a mix-up of the two sides.
    from attention_book.experiments.multihead import multihead_binding

    facts = multihead_facts()
    assert "fails to bind tokens to positions" in facts["binding"]
    # The numbers the sentence cites are those of the weak answer.
    binding = multihead_binding(1)
    weak = ("before", "after").index(facts["weak"])
    assert facts["weak_top1"] == f"{binding['top1'][weak]:.1%}"
    assert facts["strong_top1"] == f"{binding['top1'][1 - weak]:.1%}"


def test_the_loss_caption_says_where_the_runs_end_and_how_fast_the_others_fall():
    words = verdict()
    assert words["loss_place"] == "far above"
    assert words["loss_apart"] == "at least 2,750 times lower"
    assert words["loss_fall"].endswith("below 1% of its first epoch's loss by epoch 3.")
    close = verdict(runs=runs(0.05, [2.4, 0.6, 0.1, 0.03]))
    assert close["loss_place"] == "not far above"
    assert close["loss_apart"] == "the lowest one-head loss is only 1.7 times theirs"
    assert close["loss_fall"].startswith("Not every two- or four-head run falls below 1%")


def test_the_head_verdict_names_how_the_heads_share_the_neighbours():
    words = verdict()
    assert words["heads"].startswith("each head serves one of the two neighbours")
    assert "two of them sharply" in words["heads"] and "two with part of" in words["heads"]
    assert words["pairs"] == "gives two to the token before and two to the token after"
    sharp = verdict(before=[0.95, 0.95, 0.95, 0.01], after=[0.01, 0.01, 0.01, 0.95])
    assert "every one of them sharply" in sharp["heads"]
    assert "three to the token before and one to the token after" in sharp["heads"]
    blurred = verdict(before=[0.45, 0.9, 0.9, 0.0], after=[0.4, 0.0, 0.0, 0.9])
    assert blurred["heads"].startswith("the heads do not each serve one neighbour")
    assert blurred["pairs"] == "does not give each neighbour heads of its own"
    one_sided = verdict(before=[0.9, 0.9, 0.9, 0.9], after=[0.0, 0.0, 0.0, 0.0])
    assert one_sided["heads"].startswith("the heads do not each serve one neighbour")


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
    facts = multihead_facts()
    if len(steep) < len(more):
        assert facts["loss_fall"].startswith("Not every two- or four-head run falls below 1%")
    # The heatmaps' alt text claims no assignment of heads to neighbours: it changes from seed to
    # seed (seeds 3 and 4 of the record), and the build's sentence (`facts["heads"]`) says it.
    alt = PAGE.read_text(encoding="utf-8").split("(../figures/multihead_head_heatmaps.svg)")[0]
    alt = alt[alt.rindex("![") :]
    assert "each attends" not in alt and "almost only" not in alt
    assert facts["heads"]


def test_the_page_words_its_verdicts_from_the_build():
    text = PAGE.read_text(encoding="utf-8")
    for key in ("loss_place", "loss_apart", "loss_fall", "pairs", "recorded"):
        assert f"{{{{ build:multihead_facts.{key} }}}}" in text, key
    # How the four heads share the neighbours is measured in the deep dive inside the heads.
    heads = (PAGE.parent / "multihead-attention-heads.md").read_text(encoding="utf-8")
    assert "{{ build:multihead_facts.heads }}" in heads


def test_the_spread_sentence_says_whether_two_heads_always_solved_it():
    assert verdict(recorded=[100.0, 100.0, 100.0])["recorded"] == "every time."
    once = verdict(recorded=[100.0, 90.26, 100.0])["recorded"]
    assert once.startswith("in 2 and fell short in 1, where a seed's run fell into the one-head")
    assert "down to 90.3%" in once and "reachable, not certain" in once
    with pytest.raises(ValueError, match="recorded"):
        verdict(recorded=[])
