"""The multi-head chapter's binding verdict is worded from the numbers it reads.

`multihead_binding_verdict` says whether the one-head model's failure is one of binding
(both neighbours' tokens known, their sides not); each branch is fed numbers that call for it.
"""

from __future__ import annotations

from attention_book.figures.multihead import multihead_binding_facts, multihead_binding_verdict

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
