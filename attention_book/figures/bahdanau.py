"""Figures and build-time tables of the Bahdanau chapter.

Drawing only: the experiment they show (the two models, their training, the cached result
and the BLEU measurements) lives in `attention_book.experiments.bahdanau`, imported here. The
Introduction's figures of the same experiment are in `attention_book.figures.introduction`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attention_book.data.text import tokenize
from attention_book.data.translation import TranslationData
from attention_book.decoding import beam_search
from attention_book.experiments.bahdanau import (
    BAHDANAU_CONFIG,
    LENGTH_BUCKETS,
    bahdanau_bleu_by_bucket,
    bahdanau_data,
    bahdanau_exact_match_by_bucket,
    bahdanau_experiment,
    bahdanau_test_references,
    bahdanau_trained_models,
    bahdanau_translate,
    token_bleu,
)
from attention_book.experiments.spread import recorded_pairs
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure, show_heatmaps

__all__ = [
    "FIGURES",
    "bahdanau_alignment",
    "bahdanau_alignment_notes",
    "bahdanau_baseline_caveat",
    "bahdanau_bleu_by_length",
    "bahdanau_decoding_table",
    "bahdanau_diagram",
    "bahdanau_exercise_length_penalty",
    "bahdanau_exercise_long_bleu",
    "bahdanau_findings",
    "bahdanau_samples_table",
    "bahdanau_short_source_verdict",
    "bahdanau_summary",
    "bucket_label",
    "diagram_arrow",
    "diagram_axes",
    "diagram_box",
    "epoch_time_verdict",
    "length_trend",
    "spread_bullet",
]


def bucket_label(low: int, high: int) -> str:
    """How a length bucket reads on an axis: "10-14", or "40+" for the open last one."""
    return f"{low}-{high}" if high < 60 else f"{low}+"


def bahdanau_bleu_by_length() -> Figure:
    """Test BLEU of both models against source length (the shape of Bahdanau's Figure 2)."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    fig = new_figure((6.0, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, label, style in (
            ("attention", "with Bahdanau attention", "o-"),
            ("plain", "without attention (fixed context)", "s--"),
        ):
            scores, counts = bahdanau_bleu_by_bucket(result["greedy"][name], references, lengths)
            ax.plot(range(len(scores)), scores, style, label=label)
        ax.set_xticks(
            range(len(counts)),
            [f"{bucket_label(*b)}\n({c})" for b, c in zip(LENGTH_BUCKETS, counts, strict=True)],
        )
        ax.set_xlabel("source length in tokens (number of test sentences)")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(0, 100)
        ax.legend(loc="lower left")
        fig.tight_layout()
    return fig


def bahdanau_summary() -> str:
    """A Markdown table: parameters, hidden size, training CPU time, final loss, overall BLEU."""
    result = bahdanau_experiment()
    references, _ = bahdanau_test_references()
    rows = []
    for name, label in (("plain", "without attention"), ("attention", "Bahdanau attention")):
        rows.append(
            [
                label,
                f"{result['num_parameters'][name]:,}",
                str(result["num_hiddens"][name]),
                f"{result['train_cpu_seconds'][name]:.0f} s",
                f"{result['train_loss'][name][-1]:.3f}",
                f"{token_bleu(result['greedy'][name], references):.1f}",
            ]
        )
    header = ["model", "parameters", "num_hiddens", "training (CPU time)", "final train loss"]
    return markdown_table([*header, "test BLEU (greedy)"], rows)


def bahdanau_decoding_table() -> str:
    """A Markdown table: test BLEU with greedy decoding and with beam search, both models."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    long_ones = [i for i, n in enumerate(lengths) if n >= 25]
    rows, changes = [], []
    for name, label in (("plain", "without attention"), ("attention", "with attention")):
        row = [label]
        greedy_bleu, beam_bleu = (
            token_bleu(result[m][name], references) for m in ("greedy", "beam")
        )
        changes.append(f"{beam_bleu - greedy_bleu:+.1f} points for the model {label.lower()}")
        for method in ("greedy", "beam"):
            hypotheses = result[method][name]
            row.append(f"{token_bleu(hypotheses, references):.1f}")
            long_bleu = token_bleu(
                [hypotheses[i] for i in long_ones], [references[i] for i in long_ones]
            )
            row.append(f"{long_bleu:.1f}")
        rows.append(row)
    beam = BAHDANAU_CONFIG.beam_size
    header = [
        "model",
        "greedy: all",
        "greedy: 25+ tokens",
        f"beam {beam}: all",
        f"beam {beam}: 25+ tokens",
    ]
    seconds = result["decode_seconds"]["attention"]
    return markdown_table(header, rows) + (
        f"\nOn the whole test set, beam search with a beam of {beam} changes BLEU by "
        f"{changes[0]} and by {changes[1]}. Decoding the test set with it took "
        f"{seconds['beam'] / seconds['greedy']:.0f} times as long as greedy decoding "
        "with the attention model.\n"
    )


def bahdanau_samples_table() -> str:
    """A Markdown table of the 5 longest test sentences and both models' translations."""
    result = bahdanau_experiment()
    data = bahdanau_data()
    lengths = [len(tokenize(source)) for source, _ in data.test_pairs]
    longest = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))[:5]
    rows = []
    for i in longest:
        source, reference = data.test_pairs[i]
        rows.append(
            [
                f"{source} ({lengths[i]} tokens)",
                " ".join(tokenize(reference)),
                result["greedy"]["plain"][i],
                result["greedy"]["attention"][i],
            ]
        )
    return markdown_table(["source", "reference", "without attention", "with attention"], rows)


def _alignment_example(data: TranslationData) -> int:
    """Index of the longest test sentence of at most 22 tokens with a full date in it."""
    candidates = [
        (len(tokenize(source)), -i)
        for i, (source, _) in enumerate(data.test_pairs)
        if len(tokenize(source)) <= 22 and " at " in source and ", 20" in source
    ]
    return -max(candidates)[1]


def _alignment_translation() -> tuple[list[str], list[str], torch.Tensor]:
    """The alignment example, translated greedily by the attention model.

    Returns:
        (source tokens with <eos>, generated tokens, attention weights), the weights of shape
        (num_generated, num_source_tokens).
    """
    _, attention, data = bahdanau_trained_models()
    source = data.test_pairs[_alignment_example(data)][0]
    (translation,) = bahdanau_translate(attention, data, [source])
    source_tokens = [*tokenize(source), "<eos>"]
    target_tokens = data.tgt_vocab.to_tokens(translation.tokens)
    return source_tokens, target_tokens, translation.attention_weights[:, : len(source_tokens)]


def bahdanau_alignment() -> Figure:
    """Attention weights of the attention model on a long test sentence (greedy decoding)."""
    source_tokens, target_tokens, weights = _alignment_translation()
    size = 0.26
    return show_heatmaps(
        weights,
        xlabel="source (English)",
        ylabel="generated (French)",
        figsize=(size * len(source_tokens) + 1.0, size * len(target_tokens) + 1.0),
        xticklabels=source_tokens,
        yticklabels=target_tokens,
    )


def diagram_box(ax, x, y, text, color, width=0.8, height=0.5):
    """A rounded box of the encoder-decoder diagrams (this chapter's and the Introduction's)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.02",
            facecolor=color,
            edgecolor="black",
            linewidth=0.8,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def diagram_arrow(ax, start, end, color="black", width=1.0, style="-|>", rad=0.0):
    """An arrow of the encoder-decoder diagrams, straight or bent by `rad`."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=9,
            color=color,
            linewidth=width,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


def diagram_axes(figsize: tuple[float, float], xlim, ylim):
    """A figure with one frameless axes of equal scales, for a diagram."""
    fig = new_figure(figsize)
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def bahdanau_diagram() -> Figure:
    """Diagram of one decoder step: s_{t'-1} queries every h_t; the context enters the GRU."""
    fig, ax = diagram_axes((7.6, 3.9), (-0.6, 10.2), (-0.8, 4.6))
    words = ["we", "sold", "six", "books", "<eos>"]
    weights = [0.05, 0.1, 0.7, 0.1, 0.05]
    context = (5.6, 3.2)
    for t, (word, weight) in enumerate(zip(words, weights, strict=True)):
        x = 0.9 * t
        ax.text(x, 0.15, word, ha="center", va="center", fontsize=9)
        diagram_arrow(ax, (x, 0.35), (x, 0.72))
        diagram_box(ax, x, 1.0, f"$h_{t + 1}$", "#cfe2f3", width=0.7)
        if t:
            diagram_arrow(ax, (x - 0.55, 1.0), (x - 0.35, 1.0))
        diagram_arrow(
            ax,
            (x, 1.27),
            (context[0] - 0.4, context[1] - 0.27),
            color="#c0392b",
            width=0.5 + 6 * weight,
            style="-",
        )
        ax.text(x, -0.2, f"{weight:.2f}", fontsize=8, color="#c0392b", ha="center")
    ax.text(1.8, -0.65, "encoder states: keys and values", ha="center", fontsize=9)
    ax.text(
        0.0,
        3.9,
        r"weights $\alpha_{t'\,t} = \mathrm{softmax}_t\; a(s_{t'-1}, h_t)$",
        fontsize=9,
        color="#c0392b",
    )
    diagram_box(ax, *context, r"$c_{t'} = \sum_t \alpha_{t'\,t}\, h_t$", "#f9e79f", width=1.9)
    diagram_box(ax, 8.4, 1.0, "$s_{t'-1}$", "#d5f5e3", width=0.9)
    diagram_arrow(ax, (8.0, 1.2), (6.3, 2.93))
    ax.text(6.75, 1.75, "query", fontsize=9)
    diagram_box(ax, 8.4, 3.2, "GRU", "#d5f5e3", width=0.9)
    diagram_arrow(ax, (context[0] + 0.97, context[1]), (7.93, 3.2))
    diagram_arrow(ax, (8.4, 1.27), (8.4, 2.93))
    diagram_arrow(ax, (8.4, 4.3), (8.4, 3.47))
    ax.text(8.5, 4.0, "$y_{t'-1}$", fontsize=9)
    diagram_arrow(ax, (8.87, 3.2), (9.5, 3.2))
    ax.text(9.55, 3.2, "$s_{t'}$", fontsize=9, va="center")
    ax.text(8.4, -0.65, "decoder", ha="center", fontsize=9)
    return fig


def length_trend(low: float, high: float, tolerance: float = 1.0) -> str:
    """How a measure moves from the first length bucket to the last: a verb for a sentence."""
    if high < low - tolerance:
        return "falls"
    return "rises" if high > low + tolerance else "stays level"


def bahdanau_findings() -> str:
    """Markdown bullets that state what the cached run shows, with its measured numbers."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    scores = {
        name: bahdanau_bleu_by_bucket(result["greedy"][name], references, lengths)[0]
        for name in ("plain", "attention")
    }
    first, last = bucket_label(*LENGTH_BUCKETS[0]), bucket_label(*LENGTH_BUCKETS[-1])
    lines = []
    for name, label in (("plain", "Without attention"), ("attention", "With attention")):
        low, high = scores[name][0], scores[name][-1]
        lines.append(
            f"- {label}, test BLEU {length_trend(low, high)} from {low:.1f} on sources of {first} "
            f"tokens to {high:.1f} on sources of {last} tokens."
        )
    gaps = [a - p for a, p in zip(scores["attention"], scores["plain"], strict=True)]
    ahead = sum(gap > 0 for gap in gaps)
    lines.append(
        f"- The attention model is ahead in {ahead} of the {len(gaps)} length buckets; the gap "
        f"is {gaps[0]:.1f} BLEU points on the shortest sources and {gaps[-1]:.1f} on the "
        "longest."
    )
    lines.append(epoch_time_verdict(result["train_cpu_seconds"]))
    pairs = recorded_pairs(
        ("bahdanau-attention", "BLEU, attention, greedy"), ("bahdanau-plain", "BLEU, plain, greedy")
    )
    if pairs:
        lines.append(spread_bullet(pairs))
    return "\n".join(lines) + "\n"


def spread_bullet(pairs: Sequence[tuple[float, float]]) -> str:
    """A bullet: the two models' test BLEU over the recorded trainings, and their order.

    Args:
        pairs: (attention, plain) greedy test BLEU in each recorded training (other CPU
            arithmetic, other seeds: `attention_book.experiments.spread`).

    Returns:
        One Markdown bullet.
    """
    attention, plain = [a for a, _ in pairs], [p for _, p in pairs]
    gaps = [a - p for a, p in pairs]
    order = (
        f"the attention model ahead in every one, by {min(gaps):.1f} to {max(gaps):.1f} points"
        if min(gaps) > 0
        else f"the attention model ahead in {sum(g > 0 for g in gaps)} of them only"
    )
    return (
        f"- One training is one draw. Over the {len(pairs)} recorded trainings of both models "
        "(other CPU arithmetic, other seeds), the attention model's test BLEU ranged from "
        f"{min(attention):.1f} to {max(attention):.1f} and the plain model's from "
        f"{min(plain):.1f} to {max(plain):.1f}: {order}."
    )


def epoch_time_verdict(cpu_seconds: dict[str, float]) -> str:
    """A bullet comparing the two trainings' CPU time, worded from their ratio.

    Args:
        cpu_seconds: CPU seconds of each model's training ("plain", "attention"): the work
            of the process, which a shared machine's load distorts far less than wall time.

    Returns:
        One Markdown bullet.
    """
    ratio = cpu_seconds["attention"] / cpu_seconds["plain"]
    if ratio >= 1.1:
        return (
            f"- Same epochs, not the same work: training the attention model took {ratio:.1f} "
            "times the CPU time of the plain model. Its decoder runs one step at a time, "
            "attending at each, where the plain decoder's GRU runs over the whole target in "
            "one call."
        )
    if ratio <= 1 / 1.1:
        return (
            f"- Same epochs: training the attention model took {ratio:.1f} times the CPU time "
            "of the plain model, less although its decoder runs one step at a time."
        )
    return (
        f"- Same epochs, about the same work: training the attention model took {ratio:.2f} "
        "times the CPU time of the plain model."
    )


def _digit_tokens(sentence: str) -> list[str]:
    """The tokens of a sentence that contain a digit: years, times, written quantities."""
    return [token for token in sentence.split() if any(c.isdigit() for c in token)]


def bahdanau_short_source_verdict(plain: float, attention: float, margin: float = 10.0) -> str:
    """One sentence: whether the plain model is already weak on the shortest sources.

    Args:
        plain: BLEU of the model without attention on the shortest sources.
        attention: BLEU of the attention model on the same sources.
        margin: How many BLEU points behind make the plain model "weak" there.

    Returns:
        The verdict with the gap it rests on.
    """
    gap = attention - plain
    if gap > margin:
        return (
            f"The model without attention is thus already weak there, {gap:.1f} BLEU points behind."
        )
    side = "behind" if gap >= 0 else "ahead"
    return (
        f"The model without attention is thus within {margin:g} BLEU points of the attention "
        f"model there ({abs(gap):.1f} {side})."
    )


def bahdanau_baseline_caveat() -> str:
    """Markdown bullets: how weak the plain model is on short sources, and what copying buys."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    first = bucket_label(*LENGTH_BUCKETS[0])
    bleu = {
        name: bahdanau_bleu_by_bucket(result["greedy"][name], references, lengths)[0][0]
        for name in ("plain", "attention")
    }
    exact = bahdanau_exact_match_by_bucket(result["greedy"]["plain"], references, lengths)[0]
    with_digits = [i for i, reference in enumerate(references) if _digit_tokens(reference)]
    copied = {
        name: sum(
            _digit_tokens(result["greedy"][name][i]) == _digit_tokens(references[i])
            for i in with_digits
        )
        / len(with_digits)
        for name in ("plain", "attention")
    }
    size = result["num_hiddens"]["plain"]
    return (
        f"- On the shortest sources ({first} tokens), which one vector of {size} numbers "
        f"should be able to hold, the model without attention reaches a BLEU of "
        f"{bleu['plain']:.1f} and translates {exact:.1f}% of the sentences exactly right; the "
        f"attention model reaches {bleu['attention']:.1f}. "
        f"{bahdanau_short_source_verdict(bleu['plain'], bleu['attention'])}\n"
        f"- Of the {len(with_digits):,} test sentences whose reference contains digits (years, "
        "times, quantities written in figures), the model without attention writes exactly "
        f"the reference's digit tokens, in order, in {100 * copied['plain']:.1f}% of them; the "
        f"attention model in {100 * copied['attention']:.1f}%.\n"
    )


def bahdanau_alignment_notes() -> str:
    """A sentence on the figure's alignment: how peaked the rows are, and where the path turns."""
    source_tokens, target_tokens, weights = _alignment_translation()
    largest, positions = weights.max(dim=-1)
    peaked = int((largest > 0.5).sum())
    text = (
        f"In the figure, {peaked} of the {len(target_tokens)} generated tokens put more than "
        "half of their weight on a single source token."
    )
    steps = positions.tolist()
    back = next((k for k in range(1, len(steps)) if steps[k] < steps[k - 1]), None)
    if back is None:
        return text + " The path of the largest weights only moves forward: no reordering."
    return text + (
        f" The path of the largest weights is not monotone: «{target_tokens[back]}» looks at "
        f"«{source_tokens[steps[back]]}» (source token {steps[back] + 1}) right after "
        f"«{target_tokens[back - 1]}» looked at «{source_tokens[steps[back - 1]]}» (source "
        f"token {steps[back - 1] + 1}): the translation puts these words in another order "
        "than the source."
    )


def bahdanau_exercise_long_bleu() -> str:
    """One line: what the exercise on sources of 30 tokens or more printed at build time."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    chosen = [i for i, n in enumerate(lengths) if n >= 30]
    printed = []
    for name in ("plain", "attention"):
        hypotheses = [result["greedy"][name][i] for i in chosen]
        score = token_bleu(hypotheses, [references[i] for i in chosen])
        printed.append(f"`{name}: BLEU {score:.1f} on {len(chosen)} sentences`")
    return "When this page was built, the block printed " + " and ".join(printed) + "."


def bahdanau_exercise_length_penalty() -> str:
    """One line: what the exercise on beam search's length penalty printed at build time."""
    _, model, data = bahdanau_trained_models()
    pairs = sorted(data.test_pairs, key=lambda pair: -len(tokenize(pair[0])))[:5]
    src, src_valid_len = data.encode_sources([source for source, _ in pairs])
    bos, eos = data.tgt_vocab.bos, data.tgt_vocab.eos
    printed = []
    for penalty in (0.0, 1.0):
        results = beam_search(
            model, src, src_valid_len, bos, eos, max_len=60, beam_size=4, length_penalty=penalty
        )
        printed.append(f"`length_penalty {penalty}: lengths {[len(r.tokens) for r in results]}`")
    printed.append(f"`reference lengths: {[len(tokenize(target)) for _, target in pairs]}`")
    return "When this page was built, the block printed " + ", ".join(printed) + "."


#: The figures and build-time tables of this module, in the order of the chapters.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    bahdanau_diagram,
    bahdanau_summary,
    bahdanau_bleu_by_length,
    bahdanau_findings,
    bahdanau_baseline_caveat,
    bahdanau_samples_table,
    bahdanau_alignment,
    bahdanau_alignment_notes,
    bahdanau_decoding_table,
    bahdanau_exercise_long_bleu,
    bahdanau_exercise_length_penalty,
)
