"""Figures and build-time tables of the chapter "Self-attention and positional encoding".

Drawing only: the timing and gradient measurements live in
`attention_book.experiments.self_attention`; the encodings come from
`attention_book.positional`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.self_attention import (
    FIT_FROM,
    SEQUENCE_LENGTHS,
    TIMING_WIDTH,
    fitted_slope,
    self_attention_flops,
    self_attention_gradient_reach,
    self_attention_timings,
)
from attention_book.plotting import BOOK_STYLE, new_figure
from attention_book.positional import sinusoidal_table

__all__ = [
    "FIGURES",
    "self_attention_encoding_columns",
    "self_attention_encoding_dot_products",
    "self_attention_encoding_heatmap",
    "self_attention_facts",
    "self_attention_gradient_reach_plot",
    "self_attention_timing_plot",
    "self_attention_timing_table",
    "self_attention_verdict",
]

COLORS = {"convolution": "#2ca02c", "GRU": "#d62728", "self-attention": "#1f77b4"}


def self_attention_timing_plot() -> Figure:
    """Log-log forward time against sequence length, with the fitted slope in the legend."""
    timings = self_attention_timings()
    fig = new_figure((5.6, 3.6))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, result in timings.items():
            milliseconds = [1e3 * t for t in result["seconds"]]
            low, high = _slope_range(result)
            label = f"{name} (slope {result['slope']:.2f}; runs {low:.2f} to {high:.2f})"
            bars = [
                [
                    1e3 * (m - min(runs))
                    for m, runs in zip(result["seconds"], result["runs"], strict=True)
                ],
                [
                    1e3 * (max(runs) - m)
                    for m, runs in zip(result["seconds"], result["runs"], strict=True)
                ],
            ]
            ax.errorbar(SEQUENCE_LENGTHS, milliseconds, yerr=bars, fmt="o-", color=COLORS[name],
                        label=label, capsize=2)  # fmt: skip
        ax.axvspan(FIT_FROM, SEQUENCE_LENGTHS[-1], color="#999999", alpha=0.12, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel("forward CPU time (ms):\nmedian, bars the range of the runs")
        ax.set_title(f"Width {TIMING_WIDTH}, one sequence, one CPU thread")
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def self_attention_timing_table() -> str:
    """Markdown table of the measured times and fitted slopes (the run the plot shows)."""
    timings = self_attention_timings()
    shown = [n for n in SEQUENCE_LENGTHS if n in (16, 128, 512, 1024, 2048)]
    header = " | ".join(f"n = {n}" for n in shown)
    lines = [
        f"| layer | {header} | slope for n ≥ {FIT_FROM} | slope of each run |",
        "| --- | " + "--- | " * len(shown) + "--- | --- |",
    ]
    for name, result in timings.items():
        cells = [f"{1e3 * result['seconds'][SEQUENCE_LENGTHS.index(n)]:.2f} ms" for n in shown]
        low, high = _slope_range(result)
        lines.append(
            f"| {name} | "
            + " | ".join(cells)
            + f" | {result['slope']:.2f} | {low:.2f} to {high:.2f} |"
        )
    return "\n".join(lines)


def self_attention_gradient_reach_plot() -> Figure:
    """Gradient norm of the last output with respect to each input, against the distance."""
    reach = self_attention_gradient_reach()
    fig = new_figure((5.6, 3.4))
    colors = ["#2ca02c", "#d62728", "#1f77b4"]
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for (name, norms), color in zip(reach.items(), colors, strict=True):
            distances = [j for j, g in enumerate(norms) if g > 0]  # zero: no path at all
            values = [norms[j] for j in distances]
            ax.plot(distances, values, "o-", markersize=3, color=color, label=name)
        ax.set_yscale("log")
        ax.set_xlabel("distance back from the last position")
        ax.set_ylabel("gradient norm (log)")
        ax.set_title("How far back the last output reaches (untrained)")
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def _slope_range(result: dict) -> tuple[float, float]:
    """The lowest and the highest slope fitted to one layer's runs (and to their medians)."""
    slopes = [float(result["slope"]), *result.get("run_slopes", ())]
    return min(slopes), max(slopes)


def _slopes_between(lengths: list[int], seconds: list[float]) -> list[float]:
    """Local slopes: the slope between each pair of consecutive lengths."""
    return [fitted_slope(lengths[i : i + 2], seconds[i : i + 2]) for i in range(len(lengths) - 1)]


def _names(names: list[str]) -> str:
    """'the convolution', 'the convolution and the GRU', ..."""
    names = [f"the {name}" if name != "self-attention" else name for name in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _timing_numbers(timings: dict[str, dict[str, list[float] | float]]) -> dict[str, Any]:
    """What the chapter reads off the timings, against the layers' FLOP counts.

    Every layer's work is counted by `self_attention_flops`: linear in ``n`` for the
    convolution and the GRU, linear plus quadratic for self-attention.

    Args:
        timings: `self_attention_timings`'s result (or the same shape): per layer name
            (``"convolution"``, ``"GRU"``, ``"self-attention"``), ``"seconds"`` at each of
            `SEQUENCE_LENGTHS` and the fitted ``"slope"``.

    Returns:
        "fit" and "short" (the lengths fitted, and those below), each layer's "slope", its
        "slope_range" over the runs (`_slope_range`), "seconds" and "short_slope" (fitted
        below `FIT_FROM`), self-attention's "run_local" (each run's local slopes) and "local"
        slopes over the fitted doublings, "scores_share" (the share of its FLOPs in the
        quadratic part at each fitted length), the slope "flop_slope" and the local slopes
        "flop_local" of a time proportional to its FLOPs, and "faster" (the lengths at which
        self-attention was faster than the GRU).
    """
    lengths = list(SEQUENCE_LENGTHS)
    fit = [n for n in lengths if n >= FIT_FROM]
    short = [n for n in lengths if n < FIT_FROM]
    slope = {name: float(result["slope"]) for name, result in timings.items()}
    slope_range = {name: _slope_range(result) for name, result in timings.items()}
    seconds = {name: list(result["seconds"]) for name, result in timings.items()}
    attention_runs = timings["self-attention"].get("runs")
    run_local = (
        [
            _slopes_between(fit, [times[k] for times in attention_runs[len(short) :]])
            for k in range(len(attention_runs[0]))
        ]
        if attention_runs
        else [_slopes_between(fit, seconds["self-attention"][len(short) :])]
    )
    flops = [self_attention_flops(n, TIMING_WIDTH) for n in fit]
    attention_flops = [f["self-attention projections"] + f["self-attention scores"] for f in flops]
    attention, gru = seconds["self-attention"], seconds["GRU"]
    return {
        "fit": fit,
        "short": short,
        "slope": slope,
        "slope_range": slope_range,
        "run_local": run_local,
        "seconds": seconds,
        "short_slope": {name: fitted_slope(short, seconds[name][: len(short)]) for name in slope},
        "local": _slopes_between(fit, seconds["self-attention"][len(short) :]),
        "scores_share": [
            f["self-attention scores"] / a for f, a in zip(flops, attention_flops, strict=True)
        ],
        "flop_slope": fitted_slope(fit, attention_flops),
        "flop_local": _slopes_between(fit, attention_flops),
        "faster": [n for n, a, g in zip(lengths, attention, gru, strict=True) if a < g],
    }


def _reach_numbers(reach: dict[str, list[float]]) -> dict[str, Any]:
    """What the chapter reads off the gradient reach.

    Args:
        reach: `self_attention_gradient_reach`'s result (or the same shape): per layer name
            (the convolution stack's first, then ``"GRU"`` and ``"self-attention"``), one
            gradient norm per distance back from the last position, ``0, 1, ...``.

    Returns:
        "conv_reach" (the largest distance at which the convolutions' gradient is not zero),
        "last" (the largest distance), the GRU's "orders" (decades it falls from distance 0 to
        the last), "slope" and "residual" (of a straight line fitted to its log10), and
        self-attention's "spread" (its largest over its smallest gradient from distance 1 on)
        and "peak" (its gradient at distance 0 over the median of the others).
    """
    conv = next(iter(reach.values()))
    gru, attention = reach["GRU"], reach["self-attention"]
    last = len(gru) - 1
    logs = [math.log10(g) for g in gru]
    mean_d, mean_log = last / 2, statistics.fmean(logs)
    slope = sum((d - mean_d) * (y - mean_log) for d, y in enumerate(logs)) / sum(
        (d - mean_d) ** 2 for d in range(len(logs))
    )
    rest = attention[1:]  # distance 0 is also the query
    return {
        "conv_reach": max(d for d, g in enumerate(conv) if g > 0),
        "last": last,
        "orders": logs[0] - logs[-1],
        "slope": slope,
        "residual": max(abs(y - mean_log - slope * (d - mean_d)) for d, y in enumerate(logs)),
        "spread": max(rest) / min(rest),
        "peak": attention[0] / statistics.median(rest),
    }


def self_attention_verdict(
    timings: dict[str, dict[str, list[float] | float]], reach: dict[str, list[float]]
) -> dict[str, str]:
    """The chapter's words that depend on its measurements; the rest is the page's.

    The timing sentences compare the measured slopes with the layers' FLOP counts and say
    nothing the numbers do not show; the reach sentences read the gradients' shape.

    Args:
        timings: `self_attention_timings`'s result (or the same shape).
        reach: `self_attention_gradient_reach`'s result (or the same shape).

    Returns:
        On the timings: ``"faster"`` (where self-attention was faster than the GRU),
        ``"linear_close"`` (whether the linear layers' slopes are close to 1),
        ``"short_flat"`` (whether the slopes below the fitted lengths show a fixed cost),
        ``"attention_vs_flops"`` and ``"attention_local"`` (self-attention's slope against
        its FLOP count's, and its last local slope), ``"gru_gap"`` (whether the GRU's time
        exceeds what its FLOPs explain), ``"summary_attention"``. On the reach:
        ``"gru_reach"`` (how the GRU's gradient falls), ``"attention_reach"`` (a sentence when
        distance barely matters to self-attention, else nothing), ``"gru_summary"`` and
        ``"attention_summary"``.
    """
    n = _timing_numbers(timings)
    fit, slope, flop_slope = n["fit"], n["slope"], n["flop_slope"]
    words = {}
    if n["faster"]:
        words["faster"] = (
            f"self-attention was faster than the GRU up to n = {max(n['faster'])} (at "
            f"{len(n['faster'])} of the {len(SEQUENCE_LENGTHS)} lengths measured)."
        )
    else:
        words["faster"] = "the GRU was faster than self-attention at every length."

    # A slope is close to 1 when every run's is (within 0.15), away from it when none is.
    ranges = {name: n["slope_range"][name] for name in ("convolution", "GRU")}
    close = [name for name, (lo, hi) in ranges.items() if lo >= 0.85 and hi <= 1.15]
    away = [name for name, (lo, hi) in ranges.items() if lo > 1.15 or hi < 0.85]
    if len(close) == 2:
        text = "Both slopes are close to 1 in every run, as Table 1 predicts."
    else:
        sentences = []
        if close:
            named = _names(close)
            sentences.append(
                f"{named[0].upper() + named[1:]}'s slope is close to 1 in every run, as Table 1 "
                "predicts."
            )
        for name, (lo, hi) in ranges.items():
            if name in away:
                pace = "faster" if lo > 1 else "more slowly"
                sentences.append(
                    f"The {name}'s time grew {pace} than linearly in every run, though its work "
                    "does not: at these lengths its time is not proportional to its work, and "
                    "this build does not measure why."
                )
            elif name not in close:
                sentences.append(
                    f"The {name}'s slope ranged from {lo:.2f} to {hi:.2f} over the runs: they "
                    "cannot say whether it is close to 1."
                )
        text = " ".join(sentences)
    words["linear_close"] = text

    flat = [name for name, s in n["short_slope"].items() if s < 0.8]
    if flat:
        words["short_flat"] = (
            f"Where a slope is well below 1, as for {_names(flat)}, the time grew more slowly than "
            "the work: a cost paid once per call, whatever $n$, still weighs on it there. That is "
            f"why the fit starts at {FIT_FROM}."
        )
    else:
        words["short_flat"] = (
            f"None is far below 1; the fit starts at {FIT_FROM} all the same, where a fixed cost "
            "per call weighs least."
        )

    measured = slope["self-attention"]
    lo, hi = n["slope_range"]["self-attention"]
    if abs(lo - flop_slope) <= 0.1 and abs(hi - flop_slope) <= 0.1:
        words["attention_vs_flops"] = f"close to the FLOP count's {flop_slope:.2f}."
    elif hi < flop_slope - 0.1 or lo > flop_slope + 0.1:
        pace = "more slowly" if measured < flop_slope else "faster"
        words["attention_vs_flops"] = (
            f"{'below' if measured < flop_slope else 'above'} the FLOP count's {flop_slope:.2f}: "
            f"in every run the time grew {pace} than the FLOPs of the matrix products."
        )
    else:
        words["attention_vs_flops"] = (
            f"not told apart from the FLOP count's {flop_slope:.2f}: the runs' slopes range from "
            f"{lo:.2f} to {hi:.2f}."
        )
    changes = [run[-1] - run[-2] for run in n["run_local"]]
    if all(change < -0.05 for change in changes):
        words["attention_local"] = (
            "fell over the last doubling in every run, which the FLOP count, whose local slopes "
            "rise towards 2, does not explain."
        )
    elif all(change > 0.05 for change in changes):
        words["attention_local"] = (
            "still rose over the last doubling in every run, as the FLOP count's does."
        )
    elif all(abs(change) <= 0.05 for change in changes):
        words["attention_local"] = "was about the same over the last two doublings."
    elif min(changes) < 0 < max(changes):
        words["attention_local"] = (
            f"changed over the last doubling by {min(changes):+.2f} to {max(changes):+.2f} from "
            "run to run: the runs do not say which way it moves there."
        )
    else:  # one way in every run, but not by more than 0.05 in every run
        way = "rose" if max(changes) > 0 else "fell"
        words["attention_local"] = (
            f"{way} over the last doubling in every run, by {min(changes):+.2f} to "
            f"{max(changes):+.2f}: in some runs by no more than the 0.05 this page counts as a "
            "change."
        )

    if n["seconds"]["GRU"][-1] / n["seconds"]["convolution"][-1] > 4:
        words["gru_gap"] = (
            'The rest of the gap is what the "sequential operations" column describes: the '
            "GRU's $n$ steps run one after the other, each a product of $d \\times d$ matrices "
            "with a single vector, while the convolution treats all positions in one product."
        )
    else:
        words["gru_gap"] = "In this build its sequential steps cost little beyond their FLOPs."

    share = n["scores_share"]
    if measured < 2:
        words["summary_attention"] = (
            "stays below 2 at these lengths, and so would a time proportional to its FLOPs "
            f"({flop_slope:.2f}): its projections, linear in $n$, do {1 - share[0]:.0%} of its "
            f"FLOPs at $n = {fit[0]}$ and still {1 - share[-1]:.0%} at $n = {fit[-1]}$."
        )
    else:
        words["summary_attention"] = (
            f"is above its FLOP count's {flop_slope:.2f}: in this build its time grew faster "
            "than its work."
        )

    r = _reach_numbers(reach)
    span = f"from distance 0 to {r['last']}"
    falls = f"Its gradient falls by {r['orders']:.0f} orders of magnitude {span}"
    if r["orders"] < 1:
        words["gru_reach"] = f"Its gradient does not fall by a factor of 10 {span}."
        words["gru_summary"] = "does not fade here"
    elif r["residual"] < 1:
        words["gru_reach"] = (
            f"{falls}, close to a straight line on the log scale (no point is a decade off the "
            f"fitted line): on average it shrinks by a factor of {10 ** -r['slope']:.1f} per step "
            "back."
        )
        words["gru_summary"] = "fades exponentially with distance"
    else:
        words["gru_reach"] = f"{falls}, but not along a straight line on the log scale."
        words["gru_summary"] = "fades with distance"
    if r["spread"] < 10:
        words["attention_reach"] = "On the figure's scale, distance barely matters."
        words["attention_summary"] = "self-attention reaches every distance about equally"
    else:
        words["attention_reach"] = ""
        words["attention_summary"] = "self-attention's reach varies with distance in this build"
    return words


def self_attention_facts() -> dict[str, str]:
    """The numbers the chapter's sentences cite, and `self_attention_verdict`'s words on them.

    Read from this build's timings (the run the table and the plot show) and gradient reach.

    Returns:
        Among others ``"conv_slope"``, ``"gru_slope"``, ``"attention_slope"`` (two
        decimals); ``"ratio_first"`` and ``"ratio_last"``: self-attention's quadratic FLOPs
        over its linear ones at the first and the last fitted length; ``"scores_share_first"``
        and ``"scores_share_last"``: the share of self-attention's FLOPs in its quadratic part
        there; ``"projections_share_first"`` and ``"projections_share_last"``, the rest;
        ``"flop_slope"``: the slope a time proportional to self-attention's FLOPs would fit;
        ``"flop_local_first"``, ``"flop_local_last"``: that time's local slopes over the first
        and last doubling of the fit; ``"conv_reach"``: the largest distance at which the
        convolution stack's gradient is not zero.
    """
    timings, reach = self_attention_timings(), self_attention_gradient_reach()
    n, r = _timing_numbers(timings), _reach_numbers(reach)
    slope, share, fit = n["slope"], n["scores_share"], n["fit"]
    seconds = n["seconds"]
    facts = {
        "fit_from": str(FIT_FROM),
        "conv_slope": f"{slope['convolution']:.2f}",
        "gru_slope": f"{slope['GRU']:.2f}",
        "attention_slope": f"{slope['self-attention']:.2f}",
        "conv_slope_range": "{:.2f} to {:.2f}".format(*n["slope_range"]["convolution"]),
        "gru_slope_range": "{:.2f} to {:.2f}".format(*n["slope_range"]["GRU"]),
        "attention_slope_range": "{:.2f} to {:.2f}".format(*n["slope_range"]["self-attention"]),
        "runs": str(len(timings["convolution"]["runs"][0])),
        "ratio_first": f"{share[0] / (1 - share[0]):.0f}",
        "ratio_last": f"{share[-1] / (1 - share[-1]):.0f}",
        "scores_share_first": f"{share[0]:.0%}",
        "scores_share_last": f"{share[-1]:.0%}",
        "projections_share_first": f"{1 - share[0]:.0%}",
        "projections_share_last": f"{1 - share[-1]:.0%}",
        "flop_slope": f"{n['flop_slope']:.2f}",
        "flop_local_first": f"{n['flop_local'][0]:.2f}",
        "flop_local_last": f"{n['flop_local'][-1]:.2f}",
        "short_conv_slope": f"{n['short_slope']['convolution']:.2f}",
        "short_gru_slope": f"{n['short_slope']['GRU']:.2f}",
        "short_attention_slope": f"{n['short_slope']['self-attention']:.2f}",
        "local_slopes": ", ".join(f"{s:.2f}" for s in n["local"]),
        "fit_first": str(fit[0]),
        "fit_last": str(fit[-1]),
        "longest": str(SEQUENCE_LENGTHS[-1]),
        "gru_ratio": f"{seconds['GRU'][-1] / seconds['convolution'][-1]:.1f}",
        "conv_reach": str(r["conv_reach"]),
        "reach_last": str(r["last"]),
        "gru_orders": f"{r['orders']:.0f}",
        "attention_spread": f"{r['spread']:.1f}",
        "attention_peak": f"{r['peak']:.1f}",
    }
    return facts | self_attention_verdict(timings, reach)


def self_attention_encoding_heatmap() -> Figure:
    """The sinusoidal table for 60 positions and 32 features, as a heatmap."""
    table = sinusoidal_table(60, 32)
    fig = new_figure((6.0, 3.4))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        ax = fig.add_subplot()
        image = ax.imshow(table.T.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        ax.set_xlabel("position (row of P)")
        ax.set_ylabel("encoding dimension (column of P)")
        ax.set_title("Sinusoidal positional encoding, transposed")
        fig.colorbar(image, ax=ax, shrink=0.8)
        fig.tight_layout()
    return fig


def self_attention_encoding_columns() -> Figure:
    """Columns 6 to 9 of the table (60 positions, 32 features) as curves."""
    table = sinusoidal_table(60, 32)
    fig = new_figure((6.0, 3.0))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for column, style in zip(range(6, 10), ("-", "--", "-.", ":"), strict=True):
            ax.plot(table[:, column].numpy(), style, label=f"column {column}")
        ax.set_xlabel("position")
        ax.set_ylabel("value")
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
    return fig


def self_attention_encoding_dot_products() -> Figure:
    """Dot products of encodings: the Gram matrix, and against the distance from several i."""
    num_positions, num_hiddens = 100, 64
    table = sinusoidal_table(num_positions + 60, num_hiddens, dtype=torch.float64)
    gram = table[:num_positions] @ table[:num_positions].T  # (positions, positions)
    fig = new_figure((9.4, 3.5))
    with plt.rc_context(BOOK_STYLE):
        left, right = fig.subplots(1, 2)
        # interpolation="none": the SVG holds the 100 x 100 values as they are (6 kB), not an
        # image resampled to the figure's resolution (66 kB).
        image = left.imshow(gram.numpy(), cmap="RdBu_r", vmin=-num_hiddens / 2,
                            vmax=num_hiddens / 2, interpolation="none")  # fmt: skip
        left.grid(False)
        left.set_xlabel("position j")
        left.set_ylabel("position i")
        left.set_title("p_i · p_j (d = 64)")
        fig.colorbar(image, ax=left, shrink=0.8)
        offsets = torch.arange(0, 60)
        for start, style in zip((0, 20, 50), ("-", "--", ":"), strict=True):
            dots = table[start + offsets] @ table[start]  # (num_offsets,)
            right.plot(offsets.numpy(), dots.numpy(), style, label=f"from i = {start}")
        right.set_xlabel("distance δ")
        right.set_ylabel("p_i · p_(i+δ)")
        right.set_title("Depends on δ only; largest at δ = 0")
        right.legend(fontsize=8)
        fig.tight_layout()
    return fig


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    self_attention_timing_plot,
    self_attention_timing_table,
    self_attention_gradient_reach_plot,
    self_attention_facts,
    self_attention_encoding_heatmap,
    self_attention_encoding_columns,
    self_attention_encoding_dot_products,
)
