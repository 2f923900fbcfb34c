"""The Bahdanau chapter's verdict is worded from the numbers it reads.

`bahdanau_verdict` returns the words of the chapter (and of the Introduction's evidence, which
shows the same run) that depend on its numbers: how each model's BLEU moves with the source
length, how the two trainings' CPU time compare, the two models' order over the recorded
trainings, whether the plain model is already weak on the shortest sources, and whether the
alignment figure's path turns back. Each branch is fed numbers that call for it; the stored run
is checked against what the pages say of it.
"""

from __future__ import annotations

from typing import Any

import pytest
from repo import ROOT

from attention_book.figures.bahdanau import bahdanau_verdict, length_trend

CHAPTERS = ROOT / "docs" / "chapters"


def verdict(**numbers: Any) -> dict[str, str]:
    """`bahdanau_verdict` of numbers like the build's, with `numbers` in their place."""
    given = {
        "bleu_first": {"plain": 42.5, "attention": 96.4},
        "bleu_last": {"plain": 25.6, "attention": 85.4},
        "cpu_seconds": {"plain": 30.0, "attention": 52.0},
        "seeds": [(92.3, 29.4), (85.5, 26.1), (92.8, 29.5)],
        "alignment": [0, 1, 2, 3],
        "source_tokens": ["on", "july", "6", ",", "<eos>"],
        "target_tokens": ["le", "6", "juillet", ","],
    }
    return bahdanau_verdict(**{**given, **numbers})


def test_the_trend_says_which_way_bleu_moves_with_the_length():
    assert length_trend(42.5, 25.6) == "falls" and length_trend(25.6, 42.5) == "rises"
    assert length_trend(42.5, 42.0) == "stays level"
    words = verdict(bleu_last={"plain": 25.6, "attention": 96.0})
    assert (words["trend_plain"], words["trend_attention"]) == ("falls", "stays level")


def test_the_short_source_verdict_says_how_far_behind_the_plain_model_is():
    weak = verdict(bleu_first={"plain": 50.1, "attention": 99.6})["short_source"]
    assert weak == "already weak there, 49.5 BLEU points behind"
    close = verdict(bleu_first={"plain": 95.0, "attention": 99.6})["short_source"]
    assert close == "within 10 BLEU points of the attention model there (4.6 behind)"
    ahead = verdict(bleu_first={"plain": 99.0, "attention": 98.0})["short_source"]
    assert "weak" not in ahead and ahead.endswith("(1.0 ahead)")


def test_the_epoch_time_sentence_follows_the_cpu_time_ratio_in_either_direction():
    slower = verdict()["epoch_time"]
    assert "took 1.7 times the CPU time of the plain model. Its decoder runs one step" in slower
    faster = verdict(cpu_seconds={"plain": 156.0, "attention": 126.0})["epoch_time"]
    assert "took 0.8 times the CPU time" in faster and "because" not in faster
    assert "less although" in faster
    same = verdict(cpu_seconds={"plain": 50.0, "attention": 52.0})["epoch_time"]
    assert "about the same work" in same and "1.04 times" in same


def test_the_seed_order_is_worded_by_the_books_rule():
    assert verdict()["seed_order"] == (
        "the attention model is ahead in every seed, by 59.4 to 63.3 points"
    )
    mixed = verdict(seeds=[(30.0, 29.0), (28.0, 29.0)])["seed_order"]
    assert mixed == "the seeds cannot tell them apart (1 of 2 favour attention)"
    mostly = [(31.0, 29.0), (32.0, 29.0), (31.5, 29.0), (28.8, 29.0), (31.0, 29.0)]
    assert verdict(seeds=mostly)["seed_order"] == (
        "the attention model is ahead on average, not in every seed (the gap ranged from -0.2 to "
        "3.0 points)"
    )
    with pytest.raises(ValueError, match="seeds"):
        verdict(seeds=[])


def test_the_alignment_path_says_where_it_turns_back():
    assert verdict()["alignment_path"] == "only moves forward: no reordering."
    turned = verdict(alignment=[0, 2, 1, 3])["alignment_path"]
    assert turned == (
        "is not monotone: «juillet» looks at «july» (source token 2) right after «6» looked "
        "at «6» (source token 3): the translation puts these words in another order than the "
        "source."
    )


def test_the_stored_run_reads_as_the_pages_say():
    from attention_book.experiments.bahdanau import bahdanau_experiment
    from attention_book.experiments.spread import seed_pairs
    from attention_book.figures.bahdanau import bahdanau_facts

    facts = bahdanau_facts()
    ratio = bahdanau_experiment()["train_cpu_seconds"]
    assert str(round(ratio["attention"] / ratio["plain"], 1)) in facts["epoch_time"]
    pairs = seed_pairs(
        ("bahdanau-attention", "BLEU, attention, greedy"), ("bahdanau-plain", "BLEU, plain, greedy")
    )
    assert facts["seeds"] == str(len(pairs))
    assert facts["seed_high_plain"] == f"{max(plain for _, plain in pairs):.1f}"
    assert int(facts["alignment_peaked"]) <= int(facts["alignment_generated"])


@pytest.mark.parametrize("page", ["bahdanau.md", "introduction.md"])
def test_the_pages_word_the_findings_from_the_build(page):
    text = (CHAPTERS / page).read_text(encoding="utf-8")
    for key in ("trend_plain", "trend_attention", "epoch_time", "seed_order", "seeds"):
        assert f"{{{{ build:bahdanau_facts.{key} }}}}" in text, key


def test_beam_search_time_is_worded_by_the_timing_rule():
    from attention_book.figures.bahdanau import beam_time_words

    slower = beam_time_words([2.0, 2.2, 2.1], [1.0, 1.1, 1.05])
    assert slower == "took 2.0 times as long as greedy decoding one sentence at a time (1.8 to 2.2)"
    overlapping = beam_time_words([1.0, 1.3, 1.2], [0.9, 1.1, 1.0])
    assert overlapping.startswith("was within noise of greedy decoding one sentence at a time")
    assert "the medians' ratio is 1.2" in overlapping
    assert beam_time_words([0.5, 0.6], [1.0, 1.1]).startswith("was faster than greedy decoding")


def test_the_decoding_page_times_the_search_beside_both_greedy_decodings():
    from attention_book.figures.bahdanau import DECODING_REPEATS, bahdanau_decoding_times

    times = bahdanau_decoding_times()
    assert set(times) == {"greedy, batched", "greedy, one at a time", "beam"}
    assert all(len(runs) == DECODING_REPEATS >= 5 for runs in times.values())
