"""The Transformer chapter's reading of its runs stays true to the numbers it reads.

The chapter is a core page (transformer.md) and deep dives (transformer-decoding.md,
transformer-length.md and others). Where a sentence of theirs reads a number of the build, the
build words it (`attention_book.figures.transformer` and `.transformer_studies`); these tests
check each wording on made-up numbers, that the pages use it where they state it, and, on the
stored runs where the store holds them, what the prose and the alt texts still say in words:

- the schedule's sentence gives the run's steps and warmup from the configuration and the data;
- the findings say which model is above the other, how each was tuned, whether both are near
  the top of the scale, and the sentence under the label smoothing table whether its
  difference holds across the recorded trainings or is within their noise;
- the caveat on copying numbers counts the test translations that carry exactly the numbers
  of their reference;
- the figure of BLEU by length says that the model without attention is far below the two
  others in every bucket;
- the cache's timings say whether the speed-up grew with the output length, at every length,
  overall or not at all, and where the decoder without the cache was faster;
- the length split says how much of its BLEU each model kept on the longest sources, whether the
  order holds in the recorded trainings, and which way each model fails there;
- the deep stacks say which one ends lower, what the warmup did, and whether each comparison
  holds in the recorded trainings.

The core page's words that depend on numbers come from `transformer_verdict`, the deep dives'
from `transformer_studies_verdict`; `core_verdict` and `verdict` below give them numbers like the
build's, with those a test names in their place.
"""

from __future__ import annotations

from typing import Any

import pytest
from repo import ROOT

from attention_book.experiments.bahdanau import MODELS, bahdanau_cache_key
from attention_book.experiments.transformer import transformer_cache_key, transformer_run_name
from attention_book.experiments.transformer_studies import LENGTH_SPLIT_CONFIG
from attention_book.figures.transformer import copy_counts, digit_tokens, transformer_verdict
from attention_book.figures.transformer_studies import transformer_studies_verdict
from attention_book.store import is_cached

CHAPTERS = ROOT / "docs" / "chapters"
CORE, DECODING, LENGTH = "transformer.md", "transformer-decoding.md", "transformer-length.md"
TRAINING = "transformer-training.md"

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
    text = chapter_text(LENGTH)  # the deep dive on length shows the table
    assert words[NUM_SAMPLES] in text
    assert "{{ build:transformer_samples_table }}" in text


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


def core_verdict(**numbers: Any) -> dict[str, str]:
    """`transformer_verdict` of numbers like the build's, with `numbers` in their place."""
    given = {
        "bleu": {"transformer": 98.35, "attention": 96.73},
        "other_bleu": 97.47,
        "smoothing_change": 0.8,
        "smoothing_recorded": [0.5, 0.8, 1.2],
        "chosen": "0.1",
    }
    return transformer_verdict(**{**given, **numbers})


def test_the_findings_say_which_model_is_above():
    words = core_verdict()
    assert (words["bleu_side"], words["other_side"]) == ("above", "above")
    below = core_verdict(bleu={"transformer": 90.0, "attention": 96.73}, other_bleu=96.0)
    assert (below["bleu_side"], below["other_side"]) == ("below", "below")


def test_the_ceiling_says_how_near_the_top_both_models_are():
    # Near the top by the rounded scores the reader sees: 89.96 reads 90.0.
    near = core_verdict(bleu={"transformer": 98.354, "attention": 89.96})["ceiling"]
    assert near.startswith("Both sit near the ceiling")
    assert "[Sentences longer than any seen in training](transformer-length.md)" in near
    assert "next section" not in near
    assert core_verdict(bleu={"transformer": 70.0, "attention": 96.73})["ceiling"] == ""


def test_the_smoothing_verdict_calls_a_difference_noise_when_the_recorded_spread_crosses_zero():
    noise = core_verdict(smoothing_change=-1.3, smoothing_recorded=[0.9, -0.2, -1.3, 0.4, 0.1])
    assert noise["smoothing_side"] == "below"
    assert noise["smoothing_recorded"].startswith("That is within the noise: across the 5")
    assert "from -1.3 to +0.9 points" in noise["smoothing_recorded"]
    assert "improves" not in noise["smoothing_recorded"]
    above = core_verdict()
    assert above["smoothing_side"] == "above"
    assert above["smoothing_recorded"].startswith("Across the 3 recorded trainings")
    assert above["smoothing_recorded"].endswith("ε = 0.1 is above in every one.")
    below = core_verdict(smoothing_change=-0.8, smoothing_recorded=[-0.5, -0.8, -1.2])
    assert below["smoothing_recorded"].endswith("ε = 0.1 is below in every one.")
    with pytest.raises(ValueError, match="smoothing_recorded"):
        core_verdict(smoothing_recorded=[])


def test_the_core_page_words_its_findings_from_the_build():
    text = chapter_text(CORE)
    for key in ("bleu_side", "other_side", "ceiling"):
        assert f"{{{{ build:transformer_facts.{key} }}}}" in text, key
    # The comparison of the two label smoothings, with its table, is in the training deep dive.
    training = chapter_text(TRAINING)
    for key in ("smoothing_side", "smoothing_recorded"):
        assert f"{{{{ build:transformer_facts.{key} }}}}" in training, key
    assert "{{ build:transformer_label_smoothing_table }}" in training
    assert (
        "The two were not tuned alike." in text and "Each model was trained from one seed." in text
    )


@needs_stored_runs
def test_the_tuning_facts_are_the_configurations():
    from attention_book.experiments.bahdanau import BAHDANAU_CONFIG
    from attention_book.experiments.transformer import TRANSFORMER_CONFIG
    from attention_book.figures.transformer import transformer_facts

    facts = transformer_facts()
    assert (facts["trained_times"], facts["smoothings_tried"]) == ("twice", "0.0 and 0.1")
    assert facts["warmup_steps"] == str(TRANSFORMER_CONFIG.warmup_steps)
    assert facts["lr"] == f"{TRANSFORMER_CONFIG.lr:g}" and facts["beta2"] == "0.98"
    assert facts["bahdanau_beta2"] == "0.999"
    assert facts["bahdanau_lr"] == f"{BAHDANAU_CONFIG.lr:g}"
    assert facts["bahdanau_epochs"] == str(BAHDANAU_CONFIG.num_epochs)
    # Below 100 by the rounded scores the reader sees.
    assert facts["below_top_transformer"] == f"{100 - float(facts['bleu_transformer']):.1f}"


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
# The deep dives' verdict


def _norm_losses(post: float, pre: float, warm: float, steps: int = 50) -> dict:
    """Loss curves (synthetic test data): 6.0 at the first step, then a plateau."""
    curves = {"post-norm": post, "pre-norm": pre, "post-norm, warm-up": warm}
    return {name: [6.0] + [value] * (steps - 1) for name, value in curves.items()}


def repeats(*medians: float, width: float = 0.1) -> list[list[float]]:
    """Three timed repeats per length around each median, `width` apart relatively."""
    return [[m * (1 - width), m, m * (1 + width)] for m in medians]


def verdict(**numbers: Any) -> dict[str, str]:
    """`transformer_studies_verdict` of numbers like the build's, with `numbers` in their place."""
    given = {
        "kept": {"transformer": 0.5, "bahdanau": 0.62},
        "recorded_kept": [(0.5, 0.62), (0.45, 0.65)],
        "output_ratios": {"transformer": 1.13, "bahdanau": 1.09},
        "norm_losses": _norm_losses(post=2.2, pre=1.9, warm=3.0),
        "warmup_steps": 100,
        "peak": 0.01,
        "recorded_post_pre": [(2.2, 1.9), (3.1, 1.8)],
        "recorded_warmup": [(3.0, 2.2), (3.1, 2.0)],
        "lengths": (8, 16, 32),
        "cache": repeats(0.01, 0.02, 0.04),
        "no_cache": repeats(0.015, 0.04, 0.12),
        "identical": True,
    }
    return transformer_studies_verdict(**{**given, **numbers})


# ---------------------------------------------------------------------------------------------
# Decoding with a key/value cache


def test_the_cache_verdict_reads_the_trend_of_the_speed_up():
    grows = verdict()
    assert grows["kv_trend"] == "grew with every doubling of the output length"
    assert grows["kv_slower"] == ""
    assert grows["kv_tokens"] == "the same"
    dips = verdict(cache=repeats(0.01, 0.05, 0.04), identical=False)
    assert dips["kv_trend"] == "grew with the output length overall, not at every step"
    assert dips["kv_slower"] == (
        "At 16 tokens the decoder without the cache was the faster one, in every repeat."
    )
    assert dips["kv_tokens"] == "different"
    level = verdict(no_cache=repeats(0.015, 0.03, 0.12))  # 1.5, 1.5, 3: one step does not grow
    assert level["kv_trend"] == "grew with the output length overall, not at every step"
    flat = verdict(no_cache=repeats(0.02, 0.03, 0.04))
    assert flat["kv_trend"] == "did not grow with the output length"
    with pytest.raises(ValueError, match="must have the same length, at least 2, got 3, 2 and 3"):
        verdict(cache=repeats(0.01, 0.02), no_cache=repeats(0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="at least one timing per length"):
        verdict(cache=[[0.01], [], [0.04]])


def test_overlapping_repeats_are_within_noise_whatever_the_medians_say():
    # At 8 tokens the medians say the cache is faster (0.010 against 0.012), but the
    # repeats overlap; at 32 the medians say slower (0.05 against 0.04), and they overlap too.
    noisy = verdict(
        cache=[[0.008, 0.010, 0.014], [0.02, 0.02, 0.02], [0.03, 0.05, 0.06]],
        no_cache=[[0.009, 0.012, 0.013], [0.04, 0.04, 0.04], [0.035, 0.04, 0.045]],
    )
    assert noisy["kv_slower"] == (
        "At 8 and 32 tokens the two are within noise: their ranges of repeats overlap."
    )
    both = verdict(
        cache=[[0.02, 0.021], [0.01, 0.03], [0.01, 0.01]],
        no_cache=[[0.01, 0.011], [0.02, 0.02], [0.05, 0.05]],
    )
    assert both["kv_slower"] == (
        "At 8 tokens the decoder without the cache was the faster one, in every repeat. At 16 "
        "tokens the two are within noise: their ranges of repeats overlap."
    )


def test_the_cache_sentence_gives_the_builds_timings():
    from attention_book.experiments.transformer_timings import TIMING_CONFIG, transformer_timings
    from attention_book.figures.transformer_studies import transformer_kv_cache_facts

    facts = transformer_kv_cache_facts()
    seconds = transformer_timings()["decode_seconds"]
    assert facts["cache_ms"] == f"{1000 * seconds['cache'][-1]:.0f}"
    assert facts["no_cache_ms"] == f"{1000 * seconds['no cache'][-1]:.0f}"
    each = transformer_timings()["decode_seconds_each"]
    assert facts["repeats"] == str(TIMING_CONFIG.repeats) == str(len(each["cache"][-1]))
    low, high = min(each["cache"][-1]), max(each["cache"][-1])
    assert facts["cache_range"] == f"{1000 * low:.0f} to {1000 * high:.0f}"
    assert facts["ratios"].startswith(f"{seconds['no cache'][0] / seconds['cache'][0]:.1f} at ")
    assert facts["last"] == str(TIMING_CONFIG.output_lengths[-1])


def test_the_decoding_page_reads_the_timings_through_the_build():
    text = chapter_text(DECODING)
    for key in ("trend", "slower", "tokens", "ratios"):
        assert f"{{{{ build:transformer_kv_cache_facts.{key} }}}}" in text, key
    alt = text[text.index("![Decoding time") : text.index("(../figures/transformer_kv_cache.svg)")]
    for word in ("steeply", "widens", "grows", "faster"):
        assert word not in alt, word


# ---------------------------------------------------------------------------------------------
# Sentences longer than any seen in training


def test_the_output_reading_says_which_way_each_model_fails():
    short_long = verdict(output_ratios={"transformer": 0.65, "bahdanau": 1.13})
    assert short_long["length_reading_transformer"] == (
        "shorter than the references: it stopped early or left words out"
    )
    assert short_long["length_reading_bahdanau"] == (
        "longer than the references: it repeated or added words"
    )
    even = verdict(output_ratios={"transformer": 0.97, "bahdanau": 1.04})
    for key in ("transformer", "bahdanau"):
        assert even[f"length_reading_{key}"] == (
            "about as long as the references, which by itself shows neither"
        )
    with pytest.raises(ValueError, match="output_ratios must be positive"):
        verdict(output_ratios={"transformer": 0.0, "bahdanau": 1.0})


def test_the_length_verdict_says_what_was_kept_and_claims_no_cause():
    lost = verdict(kept={"transformer": 45 / 90, "bahdanau": 50 / 80})
    assert lost["length_kept_share"] == "less than 80%"
    assert lost["length_kept_compared"] == "less than"
    kept = verdict(kept={"transformer": 81 / 90, "bahdanau": 40 / 80})
    assert (kept["length_kept_share"], kept["length_kept_compared"]) == (
        "at least 80%",
        "more than",
    )
    same = verdict(kept={"transformer": 45 / 90, "bahdanau": 40 / 80})
    assert same["length_kept_compared"] == "about as much as"
    for words in (lost, kept, same):
        text = " ".join(words.values())
        assert "extrapolate" not in text and "position code" not in text
    steady = verdict(recorded_kept=[(0.9, 0.5), (0.8, 0.6), (0.85, 0.55)])["length_kept_order"]
    assert "The Transformer kept more in every one of the 3 recorded trainings" in steady
    assert "the Transformer kept 80% to 90%, the Bahdanau model 50% to 60%" in steady
    flips = verdict(recorded_kept=[(0.9, 0.5), (0.6, 0.7)])["length_kept_order"]
    assert "The order is not stable" in flips and "cannot rank the two" in flips
    assert "every one" not in flips
    with pytest.raises(ValueError, match="must not be empty"):
        verdict(recorded_kept=[])


def test_the_length_page_reads_the_split_through_the_build():
    text = chapter_text(LENGTH)
    for key in ("kept_share", "kept_compared", "kept_order", "reading_transformer"):
        assert f"{{{{ build:transformer_length_findings.{key} }}}}" in text, key
    assert "These runs measure how much each kept; they do not show why." in text
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    assert f"only on the training pairs whose source has at most {limit} tokens" in text
    assert f"trained on sources of at most {limit} tokens" in text  # the figure's alt text


def test_the_length_facts_count_the_split():
    from attention_book.figures.transformer_studies import transformer_length_findings

    facts = transformer_length_findings()
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    assert (facts["limit"], facts["above_limit"]) == (str(limit), str(limit + 1))
    seen, unseen, long = (int(facts[f"sentences_{g}"]) for g in ("seen", "unseen", "long"))
    assert seen + unseen + long == int(facts["held_out"].replace(",", ""))


# ---------------------------------------------------------------------------------------------
# Post-norm and pre-norm


def test_the_norm_verdict_follows_the_three_stacks_numbers():
    slow = verdict()
    assert (slow["norm_better"], slow["norm_worse"]) == ("pre-norm", "post-norm")
    assert slow["norm_rate"] == (
        "rose from 0.0001 to 0.005 over these 50 steps, below the peak of 0.01 that the "
        "schedule reaches at step 100"
    )
    assert (slow["norm_warm_change"], slow["norm_warm_pre"]) == ("higher", ", and not below")
    assert slow["norm_starts"] == "(both post-norm stacks: the same weights, the same first batch)"
    helped = verdict(norm_losses=_norm_losses(post=2.2, pre=1.9, warm=2.0))
    assert (helped["norm_warm_change"], helped["norm_warm_pre"]) == ("lower", ", and not below")
    best = verdict(norm_losses=_norm_losses(post=2.2, pre=1.9, warm=1.5))
    assert (best["norm_warm_change"], best["norm_warm_pre"]) == ("lower", " and below")
    past = verdict(norm_losses=_norm_losses(post=1.9, pre=2.2, warm=2.0), warmup_steps=10)
    assert (past["norm_better"], past["norm_worse"]) == ("post-norm", "pre-norm")
    assert (
        past["norm_rate"]
        == "reached the peak of 0.01 at step 10 and had decayed to 0.0045 by step 50"
    )
    apart = _norm_losses(post=2.2, pre=1.9, warm=3.0)
    apart["post-norm, warm-up"][0] = 5.0
    assert verdict(norm_losses=apart)["norm_starts"] == "(post-norm), 5.00 (post-norm with warmup)"


def test_the_norm_verdict_says_whether_each_comparison_holds_in_every_recorded_training():
    words = verdict()
    assert words["norm_recorded_pre"] == "above in every seed"
    assert words["norm_recorded_warmup"] == "above in every seed"
    mixed = verdict(recorded_warmup=[(3.0, 2.2), (2.0, 3.1)])
    assert mixed["norm_recorded_warmup"] == (
        "the seeds cannot tell them apart (below in 1 of the 2)"
    )
    mostly = [(3.0, 2.0), (3.1, 2.0), (3.2, 2.0), (1.9, 2.0), (3.0, 2.0)]
    assert verdict(recorded_post_pre=mostly)["norm_recorded_pre"] == (
        "above on average, not in every seed (below in 1 of the 5)"
    )
    with pytest.raises(ValueError, match="must not be empty"):
        verdict(recorded_post_pre=[])


def test_the_norm_page_reads_the_stacks_through_the_build():
    from attention_book.figures.transformer_studies import transformer_norm_facts

    text = chapter_text("transformer-norms.md")
    for key in ("better", "rate", "warm_change", "warm_pre", "recorded_pre", "recorded_warmup",
                "seeds", "seed_post", "seed_pre", "spread_ratio"):  # fmt: skip
        assert f"{{{{ build:transformer_norm_facts.{key} }}}}" in text, key
    assert "Post-norm's losses over the seeds ranged from" in text  # its spread, read
    facts = transformer_norm_facts()
    assert float(facts["better_loss"]) <= float(facts["worse_loss"])
