"""Figures and build-time tables of the chapter "Multi-head attention".

Drawing only: the models they show are trained in `attention_book.experiments.multihead`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.multihead import (
    MULTIHEAD_CONFIG,
    multihead_binding,
    multihead_experiment,
    multihead_neighbor_batch,
    multihead_trained_model,
)
from attention_book.plotting import BOOK_STYLE, new_figure, show_heatmaps

__all__ = [
    "FIGURES",
    "multihead_accuracy_table",
    "multihead_binding_facts",
    "multihead_binding_verdict",
    "multihead_head_heatmaps",
    "multihead_loss_curves",
]

COLORS = {1: "#d62728", 2: "#1f77b4", 4: "#2ca02c"}


def multihead_accuracy_table() -> str:
    """Markdown table: test accuracy on both answers for each number of heads and seed."""
    result = multihead_experiment()
    seeds = MULTIHEAD_CONFIG.seeds
    header = " | ".join(f"seed {s}: before / after" for s in seeds)
    lines = [
        f"| heads | head_dim | parameters | {header} | mean of both answers |",
        "| --- | --- | --- | " + "--- | " * len(seeds) + "--- |",
    ]
    for num_heads in MULTIHEAD_CONFIG.head_counts:
        runs = [r for r in result["runs"] if r["num_heads"] == num_heads]
        cells = [f"{r['accuracy_before']:.1%} / {r['accuracy_after']:.1%}" for r in runs]
        mean = sum(r["accuracy_before"] + r["accuracy_after"] for r in runs) / (2 * len(runs))
        head_dim = MULTIHEAD_CONFIG.num_hiddens // num_heads
        lines.append(
            f"| {num_heads} | {head_dim} | {runs[0]['num_parameters']:,} | "
            + " | ".join(cells)
            + f" | {mean:.1%} |"
        )
    chance = 1 / MULTIHEAD_CONFIG.vocab_size
    lines.append("")
    lines.append(
        f"*Test accuracy on {MULTIHEAD_CONFIG.test_size} fresh sequences (chance: "
        f"{chance:.1%}). Training took "
        f"{min(r['train_seconds'] for r in result['runs']):.0f} to "
        f"{max(r['train_seconds'] for r in result['runs']):.0f} seconds per model in this "
        "build.*"
    )
    return "\n".join(lines)


def multihead_binding_verdict(
    one_head: dict[str, list[float]], two_heads: dict[str, list[float]]
) -> dict[str, str]:
    """Values and a verdict for the prose: is the single head's failure one of binding?

    Args:
        one_head: `multihead_binding` of the one-head model (or the same shape).
        two_heads: The same for the two-head model.

    Returns:
        ``"weak"`` (``"before"`` or ``"after"``: the answer the one-head model reads worse),
        its ``"weak_top1"``, ``"weak_top2"``, ``"weak_mass"``, ``"weak_other"``;
        ``"strong_top1"``, the other answer's; ``"two_heads_top1"``, the two-head model's
        worse answer; all as percentages. ``"verdict"``: a sentence that says what they show.
    """
    weak = min((0, 1), key=lambda answer: one_head["top1"][answer])
    values = {key: one_head[key][weak] for key in ("top1", "top2", "neighbour_mass")}
    other = one_head["wrong_is_other"][weak]
    facts = {
        "weak": ("before", "after")[weak],
        "weak_top1": f"{values['top1']:.1%}",
        "weak_top2": f"{values['top2']:.1%}",
        "weak_mass": f"{values['neighbour_mass']:.1%}",
        "weak_other": f"{other:.1%}",
        "strong_top1": f"{one_head['top1'][1 - weak]:.1%}",
        "two_heads_top1": f"{min(two_heads['top1']):.1%}",
    }
    if values["top2"] < 0.95 or values["neighbour_mass"] < 0.8:
        facts["verdict"] = (
            "The right token is often not even among the two most probable, so in this run "
            "the single head loses more than which token stood on which side."
        )
    elif values["top1"] <= 0.5 and other >= 0.8:
        facts["verdict"] = (
            "The model knows which two tokens surround each position and cannot tell which "
            "stands on which side: it fails to bind tokens to positions, as the argument "
            "predicts, and does not fail to see them."
        )
    else:
        facts["verdict"] = (
            "The right token is among the two most probable, but the first guesses are not "
            "mainly mix-ups of the two sides: this run shows the binding failure only in part."
        )
    return facts


def multihead_binding_facts() -> dict[str, str]:
    """`multihead_binding_verdict` of the cached one- and two-head models (first seed)."""
    return multihead_binding_verdict(multihead_binding(1), multihead_binding(2))


def multihead_loss_curves() -> Figure:
    """Training loss per epoch of every model, one color per number of heads."""
    result = multihead_experiment()
    fig = new_figure((5.4, 3.3))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        labelled = set()
        for run in result["runs"]:
            num_heads = run["num_heads"]
            epochs = range(1, len(run["train_loss"]) + 1)
            label = None if num_heads in labelled else f"{num_heads} head" + "s" * (num_heads > 1)
            labelled.add(num_heads)
            style = {"color": COLORS[num_heads], "label": label, "alpha": 0.8}
            ax.plot(epochs, run["train_loss"], "o-", markersize=3, **style)
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss (cross-entropy)")
        ax.set_title(f"Same width ({MULTIHEAD_CONFIG.num_hiddens}), one line per seed")
        ax.legend()
        fig.tight_layout()
    return fig


def multihead_head_heatmaps() -> Figure:
    """Per-head attention weights of the trained 1-, 2- and 4-head models on one input."""
    sizes = MULTIHEAD_CONFIG.num_steps, MULTIHEAD_CONFIG.vocab_size
    tokens, _ = multihead_neighbor_batch(1, *sizes, torch.Generator().manual_seed(7))
    head_counts = MULTIHEAD_CONFIG.head_counts
    num_steps = MULTIHEAD_CONFIG.num_steps
    # One row per model, one column per head; cells right of a model's last head stay empty.
    grid = torch.zeros(len(head_counts), max(head_counts), num_steps, num_steps)
    for row, num_heads in enumerate(head_counts):
        model = multihead_trained_model(num_heads)
        with torch.no_grad():
            model(tokens)
        grid[row, :num_heads] = model.attention.attention_weights[0]  # (heads, n_q, n_k)
    fig = show_heatmaps(grid, xlabel="Keys (positions)", ylabel="Queries", figsize=(2.0, 2.0))
    for index, ax in enumerate(fig.axes[: grid.shape[0] * grid.shape[1]]):
        row, head = divmod(index, grid.shape[1])
        num_heads = head_counts[row]
        if head < num_heads:
            ax.set_title(f"{num_heads} head{'s' * (num_heads > 1)}: head {head}", fontsize=9)
        else:
            ax.set_visible(False)
    return fig


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    multihead_accuracy_table,
    multihead_loss_curves,
    multihead_head_heatmaps,
    multihead_binding_facts,
)
