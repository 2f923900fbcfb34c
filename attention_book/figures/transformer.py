"""Figures and build-time tables of the chapter "The Transformer".

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.transformer` (and, for the two recurrent models compared with the
Transformer, in `attention_book.experiments.bahdanau`). The trained model's attention, head by
head, is drawn by `attention_book.figures.transformer_inside`; the studies beyond the standard
split by `attention_book.figures.transformer_studies`.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attention_book.experiments.bahdanau import (
    BAHDANAU_CONFIG,
    LENGTH_BUCKETS,
    bahdanau_bleu_by_bucket,
    bahdanau_data,
    bahdanau_experiment,
    bahdanau_test_references,
    token_bleu,
)
from attention_book.experiments.spread import recorded_values
from attention_book.experiments.transformer import (
    TRANSFORMER_CONFIG,
    transformer_experiment,
    transformer_model_smoothing,
    transformer_run_name,
)
from attention_book.experiments.transformer_timings import transformer_timings
from attention_book.figures.bahdanau import bucket_label
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure
from attention_book.training.schedules import warmup_inverse_sqrt

__all__ = [
    "FIGURES",
    "MODELS",
    "NUM_SAMPLES",
    "bleu_by_length_figure",
    "copy_counts",
    "digit_tokens",
    "greedy_test_translations",
    "longest",
    "transformer_architecture",
    "transformer_bleu_by_length",
    "transformer_copy_facts",
    "transformer_facts",
    "transformer_label_smoothing_table",
    "transformer_samples_table",
    "transformer_schedule",
    "transformer_schedule_facts",
    "transformer_summary",
    "transformer_verdict",
]

COLORS = {"attention": "#f6d7a7", "norm": "#fbf3c2", "ffn": "#cfe2f3", "embedding": "#e8daef"}
COLORS |= {"output": "#d5f5e3", "block": "#f4f4f4", "kv": "#c0392b"}


def _box(ax, x, y, text, color, width=2.3, height=0.42):
    style = {"boxstyle": "round,pad=0.03", "facecolor": color, "edgecolor": "black", "lw": 0.8}
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, **style))
    ax.text(x, y, text, ha="center", va="center", fontsize=8.5)


def _arrow(ax, points, color="black", width=0.9):
    """A polyline through ``points`` with an arrowhead at the end."""
    for start, end in itertools.pairwise(points[:-1]):
        ax.plot([start[0], end[0]], [start[1], end[1]], color=color, linewidth=width)
    style = {"arrowstyle": "-|>", "mutation_scale": 8, "color": color, "linewidth": width}
    ax.add_patch(FancyArrowPatch(points[-2], points[-1], shrinkA=0, shrinkB=0, **style))


def _sublayer(ax, x, y, text, color, side, *, last=False):
    """A sublayer at height ``y``, its Add & Norm above it, the residual path on ``side``."""
    _box(ax, x, y, text, color)
    _box(ax, x, y + 0.7, "Add & Norm", COLORS["norm"], height=0.34)
    _arrow(ax, [(x, y + 0.21), (x, y + 0.53)])
    path = [(x, y - 0.42), (x + side * 1.35, y - 0.42), (x + side * 1.35, y + 0.7)]
    _arrow(ax, [*path, (x + side * 1.18, y + 0.7)], color="#555")
    if not last:
        _arrow(ax, [(x, y + 0.87), (x, y + 1.29)])  # into the next sublayer


def transformer_architecture() -> Figure:
    """The encoder-decoder Transformer, drawn after Figure 1 of Vaswani et al. (2017)."""
    fig = new_figure((7.4, 7.0))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(-0.4, 9.6), ylim=(-0.25, 9.1), aspect="equal")
    ax.axis("off")
    enc, dec = 2.4, 6.8
    for x, side, label in (
        (enc, -1, "source tokens\nwe sold six books <eos>"),
        (dec, 1, "target tokens, shifted right\n<bos> nous avons vendu six livres"),
    ):
        ax.text(x, 0.05, label, ha="center", va="center", fontsize=8)
        _arrow(ax, [(x, 0.4), (x, 0.72)])
        _box(ax, x, 0.95, r"Embedding $\times\sqrt{d}$", COLORS["embedding"])
        _arrow(ax, [(x, 1.16), (x, 1.52)])
        ax.add_patch(plt.Circle((x, 1.68), 0.16, facecolor="white", edgecolor="black", lw=0.8))
        ax.text(x, 1.68, "+", ha="center", va="center", fontsize=11)
        _arrow(ax, [(x, 1.84), (x, 2.43)])
        ax.text(x + side * 1.55, 1.68, "sinusoidal\npositional\nencoding", fontsize=7.5,
                ha="right" if side < 0 else "left", va="center")  # fmt: skip
        _arrow(ax, [(x + side * 1.5, 1.68), (x + side * 0.18, 1.68)])
        height = 3.05 if side < 0 else 4.55  # the block, repeated num_blks times
        style = {"boxstyle": "round,pad=0.05", "facecolor": COLORS["block"], "edgecolor": "#888"}
        ax.add_patch(FancyBboxPatch((x - 1.7, 2.25), 3.4, height, **style))
        ax.text(x + side * 1.95, 2.25 + height / 2, "num_blks ×" if side < 0 else "× num_blks",
                rotation=90, ha="center", va="center", fontsize=9)  # fmt: skip
    _sublayer(ax, enc, 2.85, "Multi-head self-attention", COLORS["attention"], -1)
    _sublayer(ax, enc, 4.35, "Position-wise FFN", COLORS["ffn"], -1, last=True)
    ax.text(enc, 5.45, "encoder outputs: keys and values\nfor every decoder block",
            ha="center", va="bottom", fontsize=7.5)  # fmt: skip
    _sublayer(ax, dec, 2.85, "Masked multi-head\nself-attention", COLORS["attention"], 1)
    _sublayer(ax, dec, 4.35, "Encoder-decoder\nattention", COLORS["attention"], 1)
    _sublayer(ax, dec, 5.85, "Position-wise FFN", COLORS["ffn"], 1)
    path = [(enc, 5.22), (enc, 5.4), (4.85, 5.4), (4.85, 4.35), (dec - 1.15, 4.35)]
    _arrow(ax, path, color=COLORS["kv"], width=1.2)
    ax.text(4.95, 4.2, "K, V", color=COLORS["kv"], fontsize=8, va="top")
    ax.text(dec - 0.6, 3.98, "Q", color=COLORS["kv"], fontsize=8)
    _box(ax, dec, 7.42, "Linear", COLORS["output"])
    _arrow(ax, [(dec, 7.63), (dec, 7.9)])
    _box(ax, dec, 8.12, "Softmax", COLORS["output"])
    _arrow(ax, [(dec, 8.33), (dec, 8.62)])
    ax.text(dec, 8.85, "probabilities of the next token", ha="center", fontsize=8)
    note = "Post-norm, as in the paper:\nX ← LayerNorm(X + Sublayer(X)).\nPre-norm moves each "
    note += "LayerNorm\nto the sublayer's input:\nX ← X + Sublayer(LayerNorm(X))."
    box = {"boxstyle": "round", "facecolor": "white", "edgecolor": "#aaa"}
    ax.text(enc, 8.0, note, ha="center", va="center", fontsize=8, bbox=box)
    return fig


MODELS = {  # name: (label, line style, color)
    "transformer": ("Transformer", "D-", "#2ca02c"),
    "attention": ("GRU + Bahdanau attention", "o-", "#1f77b4"),
    "plain": ("GRU, no attention", "s--", "#d62728"),
}


def greedy_test_translations() -> dict[str, list[str]]:
    """The greedy test translations of the three models (the Transformer chosen on BLEU).

    Returns:
        ``{"transformer": [...], "attention": [...], "plain": [...]}``: one translation per
        test sentence, from the stored runs.
    """
    bahdanau, result = bahdanau_experiment()["greedy"], transformer_experiment()
    chosen = result["runs"][transformer_model_smoothing(result)]["greedy"]
    return {"transformer": chosen, "attention": bahdanau["attention"], "plain": bahdanau["plain"]}


def bleu_by_length_figure(
    translations: dict[str, list[str]], references: list[str], lengths: list[int], what: str
) -> Figure:
    """BLEU by source-length bucket, one line per model of ``translations``.

    Args:
        translations: Per model name (a key of `MODELS`), one translation per sentence.
        references: One reference per sentence.
        lengths: The source length of each sentence, in tokens.
        what: Which sentences these are, for the axis label ("test", "held-out").

    Returns:
        The figure.
    """
    fig = new_figure((6.2, 3.5))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, hypotheses in translations.items():
            label, style, color = MODELS[name]
            scores, counts = bahdanau_bleu_by_bucket(hypotheses, references, lengths)
            ax.plot(range(len(scores)), scores, style, label=label, color=color, markersize=4)
        ticks = [f"{bucket_label(*b)}\n({c})" for b, c in zip(LENGTH_BUCKETS, counts, strict=True)]
        ax.set_xticks(range(len(counts)), ticks)
        ax.set_xlabel(f"source length in tokens (number of {what} sentences)")
        ax.set_ylabel("BLEU (greedy)")
        ax.set_ylim(0, 100)
        ax.legend(loc="lower left")
        fig.tight_layout()
    return fig


def transformer_schedule() -> Figure:
    """The learning rate of the main run at every step: linear warmup, inverse-sqrt decay."""
    num_steps = TRANSFORMER_CONFIG.num_epochs * len(bahdanau_data().train_loader)
    warmup, peak = TRANSFORMER_CONFIG.warmup_steps, TRANSFORMER_CONFIG.lr
    rates = [peak * warmup_inverse_sqrt(step, warmup) for step in range(num_steps)]
    fig = new_figure((5.6, 3.0))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        ax.plot(range(1, num_steps + 1), rates, color="#1f77b4")
        ax.axvline(warmup, color="#888", linestyle=":", linewidth=1)
        text = f"peak {peak:g} after {warmup} warmup steps"
        arrow = {"arrowstyle": "->", "color": "#555"}
        position = (warmup + 0.08 * num_steps, 0.9 * peak)
        ax.annotate(text, (warmup, peak), xytext=position, fontsize=8.5, arrowprops=arrow)
        ax.set(xlabel="optimizer step", ylabel="learning rate", xlim=(0, num_steps))
        ax.set_ylim(0, 1.1 * peak)
        fig.tight_layout()
    return fig


def transformer_summary() -> str:
    """A Markdown table: the three models' size, training cost and test BLEU."""
    bahdanau, result = bahdanau_experiment(), transformer_experiment()
    run = result["runs"][transformer_model_smoothing(result)]
    batch_seconds = transformer_timings()["train_batch_seconds"]
    references, _ = bahdanau_test_references()
    translations, rows = greedy_test_translations(), []
    for name in ("plain", "attention", "transformer"):
        ours = name == "transformer"
        parameters = run["num_parameters"] if ours else bahdanau["num_parameters"][name]
        seconds = run["train_seconds"] if ours else bahdanau["train_seconds"][name]
        epochs = (TRANSFORMER_CONFIG if ours else BAHDANAU_CONFIG).num_epochs
        bleu = token_bleu(translations[name], references)
        cells = [f"{parameters:,}", str(epochs), f"{seconds:.0f} s"]
        rows.append(
            [MODELS[name][0], *cells, f"{1000 * batch_seconds[name]:.0f} ms", f"{bleu:.1f}"]
        )
    header = ["model", "parameters", "epochs", "training time", "time per batch (side by side)"]
    return markdown_table([*header, "test BLEU (greedy)"], rows)


def transformer_label_smoothing_table() -> str:
    """A Markdown table of the main run with and without label smoothing."""
    result = transformer_experiment()
    references, _ = bahdanau_test_references()
    rows = [
        [
            eps,
            f"{run['train_loss'][-1]:.3f}",
            f"{run['valid_bleu']:.1f}",
            f"{token_bleu(run['greedy'], references):.1f}",
        ]
        for eps, run in result["runs"].items()
    ]
    header = ["label smoothing ε", "last epoch's training loss", "validation BLEU", "test BLEU"]
    return markdown_table(header, rows)


def transformer_verdict(
    *,
    bleu: dict[str, float],
    other_bleu: float,
    smoothing_change: float,
    smoothing_recorded: Sequence[float],
    chosen: str,
) -> dict[str, str]:
    """The core page's words that depend on its numbers; the rest of each sentence is the page's.

    Args:
        bleu: Test BLEU of "transformer" (the chapter's model) and "attention" (the Bahdanau
            model).
        other_bleu: Test BLEU of the Transformer trained with the other label smoothing.
        smoothing_change: This build's test BLEU of the chapter's label smoothing minus that of
            the other one.
        smoothing_recorded: The same difference in each recorded variant (CPU arithmetic and
            seed).
        chosen: The label smoothing of the chapter's model.

    Returns:
        ``"smoothing_side"`` (``"above"`` or ``"below"``) and ``"smoothing_recorded"`` (a
        sentence: whether the difference holds across the recorded variants, or is within
        their noise); ``"bleu_side"`` and ``"other_side"``: where the Transformer, and the one
        with the other label smoothing, are against the Bahdanau model; ``"ceiling"``: a
        sentence when both models are near the top of the scale, else nothing.

    Raises:
        ValueError: If `smoothing_recorded` is empty.
    """
    if not smoothing_recorded:
        raise ValueError("smoothing_recorded must hold the recorded variants' differences")
    words = {"smoothing_side": "above" if smoothing_change >= 0 else "below"}
    low, high = min(smoothing_recorded), max(smoothing_recorded)
    spread = (
        f"across the {len(smoothing_recorded)} recorded trainings of both (other CPU "
        f"arithmetic, other seeds) the difference ran from {low:+.1f} to {high:+.1f} points"
    )
    if low > 0 or high < 0:
        way = "above" if low > 0 else "below"
        words["smoothing_recorded"] = (
            f"{spread[0].upper()}{spread[1:]}: ε = {chosen} is {way} in every one."
        )
    else:
        words["smoothing_recorded"] = (
            f"That is within the noise: {spread}, so on this data and budget smoothing neither "
            "helps nor hurts measurably. Vaswani et al.'s gain in BLEU came on far larger data."
        )
    words["bleu_side"] = "above" if bleu["transformer"] >= bleu["attention"] else "below"
    words["other_side"] = "above" if other_bleu >= bleu["attention"] else "below"
    # Near the top by the rounded scores the reader sees.
    if min(round(bleu["transformer"], 1), round(bleu["attention"], 1)) >= 90:
        words["ceiling"] = (
            "Both sit near the ceiling, with little room above them to separate the two; the "
            "deep dive [Sentences longer than any seen in training](transformer-length.md) "
            "makes the test harder."
        )
    else:
        words["ceiling"] = ""
    return words


def transformer_schedule_facts() -> dict[str, str]:
    """The main run's length and warmup, in optimizer steps, for the schedule's sentence."""
    batches = len(bahdanau_data().train_loader)
    epochs = TRANSFORMER_CONFIG.num_epochs
    return {
        "steps": f"{epochs * batches:,}",
        "epochs": str(epochs),
        "batches": str(batches),
        "warmup": f"{TRANSFORMER_CONFIG.warmup_steps:,}",
    }


def digit_tokens(sentence: str) -> list[str]:
    """The tokens of a tokenized sentence that hold a digit, sorted (numbers, times, years).

    Args:
        sentence: Tokens separated by spaces.

    Returns:
        Those tokens, sorted, so that two sentences with the same numbers in another order
        give the same list.
    """
    return sorted(token for token in sentence.split() if any(c.isdigit() for c in token))


def copy_counts(translations: dict[str, list[str]], references: list[str]) -> dict[str, int]:
    """How many translations carry exactly the numbers of their reference.

    Only the references that hold a number count; a translation carries them when its tokens
    with a digit are those of the reference (`digit_tokens`), no more and no fewer.

    Args:
        translations: Per model, one translation per reference.
        references: The references.

    Returns:
        "references": how many references hold a number; then, per model, how many of its
        translations of those carry exactly their numbers.

    Raises:
        ValueError: If a model has not one translation per reference.
    """
    for name, hypotheses in translations.items():
        if len(hypotheses) != len(references):
            raise ValueError(
                f"translations[{name!r}] must have one sentence per reference "
                f"({len(references)}), got {len(hypotheses)}"
            )
    numbered = [i for i, reference in enumerate(references) if digit_tokens(reference)]
    counts = {"references": len(numbered)}
    for name, hypotheses in translations.items():
        counts[name] = sum(digit_tokens(hypotheses[i]) == digit_tokens(references[i])
                           for i in numbered)  # fmt: skip
    return counts


def transformer_copy_facts() -> dict[str, str]:
    """How often each model's test translation carries exactly the numbers of the reference."""
    references, _ = bahdanau_test_references()
    return {name: f"{count:,}" for name, count in
            copy_counts(greedy_test_translations(), references).items()}  # fmt: skip


def transformer_bleu_by_length() -> Figure:
    """Test BLEU by source length of the Transformer and of the Bahdanau chapter's models."""
    references, lengths = bahdanau_test_references()
    return bleu_by_length_figure(greedy_test_translations(), references, lengths, "test")


def longest(lengths: list[int], count: int) -> list[int]:
    """The indices of the `count` longest sentences, the first ones first among equals.

    Args:
        lengths: The length of each sentence.
        count: How many to keep.

    Returns:
        Their indices, longest first.
    """
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))[:count]


#: How many of the longest test sentences the samples table shows (the core page says "the
#: longest test sentence").
NUM_SAMPLES = 1


def transformer_samples_table() -> str:
    """The `NUM_SAMPLES` longest test sentences and the two attention models' translations."""
    pairs, translations = bahdanau_data().test_pairs, greedy_test_translations()
    references, lengths = bahdanau_test_references()
    rows = []
    for i in longest(lengths, NUM_SAMPLES):
        cells = [translations[name][i] for name in ("attention", "transformer")]
        cells = [f"{c} ✓" if c == references[i] else c for c in cells]
        rows.append([f"{pairs[i][0]} ({lengths[i]} tokens)", references[i], *cells])
    return markdown_table(["source", "reference", "Bahdanau attention", "Transformer"], rows)


def transformer_facts() -> dict[str, str]:
    """The numbers the core page's sentences cite, and `transformer_verdict`'s words on them.

    Read from the stored runs: test BLEU of the three models and of the Transformer trained
    with the other label smoothing, their exact matches, the recorded variants of the two
    label smoothings, the length buckets, the timed batches and the two configurations.
    """
    references, lengths = bahdanau_test_references()
    translations = greedy_test_translations()
    bleu = {name: token_bleu(h, references) for name, h in translations.items()}
    ours, theirs = (bahdanau_bleu_by_bucket(translations[n], references, lengths)[0]
                    for n in ("transformer", "attention"))  # fmt: skip
    batch = transformer_timings()["train_batch_seconds"]
    result = transformer_experiment()
    chosen = transformer_model_smoothing(result)
    test_bleu = {eps: token_bleu(run["greedy"], references) for eps, run in result["runs"].items()}
    other = next(eps for eps in result["runs"] if eps != chosen)
    label = "test BLEU, label smoothing {}"
    mine, rivals = (recorded_values(transformer_run_name(eps)) for eps in (chosen, other))
    recorded = [
        mine[v][label.format(chosen)] - rivals[v][label.format(other)] for v in mine if v in rivals
    ]
    exact = {
        name: sum(h == r for h, r in zip(translations[name], references, strict=True))
        for name in ("transformer", "attention")
    }
    config, bahdanau_config = TRANSFORMER_CONFIG, BAHDANAU_CONFIG
    runs = len(test_bleu)
    shown = {name: round(bleu[name], 1) for name in ("transformer", "attention")}  # as printed
    facts = {
        "smoothing_chosen": chosen,
        "smoothing_other": other,
        "smoothing_gap": f"{abs(test_bleu[chosen] - test_bleu[other]):.1f}",
        "bleu_transformer": f"{bleu['transformer']:.1f}",
        "bleu_attention": f"{bleu['attention']:.1f}",
        "bleu_plain": f"{bleu['plain']:.1f}",
        "bleu_gap": f"{abs(bleu['transformer'] - bleu['attention']):.1f}",
        "buckets_ahead": str(sum(t > a for t, a in zip(ours, theirs, strict=True))),
        "buckets": str(len(LENGTH_BUCKETS)),
        "trained_times": {1: "once", 2: "twice"}.get(runs, f"{runs} times"),
        "smoothings_tried": " and ".join(test_bleu),
        "beta2": f"{config.betas[1]:g}",
        "warmup_steps": str(config.warmup_steps),
        "lr": f"{config.lr:g}",
        "epochs": str(config.num_epochs),
        "bahdanau_beta2": f"{inspect.signature(torch.optim.Adam).parameters['betas'].default[1]:g}",
        "bahdanau_warmup_steps": str(bahdanau_config.warmup_steps),
        "bahdanau_lr": f"{bahdanau_config.lr:g}",
        "bahdanau_epochs": str(bahdanau_config.num_epochs),
        "other_bleu": f"{test_bleu[other]:.1f}",
        "other_gap": f"{abs(test_bleu[other] - bleu['attention']):.1f}",
        "below_top_transformer": f"{100 - shown['transformer']:.1f}",
        "below_top_attention": f"{100 - shown['attention']:.1f}",
        "exact_transformer": f"{exact['transformer']:,}",
        "exact_attention": f"{exact['attention']:,}",
        "test_sentences": f"{len(references):,}",
        "batch_ratio": f"{batch['transformer'] / batch['attention']:.1f}",
    }
    return facts | transformer_verdict(
        bleu=bleu,
        other_bleu=test_bleu[other],
        smoothing_change=test_bleu[chosen] - test_bleu[other],
        smoothing_recorded=recorded,
        chosen=chosen,
    )


FIGURES = (
    transformer_architecture,
    transformer_schedule,
    transformer_schedule_facts,
    transformer_label_smoothing_table,
    transformer_summary,
    transformer_bleu_by_length,
    transformer_facts,
    transformer_samples_table,
    transformer_copy_facts,
)
