"""The Introduction's sentences on the experiment are worded from its numbers.

`introduction_verdict` reads the two models' BLEU and exact matches by source length (the
Bahdanau chapter's cached run) and returns the words of the page that depend on them: how the
share of exactly right translations moves with length, how weak the model without attention is
on the shortest sources, how much attention helps, and whether the plain model declines with
length. Each test feeds it numbers that call for one wording.
"""

from __future__ import annotations

from repo import ROOT

from attention_book.experiments.bahdanau import LENGTH_BUCKETS
from attention_book.figures.introduction import introduction_evidence_facts, introduction_verdict

PAGE = ROOT / "docs" / "chapters" / "introduction.md"
BUCKETS = len(LENGTH_BUCKETS)


def verdicts(plain: list[float], attention: list[float], exact_plain: float = 7.6) -> dict:
    """The verdicts for BLEU per bucket, the plain model's exact matches on short sources."""
    exact = {"plain": [exact_plain] * BUCKETS, "attention": [98.9] * BUCKETS}
    return introduction_verdict({"plain": plain, "attention": attention}, exact)


def falling(first: float, last: float) -> list[float]:
    return [first + (last - first) * i / (BUCKETS - 1) for i in range(BUCKETS)]


def test_the_built_run_reads_as_the_page_said_before():
    # The cached run of this book: 50.1 -> 24.8 BLEU without attention, 99.6 -> 95.7 with.
    words = verdicts(falling(50.1, 24.8), falling(99.6, 95.7))
    assert words["plain_short"].startswith("And the model without attention is already weak")
    assert words["helps"].startswith("a great deal on this corpus")
    assert words["helps"].endswith("ahead by 49.5 to 70.9 BLEU points at every length")
    assert words["decline"].startswith("it does not by itself show that the fixed context")


def test_a_plain_model_right_on_most_short_sources_is_not_called_weak():
    words = verdicts(falling(90.0, 40.0), falling(99.0, 95.0), exact_plain=80.0)
    assert "weak" not in words["plain_short"]
    assert "the model without attention does well" in words["plain_short"]


def test_a_small_or_partial_gap_is_not_called_a_great_deal():
    small = verdicts(falling(90.0, 80.0), falling(95.0, 85.0))
    assert small["helps"].startswith("somewhat on this corpus")
    behind = falling(99.6, 95.7)
    behind[0] = 40.0
    partial = verdicts(falling(50.1, 24.8), behind)
    assert partial["helps"] == "on this corpus in 7 of the 8 length buckets only"


def test_a_plain_model_that_does_not_decline_is_not_said_to():
    words = verdicts([50.0] * BUCKETS, [99.0] * BUCKETS)
    assert words["decline"] == "the plain model does not decline with length here."


def test_the_exact_match_trend_follows_the_shares():
    exact = {"plain": falling(7.6, 0.0), "attention": falling(90.0, 92.0)}
    words = introduction_verdict({"plain": [50.0] * BUCKETS, "attention": [99.0] * BUCKETS}, exact)
    assert (words["exact_trend_plain"], words["exact_trend_attention"]) == ("falls", "rises")


def test_the_page_takes_its_verdicts_from_the_build():
    text = PAGE.read_text(encoding="utf-8")
    for key in ("parameters_plain", "parameters_attention", "plain_short", "helps", "decline"):
        assert f"{{{{ build:introduction_evidence_facts.{key} }}}}" in text, key
    facts = introduction_evidence_facts()
    assert facts["parameters_plain"].replace(",", "").isdigit()
