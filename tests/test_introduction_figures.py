"""The Introduction's sentences on the experiment are worded from its numbers.

`introduction_evidence_verdicts` reads the two models' BLEU and exact matches by source length
(the Bahdanau chapter's cached run) and words what the page says about them: how weak the
model without attention is on the shortest sources, how much attention helps, and whether the
plain model declines with length. Each test feeds it numbers that call for one wording.
"""

from __future__ import annotations

from pathlib import Path

from attention_book.experiments.bahdanau import LENGTH_BUCKETS
from attention_book.figures.introduction import introduction_evidence_verdicts

PAGE = Path(__file__).resolve().parents[1] / "docs" / "chapters" / "introduction.md"
BUCKETS = len(LENGTH_BUCKETS)
PARAMETERS = {"plain": 102_681, "attention": 102_202}


def verdicts(plain: list[float], attention: list[float], exact_plain: float = 7.6) -> dict:
    """The verdicts for BLEU per bucket, the plain model's exact matches on short sources."""
    exact = {"plain": [exact_plain] * BUCKETS, "attention": [98.9] * BUCKETS}
    return introduction_evidence_verdicts(
        {"plain": plain, "attention": attention}, exact, PARAMETERS
    )


def falling(first: float, last: float) -> list[float]:
    return [first + (last - first) * i / (BUCKETS - 1) for i in range(BUCKETS)]


def test_the_built_run_reads_as_the_page_said_before():
    # The cached run of this book: 50.1 -> 24.8 BLEU without attention, 99.6 -> 95.7 with.
    facts = verdicts(falling(50.1, 24.8), falling(99.6, 95.7))
    assert facts["parameters_plain"] == "102,681" and facts["parameters_attention"] == "102,202"
    assert facts["plain_short"].startswith("And the model without attention is already weak")
    assert "a BLEU of 50.1 and translates 7.6% of them exactly right" in facts["plain_short"]
    assert (
        "at this training budget, attention helps a great deal on this corpus" in facts["verdict"]
    )
    assert "ahead by 49.5 to 70.9 BLEU points at every length" in facts["verdict"]
    assert "does not by itself show that the fixed context" in facts["verdict"]


def test_a_plain_model_right_on_most_short_sources_is_not_called_weak():
    facts = verdicts(falling(90.0, 40.0), falling(99.0, 95.0), exact_plain=80.0)
    assert "weak" not in facts["plain_short"]
    assert "the model without attention does well" in facts["plain_short"]


def test_a_small_or_partial_gap_is_not_called_a_great_deal():
    small = verdicts(falling(90.0, 80.0), falling(95.0, 85.0))
    assert "attention helps somewhat on this corpus" in small["verdict"]
    behind = falling(99.6, 95.7)
    behind[0] = 40.0
    partial = verdicts(falling(50.1, 24.8), behind)
    assert "helps on this corpus in 7 of the 8 length buckets only" in partial["verdict"]
    assert "a great deal" not in partial["verdict"]


def test_a_plain_model_that_does_not_decline_is_not_said_to():
    facts = verdicts([50.0] * BUCKETS, [99.0] * BUCKETS)
    assert "decline with length here" in facts["verdict"]
    assert "does not by itself show" not in facts["verdict"]


def test_the_page_takes_its_verdicts_from_the_build():
    text = PAGE.read_text(encoding="utf-8")
    for key in ("parameters_plain", "parameters_attention", "plain_short", "verdict"):
        assert f"{{{{ build:introduction_evidence_facts.{key} }}}}" in text, key
