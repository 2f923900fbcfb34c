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
from attention_book.figures.optimizations import LABELS
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


def _levels(curve: list[float], context: int) -> tuple[float, float, float]:
    """A loss curve's mean inside the trained length, over its last quarter, and past it.

    The last quarter of the trained positions is the fair comparison for the positions past
    them: both see long prefixes, while the first positions of a window see almost none.
    """
    late = curve[context - context // 4 : context]
    return _mean(curve[:context]), _mean(late), _mean(curve[context:])


def optimizations_extrapolation_verdict(
    losses: dict[str, list[float]], context: int
) -> dict[str, str]:
    """The deep dive's words that depend on the losses past the trained length.

    Args:
        losses: Per variant of `EXTRAPOLATION_VARIANTS`, the loss at each position of windows
            of ``2 * context`` characters.
        context: The longest window of training.

    Returns:
        ``"others_moved"``: how the loss of the models other than ALiBi moved past the trained
        length (from their level over the last quarter of it); ``"alibi"``: one or two
        sentences, whether the run agrees with Press et al. about ALiBi; ``"rotary"``: how the
        rotary baseline's loss moved, and whether it carried past the trained length.
    """
    rise = {}
    for variant, curve in losses.items():
        _, last, past = _levels(curve, context)
        rise[variant] = past - last
    others = [r for v, r in rise.items() if v != "alibi"]
    words = {
        "others_moved": (
            f"rose by {min(others):.2f} to {max(others):.2f}"
            if min(others) > 0
            else f"moved by {min(others):+.2f} to {max(others):+.2f}"
        )
    }
    if rise["alibi"] < 0.1 and rise["alibi"] < 0.1 * min(others):
        words["alibi"] = (
            "In this one run, ALiBi carried its loss past the trained length and the other "
            "models did not, as Press et al. report for their language models."
        )
        if rise["alibi"] > -0.01:
            words["alibi"] += (
                f" Nor did its loss fall below its level at positions "
                f"{context - context // 4 + 1}–{context}: it did not degrade, which is not the "
                "same as making use of the longer prefix."
            )
    elif rise["alibi"] < min(others):
        words["alibi"] = (
            "In this one run, ALiBi degraded past the trained length, but less than the other "
            "models."
        )
    else:
        words["alibi"] = (
            "This run does not reproduce what Press et al. report: ALiBi degraded as well."
        )
    if rise["baseline"] >= 0.1:
        words["rotary"] = (
            f"rose by {rise['baseline']:.2f}: scores that depend on the offset alone did not, by "
            "themselves, carry this model past its training length."
        )
    else:
        words["rotary"] = (
            f"moved by {rise['baseline']:+.2f}: it carried its loss past the trained length too."
        )
    return words


def optimizations_extrapolation() -> dict[str, str]:
    """Each variant's mean loss inside and past the trained length, and the verdict's words.

    Returns:
        The positions compared ("trained", "late_start", "past_start", "past_end"), per
        variant of `EXTRAPOLATION_VARIANTS` "<variant>_inside", "<variant>_late" and
        "<variant>_past" (nats per character), ALiBi's change past the trained length
        ("alibi_moved"), and `optimizations_extrapolation_verdict`'s words.
    """
    context = OPTIMIZATIONS_CONFIG.context
    losses = {
        variant: optimizations_experiment(variant)["loss_by_position"]
        for variant in EXTRAPOLATION_VARIANTS
    }
    values = {
        "trained": str(context),
        "late_start": str(context - context // 4 + 1),
        "past_start": str(context + 1),
        "past_end": str(2 * context),
    }
    for variant, curve in losses.items():
        inside, last, past = _levels(curve, context)
        values[f"{variant}_inside"] = f"{inside:.2f}"
        values[f"{variant}_late"] = f"{last:.2f}"
        values[f"{variant}_past"] = f"{past:.2f}"
        if variant == "alibi":
            values["alibi_moved"] = f"{past - last:+.2f}"
    return values | optimizations_extrapolation_verdict(losses, context)


def optimizations_rope_error() -> dict[str, str]:
    """How far rotated scores are from depending on the offset only, in each precision."""
    errors = rope_offset_errors()
    return {
        "trials": str(errors["trials"]),
        "head_dim": str(errors["head_dim"]),
        "max_position": f"{errors['max_position']:,}",
        "relative_float32": f"{errors['float32']['relative']:.1e}",
        "relative_float64": f"{errors['float64']['relative']:.1e}",
        "absolute_float32": f"{errors['float32']['absolute']:.1e}",
        "absolute_float64": f"{errors['float64']['absolute']:.1e}",
    }


#: The figures and build-time tables of this module, in the order of the page.
FIGURES = (
    optimizations_rope_error,
    optimizations_loss_by_position,
    optimizations_extrapolation,
)
