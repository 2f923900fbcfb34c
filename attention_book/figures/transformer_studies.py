"""Figures and build-time tables of the Transformer chapter's experiments beyond the standard split.

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.transformer_studies`: the length-generalization split, post-norm
against pre-norm (and post-norm with the main run's warmup), and decoding with and without the
key/value cache.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.data.text import tokenize
from attention_book.experiments.bahdanau import LENGTH_BUCKETS, bahdanau_data, token_bleu
from attention_book.experiments.spread import recorded_pairs, recorded_values
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
from attention_book.training.schedules import warmup_inverse_sqrt

__all__ = [
    "FIGURES",
    "transformer_kv_cache",
    "transformer_kv_cache_findings",
    "transformer_kv_cache_verdict",
    "transformer_length_findings",
    "transformer_length_generalization",
    "transformer_length_kept",
    "transformer_length_output_facts",
    "transformer_length_output_reading",
    "transformer_length_samples",
    "transformer_length_verdict",
    "transformer_norm_curves",
    "transformer_norm_findings",
    "transformer_norm_verdict",
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


def transformer_length_findings() -> str:
    """Markdown bullets with the length experiment's numbers, worded from them."""
    result = transformer_length_experiment()
    references, lengths = _held_out()
    limit = LENGTH_SPLIT_CONFIG.max_train_length
    groups = {
        f"up to {limit} tokens (lengths seen in training)": lambda n: n <= limit,
        f"{limit + 1} to 39 tokens": lambda n: limit < n < 40,
        "40 tokens or more": lambda n: n >= 40,
    }
    num_train = len(bahdanau_data().train_pairs)
    kept = result["num_train_pairs"] / num_train
    lines = [
        f"- Training kept {result['num_train_pairs']:,} of the {num_train:,} training pairs "
        f"({kept:.0%}: sources of at most {limit} tokens); {len(references):,} held-out "
        "sentences test it. To take as many optimizer steps as on the standard split, the "
        f"Transformer trained {result['num_epochs']['transformer']} epochs over them and the "
        f"Bahdanau model {result['num_epochs']['bahdanau']}."
    ]
    scores: dict[str, list[float]] = {"transformer": [], "bahdanau": []}
    for group, member in groups.items():
        chosen = [i for i, n in enumerate(lengths) if member(n)]
        cells = []
        for key, name in (("transformer", "Transformer"), ("bahdanau", "Bahdanau model")):
            bleu, ratio = _bleu_and_length(result[key]["greedy"], references, chosen)
            scores[key].append(bleu)
            cells.append(f"{name} {bleu:.1f} BLEU (output {ratio:.0%} of the reference length)")
        lines.append(f"- Sources of {group}, {len(chosen)} sentences: " + "; ".join(cells) + ".")
    recorded = [
        transformer_length_kept(numbers)
        for numbers in recorded_values("transformer-length").values()
        if all(
            f"BLEU, {m}, sources of >= 40 tokens" in numbers for m in ("transformer", "bahdanau")
        )
    ]
    lines.append(transformer_length_verdict(scores, recorded))
    return "\n".join(lines) + "\n"


def transformer_length_verdict(
    scores: dict[str, list[float]], recorded: Sequence[tuple[float, float]] = ()
) -> str:
    """A bullet: how much of its BLEU each model kept on the longest sources, from the numbers.

    It says what was measured, the BLEU kept beyond the training lengths relative to within
    them, and names no cause: the run does not isolate the position code's part. Whether the
    order of the two models holds is read from the recorded trainings of other CPU arithmetic
    and seeds, not from this one run.

    Args:
        scores: For "transformer" and "bahdanau", BLEU on the held-out sources of the lengths
            seen in training first and on the longest group (40 tokens or more) last.
        recorded: The share each model kept, (Transformer, Bahdanau model), in each recorded
            training of the split (`attention_book.experiments.spread.recorded_values`).

    Returns:
        One Markdown bullet.
    """
    kept = {key: values[-1] / values[0] for key, values in scores.items()}
    ours, theirs = kept["transformer"], kept["bahdanau"]
    share = "at least 80%" if ours >= 0.8 else "less than 80%"
    if round(ours, 2) == round(theirs, 2):
        compared = "about as much as the Bahdanau model kept"
    else:
        compared = f"{'more' if ours > theirs else 'less'} than the Bahdanau model kept"
    text = (
        f"- On sources of 40 tokens or more, the Transformer keeps {ours:.0%} of its BLEU on "
        f"the lengths it was trained on, the Bahdanau model {theirs:.0%}: the Transformer kept "
        f"{share} of it there, and {compared}."
    )
    if recorded:
        mine = [r[0] for r in recorded]
        others = [r[1] for r in recorded]
        ranges = (
            f"the Transformer kept {min(mine):.0%} to {max(mine):.0%}, the Bahdanau model "
            f"{min(others):.0%} to {max(others):.0%}"
        )
        trainings = f"{len(recorded)} recorded trainings of the split (other CPU arithmetic, seeds)"
        if all(a > b for a, b in recorded) or all(a < b for a, b in recorded):
            way = "more" if recorded[0][0] > recorded[0][1] else "less"
            text += f" The Transformer kept {way} in every one of the {trainings}: {ranges}."
        else:
            text += (
                f" The order is not stable: across the {trainings}, {ranges}, and each model "
                "came out ahead in some. One training cannot rank the two on these sentences."
            )
    return text + " These runs measure how much each kept; they do not show why."


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


def transformer_length_output_reading(ratios: dict[str, float], tolerance: float = 0.05) -> str:
    """Which way each model fails on the longest sources, read from its output length.

    A model whose output is shorter than the references (by more than `tolerance`) stopped
    early or left words out; one whose output is longer repeated or added words; in between,
    the length alone does not say.

    Args:
        ratios: For "transformer" and "bahdanau", generated tokens over reference tokens on the
            held-out sources of 40 tokens or more.
        tolerance: How far from 1 a ratio must be to count as shorter or longer.

    Returns:
        One sentence of Markdown.

    Raises:
        ValueError: If a ratio is not positive.
    """
    if any(ratio <= 0 for ratio in ratios.values()):
        raise ValueError(f"ratios must be positive, got {ratios}")
    parts = []
    for key, name in (("transformer", "the Transformer's"), ("bahdanau", "the Bahdanau model's")):
        ratio = ratios[key]
        if ratio < 1 - tolerance:
            reading = "shorter than the references: it stopped early or left words out"
        elif ratio > 1 + tolerance:
            reading = "longer than the references: it repeated or added words"
        else:
            reading = "about as long as the references, which by itself shows neither"
        parts.append(f"{name} output is {ratio:.0%} of the reference length, {reading}")
    return f"On sources of 40 tokens or more, {parts[0]}; {parts[1]}."


def transformer_length_output_facts() -> dict[str, str]:
    """The reading of the output lengths on the longest held-out sources, from the run."""
    result = transformer_length_experiment()
    references, lengths = _held_out()
    chosen = [i for i, n in enumerate(lengths) if n >= 40]
    ratios = {
        key: _bleu_and_length(result[key]["greedy"], references, chosen)[1]
        for key in ("transformer", "bahdanau")
    }
    return {"reading": transformer_length_output_reading(ratios)}


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


def transformer_norm_verdict(
    losses: dict[str, list[float]],
    warmup_steps: int,
    peak: float,
    recorded: dict[str, Sequence[tuple[float, float]]] | None = None,
) -> str:
    """What the three deep stacks show, worded from their losses.

    Args:
        losses: Every step's training loss of "post-norm" and "pre-norm" (no warmup) and of
            "post-norm, warm-up", all trained for the same number of steps.
        warmup_steps: The warmup of the third stack (the main run's).
        peak: The peak learning rate (the first two stacks' constant rate).
        recorded: Per comparison (e.g. "post-norm against pre-norm"), the two losses of the
            last 10 steps in each recorded training (`recorded_pairs`).

    Returns:
        A paragraph of Markdown.
    """
    recorded = recorded or {}
    num_steps = len(losses["post-norm"])
    mean = {name: sum(curve[-10:]) / 10 for name, curve in losses.items()}
    post, pre, warm = mean["post-norm"], mean["pre-norm"], mean["post-norm, warm-up"]
    better, worse = sorted(("post-norm", "pre-norm"), key=mean.get)
    last_rate = peak * warmup_inverse_sqrt(num_steps - 1, warmup_steps)
    first = {name: curve[0] for name, curve in losses.items()}
    if first["post-norm"] == first["post-norm, warm-up"]:
        text = (
            f"The stacks start from a loss of {first['post-norm']:.2f} (both post-norm stacks: "
            f"the same weights, the same first batch) and {first['pre-norm']:.2f} (pre-norm). "
        )
    else:
        text = (
            f"The stacks start from a loss of {first['post-norm']:.2f} (post-norm), "
            f"{first['post-norm, warm-up']:.2f} (post-norm with warmup) and "
            f"{first['pre-norm']:.2f} (pre-norm). "
        )
    text += (
        f"Over the last 10 of {num_steps} steps, without warmup, the {better} "
        f"stack averages a loss of {mean[better]:.2f} and the {worse} stack {mean[worse]:.2f}, "
        f"{mean[worse] / mean[better]:.1f} times as much. "
    )
    if num_steps < warmup_steps:
        text += (
            f"With the main run's warmup, the post-norm stack's learning rate rose from "
            f"{peak * warmup_inverse_sqrt(0, warmup_steps):.2g} to {last_rate:.2g} over these "
            f"{num_steps} steps, below the peak of {peak:g} that the schedule reaches at step "
            f"{warmup_steps}; "
        )
    else:
        text += (
            f"With the main run's warmup, the post-norm stack's learning rate reached the "
            f"peak of {peak:g} at step {warmup_steps} and had decayed to {last_rate:.2g} by "
            f"step {num_steps}; "
        )
    change = "lower" if warm < post else "higher"
    text += (
        f"its loss over the last 10 steps averages {warm:.2f}, {abs(post - warm):.2f} {change} "
        "than without warmup"
    )
    if warm < pre:
        text += f" and below the pre-norm stack's {pre:.2f}."
    else:
        text += f", and not below the pre-norm stack's {pre:.2f}."
    return text + _in_every_training(recorded) + "\n"


def _in_every_training(recorded: dict[str, Sequence[tuple[float, float]]]) -> str:
    """Whether each comparison of the norm verdict holds in the recorded trainings."""
    sentences = []
    for what, pairs in recorded.items():
        if not pairs:
            continue
        below = sum(a < b for a, b in pairs)
        if below in (0, len(pairs)):
            way = "below" if below else "above"
            sentences.append(f"{what} ended {way} in every one of the {len(pairs)}")
        else:
            sentences.append(
                f"{what} ended below in {below} of the {len(pairs)} and above in the others"
            )
    if not sentences:
        return ""
    return (
        " Over the recorded trainings of these stacks (other CPU arithmetic, other seeds), "
        + "; ".join(sentences)
        + ": a comparison that does not hold in every one is the seed's, not the norm's."
    )


def transformer_norm_findings() -> str:
    """One paragraph with the three deep stacks' result, worded from the numbers."""
    config = NORM_WARMUP_CONFIG.norm.transformer
    loss = "loss of the last 10 steps, {}"
    norm = ("transformer-norm", loss.format("post-norm"))
    recorded = {
        "post-norm against pre-norm": recorded_pairs(
            norm, ("transformer-norm", loss.format("pre-norm"))
        ),
        "post-norm with warm-up against without": recorded_pairs(
            ("transformer-norm-warmup", loss.format("post-norm, warm-up")), norm
        ),
    }
    return transformer_norm_verdict(_norm_losses(), config.warmup_steps, config.lr, recorded)


def transformer_kv_cache() -> Figure:
    """Greedy decoding time of one sentence against output length, with and without cache."""
    seconds, lengths = transformer_timings()["decode_seconds"], TIMING_CONFIG.output_lengths
    fig = new_figure((5.6, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, style, color, label in (
            ("no cache", "s--", "#d62728", "no cache: the whole prefix at every step"),
            ("cache", "o-", "#1f77b4", "key/value cache"),
        ):
            milliseconds = [1000 * t for t in seconds[name]]
            ax.plot(lengths, milliseconds, style, color=color, label=label, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set(yscale="log", xlabel="tokens generated", ylabel="decoding time (ms, best of 3)")
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.legend()
        fig.tight_layout()
    return fig


def transformer_kv_cache_verdict(
    lengths: tuple[int, ...] | list[int],
    cache: list[float],
    no_cache: list[float],
    identical: bool,
) -> str:
    """The cache's speed-up and the cost per token, worded from the timings.

    Says by how much decoding without the cache took longer at the shortest and the longest
    output, whether that ratio grew with every doubling of the length, only overall, or not
    at all, at which lengths the decoder without the cache was faster, and how the cost per
    generated token changed with and without the cache.

    Args:
        lengths: The numbers of tokens decoded, shortest first.
        cache: Seconds to decode each length with the cache.
        no_cache: Seconds to decode each length without it.
        identical: Whether both decoders generated the same tokens at every length.

    Returns:
        A paragraph of Markdown.

    Raises:
        ValueError: If the three sequences do not have the same length of at least 2.
    """
    if not len(lengths) == len(cache) == len(no_cache) >= 2:
        raise ValueError(
            "lengths, cache and no_cache must have the same length, at least 2, got "
            f"{len(lengths)}, {len(cache)} and {len(no_cache)}"
        )
    ratios = [slow / fast for slow, fast in zip(no_cache, cache, strict=True)]
    shown = ", ".join(
        f"{ratio:.1f} at {n}{' tokens' if k == 0 else ''}"
        for k, (n, ratio) in enumerate(zip(lengths, ratios, strict=True))
    )
    if all(later >= earlier for earlier, later in itertools.pairwise(ratios)):
        trend = f"The ratio grew with every doubling of the output length ({shown})."
    elif ratios[-1] > ratios[0]:
        trend = f"The ratio grew with the output length overall, not at every step ({shown})."
    else:
        trend = f"The ratio did not grow with the output length ({shown})."
    slower = [str(n) for n, ratio in zip(lengths, ratios, strict=True) if ratio < 1]
    if slower:
        trend += (
            f" At {' and '.join(slower)} tokens the decoder without the cache was the faster one."
        )
    per_token = {
        name: [1000 * t / n for t, n in zip(times, lengths, strict=True)]
        for name, times in (("cache", cache), ("no cache", no_cache))
    }
    first, last = lengths[0], lengths[-1]
    growth = {name: values[-1] / values[0] for name, values in per_token.items()}
    return (
        f"Generating {last} tokens took {1000 * cache[-1]:.0f} ms with the cache and "
        f"{1000 * no_cache[-1]:.0f} ms without it, {ratios[-1]:.1f} times as long; for "
        f"{first} tokens the ratio is {ratios[0]:.1f}. {trend} Per generated token, the cached "
        f"decoder spent {per_token['cache'][0]:.1f} ms at {first} tokens and "
        f"{per_token['cache'][-1]:.1f} ms at {last}, {growth['cache']:.1f} times as much for "
        f"{last / first:.0f} times as many tokens; without the cache the cost per token went "
        f"from {per_token['no cache'][0]:.1f} ms to {per_token['no cache'][-1]:.1f} ms, "
        f"{growth['no cache']:.1f} times as much. Both decoders generated "
        f"{'the same' if identical else 'different'} tokens at every length.\n"
    )


def transformer_kv_cache_findings() -> str:
    """The cache's speed-up, and the cost per token with and without it, from the timings."""
    timings = transformer_timings()
    seconds = timings["decode_seconds"]
    return transformer_kv_cache_verdict(
        TIMING_CONFIG.output_lengths, seconds["cache"], seconds["no cache"], timings["identical"]
    )


FIGURES = (
    transformer_length_generalization,
    transformer_length_findings,
    transformer_length_output_facts,
    transformer_length_samples,
    transformer_norm_curves,
    transformer_norm_findings,
    transformer_kv_cache,
    transformer_kv_cache_findings,
)
