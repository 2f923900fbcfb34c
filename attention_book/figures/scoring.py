"""Figures and build-time tables of the chapter "Attention scoring functions".

Drawing only: the scaling measurement they show lives in `attention_book.experiments.scoring`.
"""

from __future__ import annotations

import math
from functools import cache

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.attention import AdditiveAttention, DotProductAttention
from attention_book.experiments.scoring import (
    DIMS,
    NUM_KEYS,
    NUM_TRIALS,
    scoring_scaling_measurements,
)
from attention_book.masking import masked_softmax
from attention_book.plotting import BOOK_STYLE, new_figure, show_heatmaps

__all__ = [
    "FIGURES",
    "scoring_both_heatmaps",
    "scoring_gradient_at_qk",
    "scoring_gradient_facts",
    "scoring_gradient_verdict",
    "scoring_gradient_vs_d",
    "scoring_gradient_words",
    "scoring_masked_softmax",
    "scoring_sample_sizes",
    "scoring_saturation_heatmaps",
    "scoring_saturation_notes",
    "scoring_saturation_words",
    "scoring_scaling_notes",
    "scoring_scaling_table",
    "scoring_variance_vs_d",
]


def scoring_masked_softmax() -> Figure:
    """Masked softmax of the same random scores with 1-D and 2-D valid lengths.

    One sequence of six queries over eight keys. With 1-D valid lengths every query of the
    sequence sees the same first five keys. With 2-D valid lengths each query has its own
    count; the query with count 0 gets a row of zeros.
    """
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 6, 8, generator=generator)  # (batch, num_queries, num_keys)
    per_sequence = masked_softmax(scores, valid_lens=torch.tensor([5]))
    per_query = masked_softmax(scores, valid_lens=torch.tensor([[1, 3, 0, 8, 5, 2]]))
    weights = torch.stack([per_sequence[0], per_query[0]])[None]
    # (1, 2, num_queries, num_keys)
    return show_heatmaps(
        weights,
        xlabel="Keys",
        ylabel="Queries",
        titles=["valid_lens = [5]", "valid_lens = [[1, 3, 0, 8, 5, 2]]"],
        figsize=(2.9, 2.4),
        yticklabels=["q0", "q1", "q2", "q3", "q4", "q5"],
    )


@cache
def _same_inputs() -> tuple[torch.Tensor, ...]:
    """Queries, keys, values and valid lengths shared by the two scoring functions' heatmap."""
    generator = torch.Generator().manual_seed(1)
    queries = torch.randn(2, 6, 8, generator=generator)  # (batch, num_queries, d)
    keys = torch.randn(2, 10, 8, generator=generator)  # (batch, num_keys, d)
    values = torch.randn(2, 10, 4, generator=generator)  # (batch, num_keys, value_dim)
    valid_lens = torch.tensor([4, 10])
    return queries, keys, values, valid_lens


def scoring_both_heatmaps() -> Figure:
    """Additive and scaled dot-product attention weights on the same inputs and valid lengths.

    The additive module has freshly initialized (seeded) projections; the dot-product module has
    no parameters. Both hide the same keys, so the same columns are empty; inside the valid
    keys, the two functions prefer different keys because they measure similarity differently.
    """
    queries, keys, values, valid_lens = _same_inputs()
    with torch.random.fork_rng(devices=[]):  # seed the initialization, leave global state alone
        torch.manual_seed(0)
        additive = AdditiveAttention(key_size=8, query_size=8, num_hiddens=16, dropout=0.0)
    dot_product = DotProductAttention(dropout=0.0)
    with torch.no_grad():
        additive(queries, keys, values, valid_lens)
        dot_product(queries, keys, values, valid_lens)
    # (num_rows=batch, num_cols=2, num_queries, num_keys)
    weights = torch.stack([additive.attention_weights, dot_product.attention_weights], dim=1)
    return show_heatmaps(
        weights,
        xlabel="Keys",
        ylabel="Queries",
        titles=["additive (untrained)", "scaled dot product"],
        figsize=(2.8, 1.9),
        xticklabels=[str(j) for j in range(keys.shape[1])],
    )


def scoring_sample_sizes() -> str:
    """The scaling experiment's sample, in words (one line, to sit inside a sentence)."""
    pairs = NUM_TRIALS * NUM_KEYS
    queries = f"{NUM_TRIALS:,} queries that each meet {NUM_KEYS} keys"
    return f"{queries}, {pairs:,} query-key pairs per size d"


def scoring_variance_vs_d() -> Figure:
    """Measured variance of q.k and of q.k / sqrt(d) against d (unit-variance components)."""
    results = scoring_scaling_measurements()
    fig = new_figure((5.0, 3.3))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        ax.plot(DIMS, DIMS, ":", color="#777777", label="d (the theory for q.k)")
        ax.plot(DIMS, results["variance_unscaled"], "o-", color="#d62728", label="q.k")
        ax.plot(DIMS, results["variance_scaled"], "s-", color="#1f77b4", label="q.k / sqrt(d)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("d (size of queries and keys)")
        ax.set_ylabel("variance of the score")
        ax.set_title("Measured score variance")
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def scoring_gradient_vs_d() -> Figure:
    """Largest softmax weight and gradient norm against d, with and without 1/sqrt(d)."""
    results = scoring_scaling_measurements()
    fig = new_figure((9.0, 3.3))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2)
        for how, style, color in (("unscaled", "o-", "#d62728"), ("scaled", "s-", "#1f77b4")):
            label = "q.k" if how == "unscaled" else "q.k / sqrt(d)"
            left.plot(DIMS, results[f"largest_weight_{how}"], style, color=color, label=label)
            right.plot(DIMS, results[f"gradient_{how}"], style, color=color, label=label)
        left.axhline(1 / NUM_KEYS, color="#777777", linestyle=":", label="uniform (1/32)")
        left.set_ylabel("mean largest weight")
        left.set_title(f"Softmax saturation ({NUM_KEYS} keys)")
        left.set_ylim(0, 1.05)
        right.set_yscale("log")
        right.set_ylabel("median gradient norm")
        right.set_title("Gradient reaching the scores")
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("d (size of queries and keys)")
            ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def scoring_gradient_at_qk() -> Figure:
    """Median gradient norm at the query and at a key against d, with and without 1/sqrt(d).

    The same draws as `scoring_gradient_vs_d`, one step further back: the gradient that the
    scores pass on to the query that produced them (left) and to each key (right, the median
    over every key of every trial). A median of exactly 0 (float32 underflow) has no place on a
    log axis; the panel says where it happens.
    """
    results = scoring_scaling_measurements()
    fig = new_figure((9.0, 3.3))
    with plt.rc_context(BOOK_STYLE):
        axes = fig.subplots(1, 2)
        for ax, what, title in zip(
            axes, ("query", "key"), ("Gradient reaching the query", "Gradient reaching a key"),
            strict=True,
        ):  # fmt: skip
            for how, style, color in (("unscaled", "o-", "#d62728"), ("scaled", "s-", "#1f77b4")):
                label = "q.k" if how == "unscaled" else "q.k / sqrt(d)"
                values = results[f"gradient_{what}_{how}"]
                shown = [(d, v) for d, v in zip(DIMS, values, strict=True) if v > 0]
                ax.plot(*zip(*shown, strict=True), style, color=color, label=label)
                zeros = [d for d, v in zip(DIMS, values, strict=True) if v == 0]
                if zeros:
                    note = f"{label}: exactly 0\nfrom d = {zeros[0]}"
                    ax.text(0.97, 0.5, note, transform=ax.transAxes, ha="right", fontsize=7.5,
                            color=color)  # fmt: skip
            ax.axvline(64, color="#777777", linestyle=":", linewidth=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("d (size of queries and keys)")
            ax.set_ylabel(f"median gradient norm ({what})")
            ax.set_title(title)
            ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
    return fig


def _from(dims: tuple[int, ...], holds: list[bool]) -> int | None:
    """The first d from which `holds` is true at every larger d too, or None."""
    for i in range(len(dims)):
        if all(holds[i:]):
            return dims[i]
    return None


def scoring_gradient_verdict(
    results: dict[str, list[float]], dims: tuple[int, ...] = DIMS, at: int = 64
) -> dict[str, str]:
    """The words of the chapter that depend on the gradients at the queries and the keys.

    Args:
        results: The measurements, as `scoring_scaling_measurements` returns them (at least
            "gradient_query_<how>" and "gradient_key_<how>", unscaled and scaled).
        dims: The sizes d the values belong to, in order; they include `at`.
        at: The size d the chapter compares at.

    Returns:
        "query_comparison": how the unscaled query gradient at `at` compares with the scaled
        one ("3.1 times larger than", "2.0 times smaller than" or "about as large as", within
        25%); "query_below": from which d on the unscaled query gradient stays below the scaled
        one; "key_comparison": the same comparison for the key gradient (in orders of
        magnitude from a factor of 100); "key_collapse": from which d on the unscaled key
        gradient stays 100 times below the scaled one; "order": which of the two loses its
        gradient at smaller d.
    """
    i = dims.index(at)

    def compare(ratio: float) -> str:  # ratio: unscaled / scaled
        if ratio >= 1.25:
            return f"{ratio:.1f} times larger than"
        if ratio > 0.8:
            return "about as large as"
        if ratio > 0.01:
            return f"{1 / ratio:.0f} times smaller than"
        return f"{-math.log10(ratio):.1f} orders of magnitude smaller than"

    def ratios(what: str) -> list[float]:
        unscaled, scaled = results[f"gradient_{what}_unscaled"], results[f"gradient_{what}_scaled"]
        return [u / s for u, s in zip(unscaled, scaled, strict=True)]

    query, key = ratios("query"), ratios("key")
    below = _from(dims, [r < 1 for r in query])
    collapse = _from(dims, [r < 0.01 for r in key])
    last = f"$d = {dims[-1]:,}$"
    return {
        "query_comparison": compare(query[i]),
        "query_below": (
            f"only from $d = {below:,}$ on" if below is not None else f"at no size up to {last}"
        ),
        "key_comparison": compare(key[i]) if key[i] > 0 else "far smaller than",
        "key_collapse": (
            f"from $d = {collapse:,}$ on" if collapse is not None else f"at no size up to {last}"
        ),
        "order": (
            "most keys stop learning at sizes where the queries still learn"
            if collapse is not None and (below is None or collapse < below)
            else "the queries lose their gradient no later than the keys"
        ),
    }


def scoring_gradient_facts() -> dict[str, str]:
    """The numbers the chapter cites on the gradients at queries and keys, and their words.

    Returns:
        "d" (the size compared at, 64), the median gradient norms there at the query and at
        a key, unscaled and scaled ("query_unscaled", "query_scaled", "key_unscaled",
        "key_scaled"), and the words of `scoring_gradient_verdict`.
    """
    results = scoring_scaling_measurements()
    at = 64
    i = DIMS.index(at)
    values = {"d": str(at)}
    for what in ("query", "key"):
        for how in ("unscaled", "scaled"):
            value = results[f"gradient_{what}_{how}"][i]
            values[f"{what}_{how}"] = f"{value:.2g}"
    return values | scoring_gradient_verdict(results, DIMS, at)


def scoring_scaling_table() -> str:
    """Markdown table of the scaling measurements at a few sizes d."""
    results = scoring_scaling_measurements()
    lines = [
        "| d | variance of q·k | variance of q·k/√d | largest weight, unscaled | "
        "largest weight, scaled | gradient norm, unscaled | gradient norm, scaled |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in (1, 16, 64, 256, 1024):
        i = DIMS.index(d)
        lines.append(
            f"| {d} | {results['variance_unscaled'][i]:.1f} | {results['variance_scaled'][i]:.2f} "
            f"| {results['largest_weight_unscaled'][i]:.2f} "
            f"| {results['largest_weight_scaled'][i]:.2f} "
            f"| {results['gradient_unscaled'][i]:.1e} | {results['gradient_scaled'][i]:.1e} |"
        )
    return "\n".join(lines)


def scoring_gradient_words(results: dict[str, list[float]], dims: tuple[int, ...] = DIMS) -> str:
    """Two sentences: how the largest weight and the gradient at the scores move with d.

    Args:
        results: The measurements, as `scoring_scaling_measurements` returns them (at least
            the largest weights and the gradients, unscaled and scaled, one value per d).
        dims: The sizes d the values belong to, in order; they include 16.

    Returns:
        Markdown: the unscaled numbers, then the scaled ones, each with the words they call
        for (a gradient more than ten times smaller is given in orders of magnitude; a
        measure that stays within 25% of itself "stays").
    """
    at_16 = dims.index(16)
    first, last = dims[0], dims[-1]

    def largest_weight(how: str) -> str:
        values = results[f"largest_weight_{how}"]
        low, high = min(values), max(values)
        if high <= 1.25 * low:
            return f"stays between {low:.2f} and {high:.2f}"
        if how == "unscaled" and values[-1] > values[0]:
            return (
                f"climbs from {values[0]:.2f} at $d = {first}$ to {values[-1]:.2f} at $d = {last}$"
            )
        return f"ranges from {low:.2f} to {high:.2f}"

    unscaled = results["gradient_unscaled"]
    drop = unscaled[at_16] / unscaled[-1]
    if drop >= 1:
        change = f"{drop:,.0f} times smaller than at $d = 16$"
        if drop >= 10:
            change += f" ({math.log10(drop):.1f} orders of magnitude)"
    else:
        change = f"{1 / drop:,.0f} times larger than at $d = 16$"
    scaled = results["gradient_scaled"]
    spread = max(abs(g / scaled[at_16] - 1) for g in scaled)
    if spread <= 0.25:
        steady = (
            f"stays within {100 * spread:.0f}% of its value at $d = 16$ at every size from "
            f"{first} to {last}"
        )
    else:
        steady = f"still moves by up to {100 * spread:.0f}% of its value at $d = 16$"
    return (
        f"Unscaled, the mean largest weight {largest_weight('unscaled')}, and the median "
        f"gradient at $d = {last}$ is {change}. Scaled, the mean largest weight "
        f"{largest_weight('scaled')}, and the median gradient {steady}."
    )


def scoring_scaling_notes() -> str:
    """The scaling measurement in words (`scoring_gradient_words` of the measured numbers)."""
    return scoring_gradient_words(scoring_scaling_measurements())


@cache
def _saturation_weights() -> torch.Tensor:
    """Softmax weights of eight queries over eight keys at d = 256, unscaled then scaled.

    Returns:
        The weights, of shape (2, num_queries, num_keys).
    """
    generator = torch.Generator().manual_seed(2)
    d = 256
    queries = torch.randn(8, d, generator=generator)  # (num_queries, d)
    keys = torch.randn(8, d, generator=generator)  # (num_keys, d)
    scores = queries @ keys.T  # (num_queries, num_keys)
    return torch.stack([torch.softmax(scores, -1), torch.softmax(scores / math.sqrt(d), -1)])


def scoring_saturation_words(weights: torch.Tensor) -> str:
    """One sentence: how many queries give most of their weight to a single key.

    It counts the rows whose largest weight is more than half, and more than 90%, unscaled
    and scaled.

    Args:
        weights: Unscaled and scaled softmax weights, of shape (2, num_queries, num_keys).

    Returns:
        The four counts in a sentence.
    """
    largest = weights.max(dim=-1).values  # (2, num_queries)
    (half, most), (half_scaled, most_scaled) = (
        (int((row > 0.5).sum()), int((row > 0.9).sum())) for row in largest
    )
    return (
        f"Unscaled, {half} of the {weights.shape[1]} queries give more than half of their "
        f"weight to a single key, and {most} more than 90%; scaled, {half_scaled} and "
        f"{most_scaled}."
    )


def scoring_saturation_notes() -> str:
    """What the saturation heatmaps show, counted (`scoring_saturation_words`)."""
    return scoring_saturation_words(_saturation_weights())


def scoring_saturation_heatmaps() -> Figure:
    """Weights of eight queries over eight keys at d = 256, without and with 1/sqrt(d)."""
    return show_heatmaps(
        _saturation_weights()[None],  # (1, 2, num_queries, num_keys)
        xlabel="Keys",
        ylabel="Queries",
        titles=["q·k (d = 256)", "q·k / √d"],
        figsize=(2.6, 2.6),
    )


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    scoring_masked_softmax,
    scoring_both_heatmaps,
    scoring_sample_sizes,
    scoring_variance_vs_d,
    scoring_gradient_vs_d,
    scoring_gradient_at_qk,
    scoring_gradient_facts,
    scoring_scaling_table,
    scoring_scaling_notes,
    scoring_saturation_heatmaps,
    scoring_saturation_notes,
)
