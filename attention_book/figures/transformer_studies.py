"""Figures and build-time tables of the Transformer chapter's experiments beyond the standard split.

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.transformer_studies`: the length-generalization split, post-norm
against pre-norm, and decoding with and without the key/value cache.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.data.text import tokenize
from attention_book.experiments.bahdanau import LENGTH_BUCKETS, bahdanau_data, token_bleu
from attention_book.experiments.transformer import TRANSFORMER_CONFIG
from attention_book.experiments.transformer_studies import (
    LENGTH_SPLIT_CONFIG,
    NORM_CONFIG,
    TIMING_CONFIG,
    transformer_length_experiment,
    transformer_norm_experiment,
    transformer_timings,
)
from attention_book.figures.transformer import bleu_by_length_figure, longest
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure

__all__ = [
    "FIGURES",
    "transformer_kv_cache",
    "transformer_kv_cache_findings",
    "transformer_length_findings",
    "transformer_length_generalization",
    "transformer_length_samples",
    "transformer_norm_curves",
    "transformer_norm_findings",
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
    lines = [
        f"- Training kept {result['num_train_pairs']:,} of the {num_train:,} training pairs "
        f"(sources of at most {limit} tokens); {len(references):,} held-out sentences test it."
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
    kept = {key: values[-1] / values[0] for key, values in scores.items()}
    verdict = "did not let it extrapolate" if kept["transformer"] < 0.8 else "let it extrapolate"
    lines.append(
        f"- On sources of 40 tokens or more, the Transformer keeps {kept['transformer']:.0%} of "
        f"its BLEU on the lengths it was trained on, the Bahdanau model {kept['bahdanau']:.0%}: "
        f"a position code defined for every position {verdict} (to 80% of its BLEU or more)."
    )
    return "\n".join(lines) + "\n"


def transformer_length_samples() -> str:
    """The two longest held-out sentences and both models' translations after short training."""
    result, (references, lengths) = transformer_length_experiment(), _held_out()
    pairs = bahdanau_data().valid_pairs + bahdanau_data().test_pairs
    rows = []
    for i in longest(lengths, 2):
        cells = [result[key]["greedy"][i] for key in ("bahdanau", "transformer")]
        rows.append([f"{pairs[i][0]} ({lengths[i]} tokens)", references[i], *cells])
    return markdown_table(["source", "reference", "Bahdanau attention", "Transformer"], rows)


def transformer_norm_curves() -> Figure:
    """Training loss at every step of a deep post-norm and a deep pre-norm Transformer."""
    result = transformer_norm_experiment()
    fig = new_figure((5.8, 3.3))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, color in (("post-norm", "#d62728"), ("pre-norm", "#1f77b4")):
            losses = result[name]["step_loss"]
            mean = [sum(losses[max(0, i - 4) : i + 1]) / min(5, i + 1) for i in range(len(losses))]
            steps = range(1, len(losses) + 1)
            ax.plot(steps, losses, color=color, alpha=0.3, linewidth=0.8)
            ax.plot(steps, mean, color=color, label=f"{name} (mean of 5 steps)")
        ax.set(xlabel="optimizer step", ylabel="training loss (cross-entropy)", ylim=(0, None))
        blocks, rate = NORM_CONFIG.num_blks, TRANSFORMER_CONFIG.lr
        ax.set_title(f"{blocks} + {blocks} blocks, learning rate {rate:g} from step 1", fontsize=9)
        ax.legend()
        fig.tight_layout()
    return fig


def transformer_norm_findings() -> str:
    """One paragraph with the post-norm/pre-norm result, worded from the numbers."""
    result = transformer_norm_experiment()
    mean = {name: sum(run["step_loss"][-10:]) / 10 for name, run in result.items()}
    first = {name: run["step_loss"][0] for name, run in result.items()}
    better, worse = sorted(mean, key=mean.get)
    return (
        f"Both start from a loss of {first['post-norm']:.2f} and {first['pre-norm']:.2f}. Over "
        f"the last 10 of {NORM_CONFIG.num_steps} steps, the {better} stack averages a loss "
        f"of {mean[better]:.2f} and the {worse} stack {mean[worse]:.2f}, "
        f"{mean[worse] / mean[better]:.1f} times as much.\n"
    )


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


def transformer_kv_cache_findings() -> str:
    """Two sentences: the cache's speed-up, and the cost per token with and without it."""
    timings, lengths = transformer_timings(), TIMING_CONFIG.output_lengths
    cache, no_cache = timings["decode_seconds"]["cache"], timings["decode_seconds"]["no cache"]
    per_token = {name: [1000 * t / n for t, n in zip(times, lengths, strict=True)]
                 for name, times in timings["decode_seconds"].items()}  # fmt: skip
    same = "the same" if timings["identical"] else "different"
    return (
        f"Generating {lengths[-1]} tokens took {1000 * cache[-1]:.0f} ms with the cache and "
        f"{1000 * no_cache[-1]:.0f} ms without it, {no_cache[-1] / cache[-1]:.1f} times as long; "
        f"for {lengths[0]} tokens the ratio is {no_cache[0] / cache[0]:.1f}. Per generated token, "
        f"the cached decoder spent {per_token['cache'][0]:.1f} ms at {lengths[0]} tokens and "
        f"{per_token['cache'][-1]:.1f} ms at {lengths[-1]}; without the cache the cost per token "
        f"went from {per_token['no cache'][0]:.1f} ms to {per_token['no cache'][-1]:.1f} ms. "
        f"Both decoders generated {same} tokens at every length.\n"
    )


FIGURES = (
    transformer_length_generalization,
    transformer_length_findings,
    transformer_length_samples,
    transformer_norm_curves,
    transformer_norm_findings,
    transformer_kv_cache,
    transformer_kv_cache_findings,
)
