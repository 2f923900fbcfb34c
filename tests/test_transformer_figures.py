"""The Transformer chapter's reading of its runs stays true to the numbers it reads.

The chapter is a core page (transformer.md) and deep dives (transformer-decoding.md,
transformer-length.md and others). Where a sentence of theirs reads a number of the build, the
build words it (`attention_book.figures.transformer` and `.transformer_studies`); these tests
check each wording on made-up numbers, that the pages use it where they state it, and, on the
stored runs where the store holds them, what the prose and the alt texts still say in words:

- the schedule's sentence gives the run's steps and warmup from the configuration and the data;
- the caveat on copying numbers counts the test translations that carry exactly the numbers
  of their reference;
- the figure of BLEU by length says that the model without attention is far below the two
  others in every bucket;
- the cache's timings say whether the speed-up grew with the output length, at every length,
  overall or not at all, and where the decoder without the cache was faster;
- the length split's output lengths say which way each model fails on the longest sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attention_book.experiments.bahdanau import MODELS, bahdanau_cache_key
from attention_book.experiments.transformer import transformer_cache_key, transformer_run_name
from attention_book.experiments.transformer_studies import LENGTH_SPLIT_CONFIG
from attention_book.figures.transformer import copy_counts, digit_tokens, transformer_ceiling
from attention_book.figures.transformer_studies import (
    transformer_kv_cache_verdict,
    transformer_length_output_reading,
)
from attention_book.store import is_cached

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "docs" / "chapters"
CORE, DECODING, LENGTH = "transformer.md", "transformer-decoding.md", "transformer-length.md"

#: "Far below": in every length bucket, the model without attention is at least this many BLEU
#: points below each attention model.
FAR_BELOW = 30.0

needs_stored_runs = pytest.mark.skipif(
    not (
        all(is_cached(transformer_run_name(eps), transformer_cache_key()) for eps in (0.0, 0.1))
        and all(is_cached(f"bahdanau-{m}", bahdanau_cache_key()) for m in MODELS)
    ),
    reason="the Transformer and Bahdanau runs are not in the result store yet (make site)",
)


def chapter_text(page: str) -> str:
    """The Markdown of one page of the chapter, whitespace collapsed."""
    return " ".join((CHAPTERS / page).read_text(encoding="utf-8").split())


# ---------------------------------------------------------------------------------------------
# The core page


def test_the_schedule_sentence_is_the_builds():
    text = chapter_text(CORE)
    for key in ("steps", "epochs", "batches", "warmup"):
        assert f"{{{{ build:transformer_schedule_facts.{key} }}}}" in text, key
    assert "against the paper's 100,000" in text


def test_the_schedule_facts_count_the_runs_steps():
    from attention_book.experiments.bahdanau import bahdanau_data
    from attention_book.experiments.transformer import TRANSFORMER_CONFIG
    from attention_book.figures.transformer import transformer_schedule_facts

    facts = transformer_schedule_facts()
    batches = len(bahdanau_data().train_loader)
    assert facts["batches"] == str(batches)
    assert facts["steps"] == f"{TRANSFORMER_CONFIG.num_epochs * batches:,}"
    assert facts["warmup"] == str(TRANSFORMER_CONFIG.warmup_steps)
    # "warms up over ... of them": the warmup ends inside the run.
    assert TRANSFORMER_CONFIG.warmup_steps < TRANSFORMER_CONFIG.num_epochs * batches


def test_the_samples_sentence_counts_what_the_table_shows():
    from attention_book.figures.transformer import NUM_SAMPLES

    words = {1: "The longest test sentence", 2: "The two longest test sentences"}
    assert words[NUM_SAMPLES] in chapter_text(CORE)


def test_the_sizes_the_core_page_types_are_the_configurations():
    from attention_book.experiments.transformer import TRANSFORMER_CONFIG

    config = TRANSFORMER_CONFIG

    text = chapter_text(CORE)
    ratio = config.ffn_num_hiddens // config.num_hiddens
    head_dim = config.num_hiddens // config.num_heads
    assert (
        f"width {config.num_hiddens}, an FFN {['', '', 'two', 'three', 'four'][ratio]} times"
        in text
    )
    assert f"{config.num_heads} heads of {head_dim} features, {config.num_blks} blocks" in text
    assert f"has {['', 'one', 'two', 'three'][config.num_blks]} blocks of width" in text
    assert config.dropout == 0.0 and "no dropout" in text


def test_digit_tokens_and_copy_counts_on_made_up_sentences():
    assert digit_tokens("le 7 août 2021 à 10:30 , 42 livres") == ["10:30", "2021", "42", "7"]
    references = ["il a 42 ans", "bonjour", "le 7 mai 2021"]
    translations = {
        "a": ["il a 42 ans", "salut", "le 2021 mai 7"],  # the numbers, in another order
        "b": ["il a 24 ans", "bonjour 3", "le 7 mai"],  # one changed, one missing
    }
    assert copy_counts(translations, references) == {"references": 2, "a": 2, "b": 0}
    with pytest.raises(ValueError, match=r"translations\['a'\] must have one sentence per"):
        copy_counts({"a": ["x"]}, references)


def test_the_copying_caveat_counts_from_the_build():
    text = chapter_text(CORE)
    assert "rewards exact copying of numbers and dates: of the" in text
    for key in ("references", "transformer", "attention", "plain"):
        assert f"{{{{ build:transformer_copy_facts.{key} }}}}" in text, key


def test_the_ceiling_sends_the_reader_to_the_length_deep_dive():
    near = transformer_ceiling({"transformer": 98.4, "attention": 97.9}, {"transformer": 1,
                               "attention": 1}, 2)  # fmt: skip
    assert "[Sentences longer than any seen in training](transformer-length.md)" in near
    assert "next section" not in near


def plain_far_below(scores: dict[str, list[float]]) -> bool:
    """Whether the model without attention is `FAR_BELOW` under both others in every bucket."""
    return all(
        min(ours, theirs) - plain >= FAR_BELOW
        for ours, theirs, plain in zip(
            scores["transformer"], scores["attention"], scores["plain"], strict=True
        )
    )


def test_far_below_can_fail():
    far = {"transformer": [99.0, 95.0], "attention": [99.0, 90.0], "plain": [50.0, 20.0]}
    assert plain_far_below(far)
    assert not plain_far_below(far | {"plain": [50.0, 70.0]})


@needs_stored_runs
def test_the_model_without_attention_is_far_below_in_every_bucket_as_the_alt_text_says():
    from attention_book.experiments.bahdanau import (
        bahdanau_bleu_by_bucket,
        bahdanau_test_references,
    )
    from attention_book.figures.transformer import greedy_test_translations

    assert "The model without attention is far below the two others in every bucket" in (
        chapter_text(CORE)
    )
    references, lengths = bahdanau_test_references()
    scores = {
        name: bahdanau_bleu_by_bucket(hypotheses, references, lengths)[0]
        for name, hypotheses in greedy_test_translations().items()
    }
    assert plain_far_below(scores), scores


# ---------------------------------------------------------------------------------------------
# Decoding with a key/value cache


def test_the_cache_verdict_reads_the_trend_of_the_speed_up():
    lengths = (8, 16, 32)
    grows = transformer_kv_cache_verdict(lengths, [0.01, 0.02, 0.04], [0.015, 0.04, 0.12], True)
    assert "took 40 ms with the cache and 120 ms without it, 3.0 times as long" in grows
    assert "for 8 tokens the ratio is 1.5" in grows
    assert "grew with every doubling of the output length (1.5 at 8 tokens, 2.0 at 16" in grows
    assert "faster one" not in grows
    assert "1.2 ms at 8 tokens and 1.2 ms at 32, 1.0 times as much for 4 times" in grows
    assert "from 1.9 ms to 3.8 ms, 2.0 times as much" in grows
    assert "generated the same tokens at every length" in grows
    dips = transformer_kv_cache_verdict(lengths, [0.01, 0.05, 0.04], [0.015, 0.04, 0.12], False)
    assert "grew with the output length overall, not at every step" in dips
    assert "At 16 tokens the decoder without the cache was the faster one." in dips
    assert "generated different tokens" in dips
    flat = transformer_kv_cache_verdict(lengths, [0.01, 0.02, 0.04], [0.02, 0.03, 0.04], True)
    assert "did not grow with the output length" in flat
    with pytest.raises(ValueError, match="must have the same length, at least 2, got 3, 2 and 3"):
        transformer_kv_cache_verdict(lengths, [0.01, 0.02], [0.1, 0.2, 0.3], True)


def test_the_decoding_page_reads_the_timings_through_the_build():
    text = chapter_text(DECODING)
    assert "{{ build:transformer_kv_cache_findings }}" in text
    alt = text[text.index("![Decoding time") : text.index("(../figures/transformer_kv_cache.svg)")]
    for word in ("steeply", "widens", "grows", "faster"):
        assert word not in alt, word


# ---------------------------------------------------------------------------------------------
# Sentences longer than any seen in training


def test_the_output_reading_says_which_way_each_model_fails():
    short_long = transformer_length_output_reading({"transformer": 0.65, "bahdanau": 1.13})
    assert "the Transformer's output is 65% of the reference length, shorter than the" in (
        short_long
    )
    assert "stopped early or left words out; the Bahdanau model's output is 113%" in short_long
    assert "longer than the references: it repeated or added words." in short_long
    even = transformer_length_output_reading({"transformer": 0.97, "bahdanau": 1.04})
    assert even.count("about as long as the references, which by itself shows neither") == 2
    with pytest.raises(ValueError, match="ratios must be positive"):
        transformer_length_output_reading({"transformer": 0.0, "bahdanau": 1.0})


def test_the_length_page_reads_the_split_through_the_build():
    text = chapter_text(LENGTH)
    assert "{{ build:transformer_length_findings }}" in text
    assert "{{ build:transformer_length_output_facts.reading }}" in text
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    assert f"only on the training pairs whose source has at most {limit} tokens" in text
    assert f"trained on sources of at most {limit} tokens" in text  # the figure's alt text
