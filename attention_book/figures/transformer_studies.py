"""Figures and build-time tables of the Transformer chapter's experiments beyond the standard split.

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.transformer_studies`: the length-generalization split, post-norm
against pre-norm (and post-norm with the main run's warmup), and decoding with and without the
key/value cache.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.data.text import tokenize
from attention_book.experiments.bahdanau import LENGTH_BUCKETS, bahdanau_data, token_bleu
from attention_book.experiments.spread import (
    recorded_values,
    seed_comparison,
    seed_pairs,
)
from attention_book.experiments.transformer_studies import (
    LENGTH_SPLIT_CONFIG,
    NORM_CONFIG,
    NORM_WARMUP_CONFIG,
    transformer_length_experiment,
    transformer_norm_experiment,
    transformer_norm_warmup_experiment,
)
from attention_book.experiments.transformer_timings import TIMING_CONFIG, transformer_timings
from attention_book.figures.transformer import bleu_by_length_figure, longest
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure
from attention_book.timing import apart, spread
from attention_book.training.schedules import warmup_inverse_sqrt

__all__ = [
    "FIGURES",
    "LENGTH_GROUPS",
    "transformer_kv_cache",
    "transformer_kv_cache_facts",
    "transformer_length_findings",
    "transformer_length_generalization",
    "transformer_length_kept",
    "transformer_length_samples",
    "transformer_norm_curves",
    "transformer_norm_facts",
    "transformer_studies_facts",
    "transformer_studies_verdict",
]


def _held_out() -> tuple[list[str], list[int]]:
    """References and source lengths of the length experiment's held-out pairs."""
    data = bahdanau_data()
    pairs = data.valid_pairs + data.test_pairs
    return [" ".join(tokenize(t)) for _, t in pairs], [len(tokenize(s)) for s, _ in pairs]


def transformer_length_generalization() -> Figure:
    """BLEU by source length of both attention models trained on short sources only."""
    result = transformer_length_experiment()
    translations = {"transformer": result["transformer"]["greedy"]}
    translations["attention"] = result["bahdanau"]["greedy"]
    fig = bleu_by_length_figure(translations, *_held_out(), "held-out")
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    first_unseen = next(i for i, (low, _) in enumerate(LENGTH_BUCKETS) if low > limit)
    ax = fig.axes[0]
    ax.axvspan(first_unseen - 0.5, len(LENGTH_BUCKETS) - 0.5, color="#999", alpha=0.15)
    text = f"longer than any training source (> {limit})"
    ax.text(first_unseen - 0.4, 96, text, fontsize=8, va="top")
    return fig


def _bleu_and_length(hypotheses, references, chosen) -> tuple[float, float]:
    """BLEU of the sentences ``chosen``, and their output length over the references'."""
    hypotheses, references = [hypotheses[i] for i in chosen], [references[i] for i in chosen]
    ratio = sum(len(h.split()) for h in hypotheses) / sum(len(r.split()) for r in references)
    return token_bleu(hypotheses, references), ratio


def transformer_length_kept(numbers: dict[str, float]) -> tuple[float, float]:
    """The share of BLEU kept on sources of 40 tokens or more, from a run's headline numbers.

    Args:
        numbers: `transformer_length_headline` of one training.

    Returns:
        (Transformer, Bahdanau model): BLEU on those sources over BLEU on the trained lengths.
    """
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    return tuple(  # type: ignore[return-value]
        numbers[f"BLEU, {m}, sources of >= 40 tokens"]
        / numbers[f"BLEU, {m}, sources of <= {limit} tokens"]
        for m in ("transformer", "bahdanau")
    )


def transformer_length_samples() -> str:
    """The two longest held-out sentences and both models' translations after short training."""
    result, (references, lengths) = transformer_length_experiment(), _held_out()
    pairs = bahdanau_data().valid_pairs + bahdanau_data().test_pairs
    rows = []
    for i in longest(lengths, 2):
        cells = [result[key]["greedy"][i] for key in ("bahdanau", "transformer")]
        rows.append([f"{pairs[i][0]} ({lengths[i]} tokens)", references[i], *cells])
    return markdown_table(["source", "reference", "Bahdanau attention", "Transformer"], rows)


#: The three deep stacks of the norm section: (result key, legend label, color, line style).
NORM_STACKS = (
    ("post-norm", "post-norm, no warmup", "#d62728", "-"),
    ("pre-norm", "pre-norm, no warmup", "#1f77b4", "-"),
    ("post-norm, warm-up", "post-norm, main run's warmup", "#2ca02c", "--"),
)


def _norm_losses() -> dict[str, list[float]]:
    """Every step's training loss of the three deep stacks."""
    result = transformer_norm_experiment() | transformer_norm_warmup_experiment()
    return {name: result[name]["step_loss"] for name, *_ in NORM_STACKS}


def transformer_norm_curves() -> Figure:
    """Training loss at every step of the deep stacks: post-norm and pre-norm, and warmup."""
    losses = _norm_losses()
    fig = new_figure((5.8, 3.5))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, label, color, style in NORM_STACKS:
            steps = range(1, len(losses[name]) + 1)
            mean = [
                sum(losses[name][max(0, i - 4) : i + 1]) / min(5, i + 1)
                for i in range(len(losses[name]))
            ]
            ax.plot(steps, losses[name], color=color, alpha=0.3, linewidth=0.8, linestyle=style)
            ax.plot(steps, mean, color=color, linestyle=style, label=f"{label} (mean of 5)")
        ax.set(xlabel="optimizer step", ylabel="training loss (cross-entropy)", ylim=(0, None))
        blocks, rate = NORM_CONFIG.num_blks, NORM_CONFIG.transformer.lr
        warmup = NORM_WARMUP_CONFIG.norm.transformer.warmup_steps
        title = (
            f"{blocks} + {blocks} blocks; learning rate {rate:g} from step 1, or warming up to it "
            f"over {warmup} steps"
        )
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def transformer_kv_cache() -> Figure:
    """Greedy decoding time of one sentence against output length, with and without cache.

    Each point is the median of the repeats (the two decoders timed in turns, CPU time); its
    bar spans the fastest and the slowest repeat.
    """
    each, lengths = transformer_timings()["decode_seconds_each"], TIMING_CONFIG.output_lengths
    repeats = len(each["cache"][0])
    fig = new_figure((5.6, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, style, color, label in (
            ("no cache", "s--", "#d62728", "no cache: the whole prefix at every step"),
            ("cache", "o-", "#1f77b4", "key/value cache"),
        ):
            summary = [spread([1000 * t for t in times]) for times in each[name]]
            median = [m for m, _, _ in summary]
            bars = [[m - low for m, low, _ in summary], [high - m for m, _, high in summary]]
            ax.errorbar(lengths, median, yerr=bars, fmt=style, color=color, label=label,
                        markersize=4, capsize=2)  # fmt: skip
        ax.set_xscale("log", base=2)
        ylabel = f"CPU time to decode (ms): median,\nbars the range of {repeats} runs"
        ax.set(yscale="log", xlabel="tokens generated", ylabel=ylabel)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.legend()
        fig.tight_layout()
    return fig


#: The held-out groups of the length split, by the names of their values: which source lengths
#: each holds, given the longest training source.
LENGTH_GROUPS = {
    "seen": lambda n, limit: n <= limit,
    "unseen": lambda n, limit: limit < n < 40,
    "long": lambda n, limit: n >= 40,
}


def transformer_studies_verdict(
    *,
    kept: dict[str, float],
    recorded_kept: Sequence[tuple[float, float]],
    output_ratios: dict[str, float],
    norm_losses: dict[str, list[float]],
    warmup_steps: int,
    peak: float,
    recorded_post_pre: Sequence[tuple[float, float]],
    recorded_warmup: Sequence[tuple[float, float]],
    lengths: Sequence[int],
    cache: Sequence[float],
    no_cache: Sequence[float],
    identical: bool,
) -> dict[str, str]:
    """The words of the three studies that depend on their numbers; the rest is the pages'.

    The length split: how much of its BLEU each model kept on the longest sources (naming no
    cause: the run does not isolate the position code's part), whether the order of the two
    holds in the recorded trainings of other CPU arithmetic and seeds, and which way each
    model fails there, read from its output length (shorter than the references, by more than
    5%: it stopped early or left words out; longer: it repeated or added words). The deep
    stacks: which one ends lower, the warmup's learning rate, whether warmup helped, and
    whether each comparison holds in the recorded trainings. The key/value cache: whether its
    speed-up grew with the output length, where the decoder without it was faster, and
    whether both generated the same tokens. The speed-up is the ratio of the medians; a length
    where the two ranges of repeats overlap is within noise (`attention_book.timing.apart`).

    Args:
        kept: For "transformer" and "bahdanau", BLEU on the held-out sources of 40 tokens or
            more over BLEU on the lengths seen in training.
        recorded_kept: The same, (Transformer, Bahdanau model), in each recorded training of
            the split (`transformer_length_kept`).
        output_ratios: For "transformer" and "bahdanau", generated tokens over reference
            tokens on the held-out sources of 40 tokens or more.
        norm_losses: Every step's training loss of "post-norm" and "pre-norm" (no warmup) and
            of "post-norm, warm-up", all trained for the same number of steps.
        warmup_steps: The warmup of the third stack (the main run's).
        peak: The peak learning rate (the first two stacks' constant rate).
        recorded_post_pre: The post-norm and the pre-norm stack's loss of the last 10 steps in
            each recorded seed (`seed_pairs`).
        recorded_warmup: The post-norm stack's with and without warmup, the same way.
        lengths: The numbers of tokens decoded, shortest first.
        cache: Seconds to decode each length with the cache: every repeat, a list per length.
        no_cache: The same without it (timed in turns with `cache`).
        identical: Whether both decoders generated the same tokens at every length.

    Returns:
        ``"length_kept_share"``, ``"length_kept_compared"`` and ``"length_kept_order"`` (a
        sentence) on the BLEU kept; ``"length_reading_transformer"`` and
        ``"length_reading_bahdanau"``: what each output length shows; ``"norm_starts"``,
        ``"norm_better"``, ``"norm_worse"``, ``"norm_rate"``, ``"norm_warm_change"``,
        ``"norm_warm_pre"``, ``"norm_recorded_pre"`` and ``"norm_recorded_warmup"`` on the deep
        stacks; ``"kv_trend"``, ``"kv_slower"`` (a sentence, or nothing) and ``"kv_tokens"`` on
        the cache.

    Raises:
        ValueError: If an output ratio is not positive, a recorded comparison is empty, or
            `lengths`, `cache` and `no_cache` do not have the same length of at least 2.
    """
    if any(ratio <= 0 for ratio in output_ratios.values()):
        raise ValueError(f"output_ratios must be positive, got {output_ratios}")
    if not (recorded_kept and recorded_post_pre and recorded_warmup):
        raise ValueError("recorded_kept, recorded_post_pre and recorded_warmup must not be empty")
    if not len(lengths) == len(cache) == len(no_cache) >= 2:
        raise ValueError(
            "lengths, cache and no_cache must have the same length, at least 2, got "
            f"{len(lengths)}, {len(cache)} and {len(no_cache)}"
        )
    if not all(cache) or not all(no_cache):
        raise ValueError("cache and no_cache must hold at least one timing per length")
    words = {}
    ours, theirs = kept["transformer"], kept["bahdanau"]
    words["length_kept_share"] = "at least 80%" if ours >= 0.8 else "less than 80%"
    if round(ours, 2) == round(theirs, 2):
        words["length_kept_compared"] = "about as much as"
    else:
        words["length_kept_compared"] = "more than" if ours > theirs else "less than"
    mine, others = [r[0] for r in recorded_kept], [r[1] for r in recorded_kept]
    ranges = (
        f"the Transformer kept {min(mine):.0%} to {max(mine):.0%}, the Bahdanau model "
        f"{min(others):.0%} to {max(others):.0%}"
    )
    trainings = (
        f"{len(recorded_kept)} recorded trainings of the split (other CPU arithmetic, seeds)"
    )
    if all(a > b for a, b in recorded_kept) or all(a < b for a, b in recorded_kept):
        way = "more" if recorded_kept[0][0] > recorded_kept[0][1] else "less"
        words["length_kept_order"] = (
            f"The Transformer kept {way} in every one of the {trainings}: {ranges}."
        )
    else:
        words["length_kept_order"] = (
            f"The order is not stable: across the {trainings}, {ranges}, and each model came "
            "out ahead in some. One training cannot rank the two on these sentences."
        )
    readings = {
        "shorter": "shorter than the references: it stopped early or left words out",
        "longer": "longer than the references: it repeated or added words",
        "even": "about as long as the references, which by itself shows neither",
    }
    for key, ratio in output_ratios.items():
        way = "shorter" if ratio < 0.95 else "longer" if ratio > 1.05 else "even"
        words[f"length_reading_{key}"] = readings[way]

    num_steps = len(norm_losses["post-norm"])
    mean = {name: sum(curve[-10:]) / 10 for name, curve in norm_losses.items()}
    post, pre, warm = mean["post-norm"], mean["pre-norm"], mean["post-norm, warm-up"]
    words["norm_better"], words["norm_worse"] = sorted(("post-norm", "pre-norm"), key=mean.get)
    first_post, first_warm = norm_losses["post-norm"][0], norm_losses["post-norm, warm-up"][0]
    if first_post == first_warm:
        words["norm_starts"] = "(both post-norm stacks: the same weights, the same first batch)"
    else:
        words["norm_starts"] = f"(post-norm), {first_warm:.2f} (post-norm with warmup)"
    last_rate = peak * warmup_inverse_sqrt(num_steps - 1, warmup_steps)
    if num_steps < warmup_steps:
        words["norm_rate"] = (
            f"rose from {peak * warmup_inverse_sqrt(0, warmup_steps):.2g} to {last_rate:.2g} "
            f"over these {num_steps} steps, below the peak of {peak:g} that the schedule "
            f"reaches at step {warmup_steps}"
        )
    else:
        words["norm_rate"] = (
            f"reached the peak of {peak:g} at step {warmup_steps} and had decayed to "
            f"{last_rate:.2g} by step {num_steps}"
        )
    words["norm_warm_change"] = "lower" if warm < post else "higher"
    words["norm_warm_pre"] = " and below" if warm < pre else ", and not below"
    recorded = {"norm_recorded_pre": recorded_post_pre, "norm_recorded_warmup": recorded_warmup}
    for key, pairs in recorded.items():  # the book's rule for words over seeds
        way, rule = seed_comparison(pairs)
        below = sum(a < b for a, b in pairs)
        count = f"below in {below} of the {len(pairs)}"
        if way == 0:
            words[key] = f"{rule} ({count})"
        elif rule == "in every seed":
            words[key] = f"{'above' if way > 0 else 'below'} in every seed"
        else:
            words[key] = f"{'above' if way > 0 else 'below'} {rule} ({count})"

    ratios = [
        statistics.median(slow) / statistics.median(fast)
        for slow, fast in zip(no_cache, cache, strict=True)
    ]
    shown = [round(ratio, 1) for ratio in ratios]  # as the page prints them
    if all(later > earlier for earlier, later in itertools.pairwise(shown)):
        words["kv_trend"] = "grew with every doubling of the output length"
    elif ratios[-1] > ratios[0]:
        words["kv_trend"] = "grew with the output length overall, not at every step"
    else:
        words["kv_trend"] = "did not grow with the output length"
    order = {n: apart(c, nc) for n, c, nc in zip(lengths, cache, no_cache, strict=True)}
    slower = [str(n) for n, way in order.items() if way == 1]
    level = [str(n) for n, way in order.items() if way == 0]
    sentences = []
    if slower:
        sentences.append(
            f"At {' and '.join(slower)} tokens the decoder without the cache was the faster "
            "one, in every repeat."
        )
    if level:
        sentences.append(
            f"At {' and '.join(level)} tokens the two are within noise: their ranges of "
            "repeats overlap."
        )
    words["kv_slower"] = " ".join(sentences)
    words["kv_tokens"] = "the same" if identical else "different"
    return words


def transformer_studies_facts() -> dict[str, str]:
    """The numbers the three studies' sentences cite, and `transformer_studies_verdict`'s words.

    Read from the stored runs: the length split (its held-out groups of source lengths), the
    three deep stacks, the decoding timings, and the recorded trainings of the first two.

    Returns:
        Values and words by name, each name starting with its study's: ``length_``,
        ``norm_`` or ``kv_``.
    """
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    result = transformer_length_experiment()
    references, lengths = _held_out()
    num_train = len(bahdanau_data().train_pairs)
    facts = {
        "length_train_pairs": f"{result['num_train_pairs']:,}",
        "length_all_pairs": f"{num_train:,}",
        "length_kept_pairs": f"{result['num_train_pairs'] / num_train:.0%}",
        "length_limit": str(limit),
        "length_above_limit": str(limit + 1),
        "length_held_out": f"{len(references):,}",
        "length_epochs_transformer": str(result["num_epochs"]["transformer"]),
        "length_epochs_bahdanau": str(result["num_epochs"]["bahdanau"]),
    }
    bleu: dict[str, dict[str, float]] = {"transformer": {}, "bahdanau": {}}
    ratio: dict[str, dict[str, float]] = {"transformer": {}, "bahdanau": {}}
    for group, member in LENGTH_GROUPS.items():
        chosen = [i for i, n in enumerate(lengths) if member(n, limit)]
        facts[f"length_sentences_{group}"] = str(len(chosen))
        for key in ("transformer", "bahdanau"):
            bleu[key][group], ratio[key][group] = _bleu_and_length(
                result[key]["greedy"], references, chosen
            )
            facts[f"length_bleu_{key}_{group}"] = f"{bleu[key][group]:.1f}"
            facts[f"length_output_{key}_{group}"] = f"{ratio[key][group]:.0%}"
    kept = {key: bleu[key]["long"] / bleu[key]["seen"] for key in bleu}
    facts["length_kept_transformer"] = f"{kept['transformer']:.0%}"
    facts["length_kept_bahdanau"] = f"{kept['bahdanau']:.0%}"
    recorded_kept = [
        transformer_length_kept(numbers)
        for numbers in recorded_values("transformer-length").values()
        if all(
            f"BLEU, {m}, sources of >= 40 tokens" in numbers for m in ("transformer", "bahdanau")
        )
    ]

    norm_losses = _norm_losses()
    config = NORM_WARMUP_CONFIG.norm.transformer
    loss = "loss of the last 10 steps, {}"
    norm = ("transformer-norm", loss.format("post-norm"))
    recorded_post_pre = seed_pairs(norm, ("transformer-norm", loss.format("pre-norm")))
    recorded_warmup = seed_pairs(
        ("transformer-norm-warmup", loss.format("post-norm, warm-up")), norm
    )

    timings = transformer_timings()
    cache, no_cache = timings["decode_seconds"]["cache"], timings["decode_seconds"]["no cache"]
    each = timings["decode_seconds_each"]
    output_lengths = TIMING_CONFIG.output_lengths

    words = transformer_studies_verdict(
        kept=kept,
        recorded_kept=recorded_kept,
        output_ratios={key: ratio[key]["long"] for key in ratio},
        norm_losses=norm_losses,
        warmup_steps=config.warmup_steps,
        peak=config.lr,
        recorded_post_pre=recorded_post_pre,
        recorded_warmup=recorded_warmup,
        lengths=output_lengths,
        cache=each["cache"],
        no_cache=each["no cache"],
        identical=timings["identical"],
    )

    mean = {name: sum(curve[-10:]) / 10 for name, curve in norm_losses.items()}
    better, worse = mean[words["norm_better"]], mean[words["norm_worse"]]
    post = [a for a, _ in recorded_post_pre]  # post-norm's loss in each seed
    pre = [b for _, b in recorded_post_pre]
    facts |= {
        "norm_first_post": f"{norm_losses['post-norm'][0]:.2f}",
        "norm_first_pre": f"{norm_losses['pre-norm'][0]:.2f}",
        "norm_steps": str(len(norm_losses["post-norm"])),
        "norm_better_loss": f"{better:.2f}",
        "norm_worse_loss": f"{worse:.2f}",
        "norm_ratio": f"{worse / better:.1f}",
        "norm_warm": f"{mean['post-norm, warm-up']:.2f}",
        "norm_warm_gap": f"{abs(mean['post-norm'] - mean['post-norm, warm-up']):.2f}",
        "norm_pre": f"{mean['pre-norm']:.2f}",
        "norm_seeds": str(len(recorded_post_pre)),
        "norm_seed_post": f"{min(post):.2f} to {max(post):.2f}",
        "norm_seed_pre": f"{min(pre):.2f} to {max(pre):.2f}",
        "norm_spread_ratio": f"{(max(post) - min(post)) / max(max(pre) - min(pre), 1e-9):.0f}",
    }

    ratios = [slow / fast for slow, fast in zip(no_cache, cache, strict=True)]
    first, last = output_lengths[0], output_lengths[-1]
    per_token = {
        name: [1000 * t / n for t, n in zip(times, output_lengths, strict=True)]
        for name, times in (("cache", cache), ("no_cache", no_cache))
    }
    facts |= {
        "kv_first": str(first),
        "kv_last": str(last),
        "kv_cache_ms": f"{1000 * cache[-1]:.0f}",
        "kv_no_cache_ms": f"{1000 * no_cache[-1]:.0f}",
        "kv_cache_range": _milliseconds_range(each["cache"][-1]),
        "kv_no_cache_range": _milliseconds_range(each["no cache"][-1]),
        "kv_repeats": str(len(each["cache"][-1])),
        "kv_ratio_first": f"{ratios[0]:.1f}",
        "kv_ratio_last": f"{ratios[-1]:.1f}",
        "kv_ratios": ", ".join(
            f"{r:.1f} at {n}{' tokens' if k == 0 else ''}"
            for k, (n, r) in enumerate(zip(output_lengths, ratios, strict=True))
        ),
        "kv_length_ratio": f"{last / first:.0f}",
    }
    for name, values in per_token.items():
        facts[f"kv_{name}_token_first"] = f"{values[0]:.1f}"
        facts[f"kv_{name}_token_last"] = f"{values[-1]:.1f}"
        facts[f"kv_{name}_token_growth"] = f"{values[-1] / values[0]:.1f}"
    return facts | words


def _milliseconds_range(seconds: Sequence[float]) -> str:
    """The fastest and the slowest of repeated timings, in milliseconds: "12 to 15"."""
    _, low, high = spread(seconds)
    return f"{1000 * low:.0f} to {1000 * high:.0f}"


def _study(prefix: str) -> dict[str, str]:
    """The values and words of `transformer_studies_facts` of one study, without its prefix."""
    facts = transformer_studies_facts()
    return {key[len(prefix) :]: value for key, value in facts.items() if key.startswith(prefix)}


def transformer_length_findings() -> dict[str, str]:
    """The length split's numbers, and the words on them, for the deep dive's findings."""
    return _study("length_")


def transformer_norm_facts() -> dict[str, str]:
    """The three deep stacks' numbers, and the words on them, for the norms deep dive."""
    return _study("norm_")


def transformer_kv_cache_facts() -> dict[str, str]:
    """The decoding timings with and without the cache, and the words on them."""
    return _study("kv_")


FIGURES = (
    transformer_length_generalization,
    transformer_length_findings,
    transformer_length_samples,
    transformer_norm_curves,
    transformer_norm_facts,
    transformer_kv_cache,
    transformer_kv_cache_facts,
)
