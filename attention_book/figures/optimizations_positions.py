"""Figures and sentences of the deep dive on positions: the loss past the trained length.

The loss at each position of windows twice as long as in training, for the three position
schemes of softmax attention and for linear attention (the runs of
`attention_book.experiments.optimizations`), the sentences that read it against Press et al.,
and how far rotary scores are from depending on the offset alone.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.optimizations import OPTIMIZATIONS_CONFIG, optimizations_experiment
from attention_book.experiments.optimizations_measurements import rope_offset_errors
from attention_book.figures.optimizations import LABELS, SHORT
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "EXTRAPOLATION_VARIANTS",
    "FIGURES",
    "optimizations_extrapolation",
    "optimizations_extrapolation_verdict",
    "optimizations_loss_by_position",
    "optimizations_rope_error",
]


#: The variants of the loss-by-position figure and its sentence: the three position schemes
#: of softmax attention, and linear attention.
EXTRAPOLATION_VARIANTS = ("baseline", "sinusoidal", "alibi", "linear")


def optimizations_loss_by_position() -> Figure:
    """Validation loss at each position of windows twice as long as in training."""
    context = OPTIMIZATIONS_CONFIG.context
    fig = new_figure((6.4, 3.5))
    styles = {
        "baseline": "#1f77b4",
        "sinusoidal": "#d62728",
        "alibi": "#9467bd",
        "linear": "#2ca02c",
    }
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for variant, color in styles.items():
            losses = torch.tensor(optimizations_experiment(variant)["loss_by_position"])
            smooth = torch.nn.functional.avg_pool1d(losses[None, None], 8, stride=8)[0, 0]
            ax.plot(torch.arange(len(smooth)) * 8 + 4, smooth, color=color, label=LABELS[variant])
        ax.axvline(context, color="gray", ls="--", lw=1)
        ax.annotate(
            "longest window\nin training", (context, 0.55), xycoords=("data", "axes fraction"),
            xytext=(-6, 0), textcoords="offset points", color="gray", fontsize=8, va="center",
            ha="right",
        )  # fmt: skip
        ax.set_ylim(bottom=0)
        ax.set_xlabel("position in the window (characters)")
        ax.set_ylabel("validation loss (nats, mean of 8)")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
    return fig


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def optimizations_extrapolation_verdict(losses: dict[str, list[float]], context: int) -> str:
    """Markdown: each variant's loss inside and past the trained length, and what ALiBi's shows.

    The last quarter of the trained positions is the fair comparison for the positions past
    them: both see long prefixes, while the first positions of a window see almost none.

    Args:
        losses: Per variant of `EXTRAPOLATION_VARIANTS`, the loss at each position of windows
            of ``2 * context`` characters.
        context: The longest window of training.

    Returns:
        A few sentences: the numbers, whether the run agrees with Press et al. about ALiBi,
        and whether the rotary baseline carried its loss past the trained length.
    """
    late = slice(context - context // 4, context)
    numbers = {
        variant: (_mean(curve[:context]), _mean(curve[late]), _mean(curve[context:]))
        for variant, curve in losses.items()
    }
    parts = [
        f"{SHORT.get(v, 'rotary (baseline)')} {inside:.2f} / {last:.2f} → {past:.2f}"
        for v, (inside, last, past) in numbers.items()
    ]
    text = (
        f"Mean validation loss at positions 1–{context} / {late.start + 1}–{context} → "
        f"{context + 1}–{2 * context} in this build: " + "; ".join(parts) + " nats per character."
    )
    rise = {v: past - last for v, (_, last, past) in numbers.items()}
    others = [r for v, r in rise.items() if v != "alibi"]
    moved = (
        f"rose by {min(others):.2f} to {max(others):.2f}"
        if min(others) > 0
        else f"moved by {min(others):+.2f} to {max(others):+.2f}"
    )
    text += (
        f" Past position {context}, ALiBi's loss moved by {rise['alibi']:+.2f} from its level at "
        f"positions {late.start + 1}–{context}; the other models' {moved}."
    )
    if rise["alibi"] < 0.1 and rise["alibi"] < 0.1 * min(others):
        text += (
            " In this one run, ALiBi carried its loss past the trained length and the other "
            "models did not, as Press et al. report for their language models."
        )
        if rise["alibi"] > -0.01:
            text += (
                f" Nor did its loss fall below its level at positions {late.start + 1}–"
                f"{context}: it did not degrade, which is not the same as making use of the "
                "longer prefix."
            )
    elif rise["alibi"] < min(others):
        text += (
            " In this one run, ALiBi degraded past the trained length, but less than the "
            "other models."
        )
    else:
        text += " This run does not reproduce what Press et al. report: ALiBi degraded as well."
    if rise["baseline"] >= 0.1:
        text += (
            f" The rotary baseline's loss rose by {rise['baseline']:.2f}: scores that depend on "
            "the offset alone did not, by themselves, carry this model past its training length."
        )
    else:
        text += (
            f" The rotary baseline's loss moved by {rise['baseline']:+.2f}: it carried its loss "
            "past the trained length too."
        )
    return text


def optimizations_extrapolation() -> str:
    """Markdown sentences: mean loss inside and past the trained length, and ALiBi's verdict."""
    losses = {
        variant: optimizations_experiment(variant)["loss_by_position"]
        for variant in EXTRAPOLATION_VARIANTS
    }
    return optimizations_extrapolation_verdict(losses, OPTIMIZATIONS_CONFIG.context)


def optimizations_rope_error() -> str:
    """Markdown sentence: how far rotated scores are from depending on the offset only."""
    errors = rope_offset_errors()
    return (
        "Largest change of $\\mathbf{q}^\\top \\mathbf{k}$ when both positions move by the "
        f"same shift, over {errors['trials']} random pairs of {errors['head_dim']} features "
        f"with positions and shifts below {errors['max_position']:,}, relative to "
        f"$\\lVert\\mathbf{{q}}\\rVert\\,\\lVert\\mathbf{{k}}\\rVert$: "
        f"**{errors['float32']['relative']:.1e} in float32** and "
        f"**{errors['float64']['relative']:.1e} in float64** (absolute: "
        f"{errors['float32']['absolute']:.1e} and {errors['float64']['absolute']:.1e}); "
        "rounding error of each precision, not a dependence on position."
    )


#: The figures and build-time tables of this module, in the order of the page.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    optimizations_rope_error,
    optimizations_loss_by_position,
    optimizations_extrapolation,
)
