"""Figures and build-time tables of the Bahdanau chapter.

Drawing only: the experiment they show (the two models, their training, the cached result
and the BLEU measurements) lives in `attention_book.experiments.bahdanau`, imported here. The
Introduction's figures of the same experiment are in `attention_book.figures.introduction`.
"""

from __future__ import annotations

import functools
import statistics
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
from attention_book.experiments.spread import rounding_values, seed_comparison, seed_pairs
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure, show_heatmaps
from attention_book.timing import apart, interleaved_seconds, torch_threads

__all__ = [
    "DECODING_REPEATS",
    "DECODING_TIMED",
    "FIGURES",
    "bahdanau_alignment",
    "bahdanau_bleu_by_length",
    "bahdanau_decoding_table",
    "bahdanau_decoding_times",
    "bahdanau_diagram",
    "bahdanau_exercise_length_penalty",
    "bahdanau_exercise_long_bleu",
    "bahdanau_facts",
    "bahdanau_samples_table",
    "bahdanau_summary",
    "bahdanau_verdict",
    "beam_time_words",
    "bucket_label",
    "diagram_arrow",
    "diagram_axes",
    "diagram_box",
    "length_trend",
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
    rows = []
    for name, label in (("plain", "without attention"), ("attention", "with attention")):
        row = [label]
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
    return markdown_table(header, rows)


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


def bahdanau_verdict(
    *,
    bleu_first: dict[str, float],
    bleu_last: dict[str, float],
    cpu_seconds: dict[str, float],
    seeds: Sequence[tuple[float, float]],
    alignment: Sequence[int],
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    margin: float = 10.0,
) -> dict[str, str]:
    """The chapter's words that depend on its numbers; the rest of each sentence is the page's.

    Args:
        bleu_first: Test BLEU of "plain" and "attention" on the shortest sources (the first
            length bucket).
        bleu_last: The same on the longest sources (the last bucket).
        cpu_seconds: CPU seconds of each model's training ("plain", "attention"): the work
            of the process, which a shared machine's load distorts far less than wall time.
        seeds: (attention, plain) greedy test BLEU in each recorded independent seed
            (`attention_book.experiments.spread.seed_pairs`).
        alignment: For each token the attention model generated in the alignment figure, the
            source position it gives its largest weight.
        source_tokens: The figure's source tokens.
        target_tokens: The figure's generated tokens.
        margin: How many BLEU points behind make the plain model "weak" on the shortest
            sources.

    Returns:
        ``"trend_plain"`` and ``"trend_attention"``: how each model's BLEU moves from the
        shortest sources to the longest (`length_trend`); ``"epoch_time"``: a sentence on the
        two trainings' CPU time, worded from their ratio; ``"seed_order"``: the two
        models' order over the seeds, in the words of `seed_comparison`; ``"short_source"``:
        whether the plain model is already weak on the shortest sources;
        ``"alignment_path"``: whether the path of the largest weights turns back, and where.

    Raises:
        ValueError: If `seeds` is empty.
    """
    if not seeds:
        raise ValueError("seeds must hold the recorded seeds' BLEU, got none")
    words = {
        f"trend_{name}": length_trend(bleu_first[name], bleu_last[name])
        for name in ("plain", "attention")
    }
    ratio = cpu_seconds["attention"] / cpu_seconds["plain"]
    if ratio >= 1.1:
        words["epoch_time"] = (
            f"Same epochs, not the same work: training the attention model took {ratio:.1f} "
            "times the CPU time of the plain model. Its decoder runs one step at a time, "
            "attending at each, where the plain decoder's GRU runs over the whole target in "
            "one call."
        )
    elif ratio <= 1 / 1.1:
        words["epoch_time"] = (
            f"Same epochs: training the attention model took {ratio:.1f} times the CPU time "
            "of the plain model, less although its decoder runs one step at a time."
        )
    else:
        words["epoch_time"] = (
            f"Same epochs, about the same work: training the attention model took {ratio:.2f} "
            "times the CPU time of the plain model."
        )
    gaps = [a - p for a, p in seeds]
    way, rule = seed_comparison(seeds)
    if way == 0:
        words["seed_order"] = f"{rule} ({sum(g > 0 for g in gaps)} of {len(gaps)} favour attention)"
    else:
        side = "ahead" if way > 0 else "behind"
        spread = f"{min(gaps):.1f} to {max(gaps):.1f} points"
        words["seed_order"] = (
            f"the attention model is {side} {rule}, by {spread}"
            if rule == "in every seed"
            else f"the attention model is {side} {rule} (the gap ranged from {spread})"
        )
    gap = bleu_first["attention"] - bleu_first["plain"]
    if gap > margin:
        words["short_source"] = f"already weak there, {gap:.1f} BLEU points behind"
    else:
        side = "behind" if gap >= 0 else "ahead"
        words["short_source"] = (
            f"within {margin:g} BLEU points of the attention model there ({abs(gap):.1f} {side})"
        )
    back = next((k for k in range(1, len(alignment)) if alignment[k] < alignment[k - 1]), None)
    if back is None:
        words["alignment_path"] = "only moves forward: no reordering."
    else:
        words["alignment_path"] = (
            f"is not monotone: «{target_tokens[back]}» looks at "
            f"«{source_tokens[alignment[back]]}» (source token {alignment[back] + 1}) right after "
            f"«{target_tokens[back - 1]}» looked at «{source_tokens[alignment[back - 1]]}» "
            f"(source token {alignment[back - 1] + 1}): the translation puts these words in "
            "another order than the source."
        )
    return words


def _digit_tokens(sentence: str) -> list[str]:
    """The tokens of a sentence that contain a digit: years, times, written quantities."""
    return [token for token in sentence.split() if any(c.isdigit() for c in token)]


#: How many test sentences the decoding times are measured on ...
DECODING_TIMED = 64
#: ... and how many runs of each way of decoding.
DECODING_REPEATS = 5


@functools.cache
def bahdanau_decoding_times() -> dict[str, list[float]]:
    """CPU seconds to decode the first test sentences with the attention model, three ways.

    Greedy decoding of the sentences as one batch (as the chapter's BLEU is computed), greedy
    decoding one sentence at a time, and beam search (which decodes one sentence at a time):
    timed in turns after one untimed run of each, on one thread (`interleaved_seconds`). The
    trained model is read from the store; the times are this machine's, measured once per
    process.

    Returns:
        ``{"greedy, batched": [...], "greedy, one at a time": [...], "beam": [...]}``, the
        seconds of each run.
    """
    _, attention, data = bahdanau_trained_models()
    sources = [source for source, _ in data.test_pairs[:DECODING_TIMED]]
    beam = BAHDANAU_CONFIG.beam_size
    ways = {
        "greedy, batched": lambda: bahdanau_translate(attention, data, sources),
        "greedy, one at a time": lambda: bahdanau_translate(attention, data, sources, batch_size=1),
        "beam": lambda: bahdanau_translate(attention, data, sources, beam),
    }
    with torch_threads(1), torch.no_grad():
        return interleaved_seconds(ways, DECODING_REPEATS)


def _ratio(slow: Sequence[float], fast: Sequence[float]) -> tuple[float, float, float]:
    """The ratio of two timings' medians, and the least and the most any two runs give."""
    return (statistics.median(slow) / statistics.median(fast), min(slow) / max(fast),
            max(slow) / min(fast))  # fmt: skip


def beam_time_words(
    beam: Sequence[float],
    greedy: Sequence[float],
    greedy_way: str = "greedy decoding one sentence at a time",
) -> str:
    """How beam search's time compares with a way of greedy decoding, in words.

    By the book's rule for timings (`attention_book.timing.apart`): "times as long" only when
    every run of one is slower than every run of the other; "within noise" otherwise.
    """
    ratio, low, high = _ratio(beam, greedy)
    if apart(beam, greedy) == 1:
        return f"took {ratio:.1f} times as long as {greedy_way} ({low:.1f} to {high:.1f})"
    way = "faster than" if apart(beam, greedy) == -1 else "within noise of"
    return (
        f"was {way} {greedy_way} (the medians' ratio is "
        f"{ratio:.1f}; any two runs give {low:.1f} to {high:.1f})"
    )


def bahdanau_facts() -> dict[str, str]:
    """The numbers the chapter's sentences cite, and `bahdanau_verdict`'s words on them.

    Read from the cached run: BLEU by source length, exact matches and copied digits on the
    test split, the trainings' CPU time, the decoding times, the alignment figure's weights,
    and the recorded trainings of both models.
    """
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    scores = {
        name: bahdanau_bleu_by_bucket(result["greedy"][name], references, lengths)[0]
        for name in ("plain", "attention")
    }
    gaps = [a - p for a, p in zip(scores["attention"], scores["plain"], strict=True)]
    seeds = seed_pairs(
        ("bahdanau-attention", "BLEU, attention, greedy"), ("bahdanau-plain", "BLEU, plain, greedy")
    )
    rounding = [
        rounding_values(run, f"BLEU, {name}, greedy")
        for run, name in (("bahdanau-attention", "attention"), ("bahdanau-plain", "plain"))
    ]
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
    source_tokens, target_tokens, weights = _alignment_translation()
    largest, positions = weights.max(dim=-1)
    beam_change = {
        name: token_bleu(result["beam"][name], references)
        - token_bleu(result["greedy"][name], references)
        for name in ("plain", "attention")
    }
    times = bahdanau_decoding_times()
    facts = {
        "first_bucket": bucket_label(*LENGTH_BUCKETS[0]),
        "last_bucket": bucket_label(*LENGTH_BUCKETS[-1]),
        "buckets_ahead": str(sum(gap > 0 for gap in gaps)),
        "buckets": str(len(gaps)),
        "gap_first": f"{gaps[0]:.1f}",
        "gap_last": f"{gaps[-1]:.1f}",
        "seeds": str(len(seeds)),
        "rounding_arithmetics": str(min(len(values) for values in rounding)),
        "rounding_shift": f"{max(max(v.values()) - min(v.values()) for v in rounding):.1f}",
        "num_hiddens_plain": str(result["num_hiddens"]["plain"]),
        "exact_plain_first": f"{exact:.1f}",
        "digit_sentences": f"{len(with_digits):,}",
        "copied_plain": f"{100 * copied['plain']:.1f}",
        "copied_attention": f"{100 * copied['attention']:.1f}",
        "alignment_peaked": str(int((largest > 0.5).sum())),
        "alignment_generated": str(len(target_tokens)),
        "beam_size": str(BAHDANAU_CONFIG.beam_size),
        "beam_change_plain": f"{beam_change['plain']:+.1f}",
        "beam_change_attention": f"{beam_change['attention']:+.1f}",
        "timed_sentences": str(DECODING_TIMED),
        "timed_runs": str(DECODING_REPEATS),
        "beam_vs_batched": beam_time_words(
            times["beam"], times["greedy, batched"], "greedy decoding of the sentences as one batch"
        ),
        "beam_vs_single": beam_time_words(times["beam"], times["greedy, one at a time"]),
    }
    for column, name in enumerate(("attention", "plain")):  # the columns of `seeds`
        facts[f"bleu_first_{name}"] = f"{scores[name][0]:.1f}"
        facts[f"bleu_last_{name}"] = f"{scores[name][-1]:.1f}"
        values = [pair[column] for pair in seeds]
        facts[f"seed_mean_{name}"] = f"{sum(values) / len(values):.1f}"
        facts[f"seed_low_{name}"] = f"{min(values):.1f}"
        facts[f"seed_high_{name}"] = f"{max(values):.1f}"
    return facts | bahdanau_verdict(
        bleu_first={name: scores[name][0] for name in scores},
        bleu_last={name: scores[name][-1] for name in scores},
        cpu_seconds=result["train_cpu_seconds"],
        seeds=seeds,
        alignment=positions.tolist(),
        source_tokens=source_tokens,
        target_tokens=target_tokens,
    )


def bahdanau_exercise_long_bleu() -> dict[str, str]:
    """What the exercise on sources of 30 tokens or more printed at build time."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    chosen = [i for i, n in enumerate(lengths) if n >= 30]
    printed = {"sentences": str(len(chosen))}
    for name in ("plain", "attention"):
        hypotheses = [result["greedy"][name][i] for i in chosen]
        printed[name] = f"{token_bleu(hypotheses, [references[i] for i in chosen]):.1f}"
    return printed


def bahdanau_exercise_length_penalty() -> dict[str, str]:
    """What the exercise on beam search's length penalty printed at build time."""
    _, model, data = bahdanau_trained_models()
    pairs = sorted(data.test_pairs, key=lambda pair: -len(tokenize(pair[0])))[:5]
    src, src_valid_len = data.encode_sources([source for source, _ in pairs])
    bos, eos = data.tgt_vocab.bos, data.tgt_vocab.eos
    printed = {}
    for key, penalty in (("lengths_without", 0.0), ("lengths_with", 1.0)):
        results = beam_search(
            model, src, src_valid_len, bos, eos, max_len=60, beam_size=4, length_penalty=penalty
        )
        printed[key] = str([len(r.tokens) for r in results])
    printed["reference_lengths"] = str([len(tokenize(target)) for _, target in pairs])
    return printed


#: The figures and build-time tables of this module, in the order of the chapters.
FIGURES = (
    bahdanau_diagram,
    bahdanau_summary,
    bahdanau_bleu_by_length,
    bahdanau_facts,
    bahdanau_samples_table,
    bahdanau_alignment,
    bahdanau_decoding_table,
    bahdanau_exercise_long_bleu,
    bahdanau_exercise_length_penalty,
)
