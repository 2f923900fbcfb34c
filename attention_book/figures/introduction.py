"""Figures and build-time sentences of the Introduction.

The Introduction's evidence is the Bahdanau chapter's experiment (two GRU translators, with and
without attention, `attention_book.experiments.bahdanau`): these functions draw its encoder-
decoder bottleneck and word what its cached run shows about exact translations by length. The
drawing helpers and the length buckets' labels are the Bahdanau chapter's figures'
(`attention_book.figures.bahdanau`).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.experiments.bahdanau import (
    LENGTH_BUCKETS,
    bahdanau_bleu_by_bucket,
    bahdanau_exact_match_by_bucket,
    bahdanau_experiment,
    bahdanau_test_references,
)
from attention_book.figures.bahdanau import (
    bucket_label,
    diagram_arrow,
    diagram_axes,
    diagram_box,
    length_trend,
)
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "introduction_bottleneck_diagram",
    "introduction_evidence_facts",
    "introduction_exact_match_by_length",
    "introduction_verdict",
]


def introduction_bottleneck_diagram() -> Figure:
    """Diagram of an encoder-decoder whose decoder sees only one fixed-length vector."""
    fig, ax = diagram_axes((7.6, 2.3), (-0.6, 10.0), (-0.7, 2.4))
    for t, word in enumerate(["we", "sold", "six", "books", "<eos>"]):
        x = 0.9 * t
        ax.text(x, 0.0, word, ha="center", va="center", fontsize=9)
        diagram_arrow(ax, (x, 0.2), (x, 0.65))
        diagram_box(ax, x, 0.95, f"$h_{t + 1}$", "#cfe2f3", width=0.7)
        if t:
            diagram_arrow(ax, (x - 0.55, 0.95), (x - 0.35, 0.95))
    diagram_box(ax, 4.75, 0.95, "$c = h_5$", "#f9e79f", width=0.9)
    diagram_arrow(ax, (3.95, 0.95), (4.3, 0.95))
    for t, word in enumerate(["nous", "avons", "vendu", "six", "livres"]):
        x = 5.9 + 0.85 * t
        diagram_box(ax, x, 0.95, f"$s_{t + 1}$", "#d5f5e3", width=0.65)
        diagram_arrow(ax, (x, 1.25), (x, 1.7))
        ax.text(x, 1.95, word, ha="center", va="center", fontsize=9)
        if t:
            diagram_arrow(ax, (x - 0.52, 0.95), (x - 0.33, 0.95))
        diagram_arrow(ax, (4.75, 0.7), (x - 0.1, 0.7), color="#b7950b", width=0.8, rad=0.25)
    diagram_arrow(ax, (5.2, 0.95), (5.57, 0.95))
    ax.text(1.8, -0.6, "encoder", ha="center", fontsize=9)
    ax.text(7.6, -0.6, "decoder: every step sees the same $c$", ha="center", fontsize=9)
    return fig


def introduction_exact_match_by_length() -> Figure:
    """Share of test sentences translated exactly right, against source length."""
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    fig = new_figure((6.0, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, label, style in (
            ("attention", "with Bahdanau attention", "o-"),
            ("plain", "without attention (fixed context)", "s--"),
        ):
            shares = bahdanau_exact_match_by_bucket(result["greedy"][name], references, lengths)
            ax.plot(range(len(shares)), shares, style, label=label)
        ax.set_xticks(range(len(LENGTH_BUCKETS)), [bucket_label(*b) for b in LENGTH_BUCKETS])
        ax.set_xlabel("source length in tokens")
        ax.set_ylabel("test sentences exactly right (%)")
        ax.set_ylim(0, 100)
        ax.legend(loc="center left")
        fig.tight_layout()
    return fig


def introduction_verdict(
    bleu: dict[str, list[float]], exact: dict[str, list[float]]
) -> dict[str, str]:
    """The Introduction's words on the experiment that depend on its numbers.

    Args:
        bleu: Per model (``"plain"``, ``"attention"``), test BLEU in each bucket of
            `LENGTH_BUCKETS`.
        exact: The same for the percentage of test sentences translated exactly right.

    Returns:
        ``"exact_trend_plain"`` and ``"exact_trend_attention"``: how each model's share of
        exactly right translations moves with the source length (`length_trend`);
        ``"plain_short"``: the opening of the sentence on the model without attention on the
        shortest sources (weak where it translates fewer than half of them exactly right);
        ``"helps"``: how much attention helps, from the gap between the models in every
        bucket; ``"decline"``: whether the plain model's BLEU falls with length, and what the
        experiment cannot tell about that decline.
    """
    words = {
        f"exact_trend_{name}": length_trend(exact[name][0], exact[name][-1])
        for name in ("plain", "attention")
    }
    if exact["plain"][0] < 50:
        words["plain_short"] = (
            "And the model without attention is already weak on the shortest sentences, where "
            "a fixed context should suffice:"
        )
    else:
        words["plain_short"] = (
            "On the shortest sentences, where a fixed context should suffice, the model "
            "without attention does well:"
        )
    gaps = [a - p for a, p in zip(bleu["attention"], bleu["plain"], strict=True)]
    ahead = sum(gap > 0 for gap in gaps)
    if ahead == len(gaps):
        size = "a great deal" if min(gaps) >= 10 else "somewhat"
        words["helps"] = (
            f"{size} on this corpus: the attention model is ahead by {min(gaps):.1f} to "
            f"{max(gaps):.1f} BLEU points at every length"
        )
    else:
        words["helps"] = f"on this corpus in {ahead} of the {len(gaps)} length buckets only"
    if length_trend(bleu["plain"][0], bleu["plain"][-1]) == "falls":
        words["decline"] = (
            "it does not by itself show that the fixed context is what makes the plain model "
            "decline with length."
        )
    else:
        words["decline"] = "the plain model does not decline with length here."
    return words


def introduction_evidence_facts() -> dict[str, str]:
    """The numbers the Introduction's evidence cites, and `introduction_verdict`'s words.

    Returns:
        ``"parameters_plain"``, ``"parameters_attention"`` (with thousands separators); the
        shortest and the longest length bucket (``"first_bucket"``, ``"last_bucket"``); per
        model, test BLEU and the share of exactly right translations on the shortest sources
        (``"bleu_first_plain"``, ``"exact_first_plain"``, ...), that share on the longest and
        its largest in any bucket (``"exact_last_plain"``, ``"exact_max_plain"``, ...); and
        `introduction_verdict`'s words.
    """
    result = bahdanau_experiment()
    references, lengths = bahdanau_test_references()
    names = ("plain", "attention")
    greedy = result["greedy"]
    bleu = {n: bahdanau_bleu_by_bucket(greedy[n], references, lengths)[0] for n in names}
    exact = {n: bahdanau_exact_match_by_bucket(greedy[n], references, lengths) for n in names}
    facts = {
        "first_bucket": bucket_label(*LENGTH_BUCKETS[0]),
        "last_bucket": bucket_label(*LENGTH_BUCKETS[-1]),
    }
    for name in names:
        facts[f"parameters_{name}"] = f"{result['num_parameters'][name]:,}"
        facts[f"bleu_first_{name}"] = f"{bleu[name][0]:.1f}"
        facts[f"exact_first_{name}"] = f"{exact[name][0]:.1f}"
        facts[f"exact_last_{name}"] = f"{exact[name][-1]:.1f}"
        facts[f"exact_max_{name}"] = f"{max(exact[name]):.1f}"
    return facts | introduction_verdict(bleu, exact)


FIGURES = (
    introduction_bottleneck_diagram,
    introduction_exact_match_by_length,
    introduction_evidence_facts,
)
