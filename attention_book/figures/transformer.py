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
    "transformer_ceiling",
    "transformer_copy_facts",
    "transformer_findings",
    "transformer_label_smoothing_table",
    "transformer_samples_table",
    "transformer_schedule",
    "transformer_schedule_facts",
    "transformer_summary",
    "transformer_tuning_caveat",
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
    """A Markdown table of the main run with and without label smoothing, and what it shows."""
    result = transformer_experiment()
    chosen = transformer_model_smoothing(result)
    references, _ = bahdanau_test_references()
    test = {eps: token_bleu(run["greedy"], references) for eps, run in result["runs"].items()}
    rows = [
        [eps, f"{run['train_loss'][-1]:.3f}", f"{run['valid_bleu']:.1f}", f"{test[eps]:.1f}"]
        for eps, run in result["runs"].items()
    ]
    header = ["label smoothing ε", "last epoch's training loss", "validation BLEU", "test BLEU"]
    other = next(eps for eps in result["runs"] if eps != chosen)
    label = "test BLEU, label smoothing {}"
    mine, theirs = (recorded_values(transformer_run_name(eps)) for eps in (chosen, other))
    recorded = [
        mine[v][label.format(chosen)] - theirs[v][label.format(other)] for v in mine if v in theirs
    ]
    return (
        markdown_table(header, rows)
        + "\n"
        + smoothing_verdict(chosen, other, test[chosen] - test[other], recorded)
    )


def smoothing_verdict(chosen: str, other: str, change: float, recorded: Sequence[float]) -> str:
    """What the two label smoothings' test BLEU say, worded from their recorded spread.

    Args:
        chosen: The label smoothing of the chapter's model.
        other: The other one.
        change: This build's test BLEU of `chosen` minus that of `other`.
        recorded: The same difference in each recorded variant (CPU arithmetic and seed).

    Returns:
        Two sentences: this build's difference, and whether it holds across the variants.
    """
    side = "above" if change >= 0 else "below"
    text = (
        f"The chapter's model uses the paper's ε = {chosen}, fixed before training. On the test "
        f"split this build's model scores {abs(change):.1f} BLEU points {side} the one trained "
        f"with ε = {other}."
    )
    if not recorded:
        return text + "\n"
    low, high = min(recorded), max(recorded)
    spread = (
        f"across the {len(recorded)} recorded trainings of both (other CPU arithmetic, other "
        f"seeds) the difference ran from {low:+.1f} to {high:+.1f} points"
    )
    if low > 0 or high < 0:
        way = "above" if low > 0 else "below"
        return text + f" {spread[0].upper()}{spread[1:]}: ε = {chosen} is {way} in every one.\n"
    return text + (
        f" That is within the noise: {spread}, so on this data and budget smoothing neither "
        "helps nor hurts measurably. Vaswani et al.'s gain in BLEU came on far larger data.\n"
    )


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


def transformer_tuning_caveat(test_bleu: dict[str, float], chosen: str, bahdanau: float) -> str:
    """A bullet: how differently the two models were tuned, and what that is worth here.

    The settings come from the two configurations; the numbers from the runs.

    Args:
        test_bleu: Test BLEU of each of the main run's Transformers, by label smoothing (the
            keys of its ``runs``).
        chosen: The label smoothing of the chapter's model.
        bahdanau: The Bahdanau model's test BLEU.

    Returns:
        One Markdown bullet.
    """
    ours, theirs = TRANSFORMER_CONFIG, BAHDANAU_CONFIG
    default_beta2 = inspect.signature(torch.optim.Adam).parameters["betas"].default[1]
    tried = " and ".join(test_bleu)
    times = {1: "once", 2: "twice"}.get(len(test_bleu), f"{len(test_bleu)} times")
    text = (
        f"- The two were not tuned alike. The Transformer was trained {times}, "
        f"with label smoothing {tried}; the chapter's model uses the paper's ε = {chosen}, fixed "
        f"before training. It follows its own schedule: Adam with β₂ = {ours.betas[1]:g}, a "
        f"linear warmup over {ours.warmup_steps} steps to a rate of {ours.lr:g}, then an "
        f"inverse-square-root decay, for {ours.num_epochs} epochs. The Bahdanau model was "
        f"trained once, with its chapter's fixed settings: Adam with PyTorch's defaults (β₂ = "
        f"{default_beta2:g}), a warmup over {theirs.warmup_steps} steps to a rate of "
        f"{theirs.lr:g}, then a cosine decay, for {theirs.num_epochs} epochs, no label "
        "smoothing. Each model was trained from one seed."
    )
    others = [eps for eps in test_bleu if eps != chosen]
    if others:
        other = others[0]
        gap = test_bleu[other] - bahdanau
        text += (
            f" The Transformer trained without the chapter's ε (ε = {other}) scores "
            f"{test_bleu[other]:.1f} test BLEU, {abs(gap):.1f} points "
            f"{'above' if gap >= 0 else 'below'} the Bahdanau model."
        )
    return text


def transformer_ceiling(bleu: dict[str, float], exact: dict[str, int], num_sentences: int) -> str:
    """A bullet: how far the two attention models are from the top of the scale.

    Args:
        bleu: Test BLEU of "transformer" and "attention" (the Bahdanau model).
        exact: How many test translations of each equal their reference.
        num_sentences: The number of test sentences.

    Returns:
        One Markdown bullet.
    """
    ours, theirs = round(bleu["transformer"], 1), round(bleu["attention"], 1)  # as printed
    text = (
        f"- BLEU cannot go above 100: the Transformer is {100 - ours:.1f} points below it, the "
        f"Bahdanau model {100 - theirs:.1f}. The Transformer's translation equals the "
        f"reference on {exact['transformer']:,} of the {num_sentences:,} test sentences, the "
        f"Bahdanau model's on {exact['attention']:,}."
    )
    if min(ours, theirs) >= 90:
        text += (
            " Both sit near the ceiling, with little room above them to separate the two; the "
            "deep dive [Sentences longer than any seen in training](transformer-length.md) "
            "makes the test harder."
        )
    return text


def transformer_findings() -> str:
    """Markdown bullets: what the comparison on the standard split shows, from its numbers."""
    references, lengths = bahdanau_test_references()
    translations = greedy_test_translations()
    overall = {name: token_bleu(h, references) for name, h in translations.items()}
    ours, theirs = (bahdanau_bleu_by_bucket(translations[n], references, lengths)[0]
                    for n in ("transformer", "attention"))  # fmt: skip
    batch = transformer_timings()["train_batch_seconds"]
    gap = overall["transformer"] - overall["attention"]
    ahead = sum(t > a for t, a in zip(ours, theirs, strict=True))
    result = transformer_experiment()
    test_bleu = {eps: token_bleu(run["greedy"], references) for eps, run in result["runs"].items()}
    exact = {
        name: sum(h == r for h, r in zip(translations[name], references, strict=True))
        for name in ("transformer", "attention")
    }
    lines = [
        f"- Test BLEU: {overall['transformer']:.1f} for the Transformer, "
        f"{overall['attention']:.1f} for the Bahdanau model and {overall['plain']:.1f} without "
        f"attention. The Transformer is {abs(gap):.1f} points "
        f"{'above' if gap >= 0 else 'below'} the Bahdanau model, and ahead of it in {ahead} of "
        f"the {len(LENGTH_BUCKETS)} length buckets.",
        transformer_tuning_caveat(
            test_bleu, transformer_model_smoothing(result), overall["attention"]
        ),
        transformer_ceiling(overall, exact, len(references)),
        f"- A training batch of the Transformer took "
        f"{batch['transformer'] / batch['attention']:.1f} times as long as one of the Bahdanau "
        "model, measured one after the other on the same batches.",
    ]
    return "\n".join(lines) + "\n"


#: The figures and build-time tables of this module, in the order of the chapter.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    transformer_architecture,
    transformer_schedule,
    transformer_schedule_facts,
    transformer_label_smoothing_table,
    transformer_summary,
    transformer_bleu_by_length,
    transformer_findings,
    transformer_samples_table,
    transformer_copy_facts,
)
