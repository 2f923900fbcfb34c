"""Figures and build-time tables of the chapter "Transformer optimizations".

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.optimizations`; the masks come from `attention_book.masking`.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.experiments.optimizations import (
    OPTIMIZATIONS_CONFIG,
    VARIANTS,
    optimizations_decode,
    optimizations_encode,
    optimizations_experiment,
    optimizations_make_model,
    optimizations_text,
    optimizations_trained_model,
)
from attention_book.experiments.optimizations_measurements import (
    LINEAR_HEAD_DIM,
    generation_timings,
    linear_attention_measurements,
    receptive_fields,
    rope_offset_errors,
)
from attention_book.masking import block_sparse_mask, causal_mask, sliding_window_mask
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "optimizations_cache_speedup",
    "optimizations_cache_timings",
    "optimizations_cache_verdict",
    "optimizations_extrapolation",
    "optimizations_extrapolation_verdict",
    "optimizations_generation_sample",
    "optimizations_linear_crossover",
    "optimizations_linear_scaling",
    "optimizations_loss_by_position",
    "optimizations_loss_facts",
    "optimizations_receptive_field",
    "optimizations_rope_error",
    "optimizations_shared_heads_verdict",
    "optimizations_sparse_patterns",
    "optimizations_variant_facts",
    "optimizations_variants_table",
]

COLORS = {
    "cache": "#1f77b4",
    "no_cache": "#d62728",
    "softmax": "#d62728",
    "softmax_fused": "#ff7f0e",
    "linear": "#1f77b4",
}
LABELS = {
    "baseline": "baseline: 4 heads, rotary, softmax",
    "gqa": "grouped-query, 2 key/value heads",
    "mqa": "multi-query, 1 key/value head",
    "sinusoidal": "sinusoidal positions instead of rotary",
    "linear": "causal linear attention (elu + 1)",
    "alibi": "ALiBi distance bias instead of rotary",
}
SAMPLE_PROMPTS = ("Elle a ", "Nous avons vendu ", "Ils ont payé ")
SAMPLE_WIDTH = 80  # characters of a sample line on the page (a code block must not scroll)
SHORT = {
    "gqa": "grouped-query attention",
    "mqa": "multi-query attention",
    "sinusoidal": "sinusoidal positions",
    "linear": "linear attention",
    "alibi": "ALiBi",
}
#: The variants of the loss-by-position figure and its sentence: the three position schemes
#: of softmax attention, and linear attention.
EXTRAPOLATION_VARIANTS = ("baseline", "sinusoidal", "alibi", "linear")


# ---------------------------------------------------------------------------------------------
# Section 1: the key/value cache


def optimizations_generation_sample() -> str:
    """Markdown: the trained baseline's greedy continuations of three prompts."""
    result = optimizations_experiment("baseline")
    model = optimizations_trained_model("baseline")
    training = set(optimizations_text("train").splitlines())
    lines, copied = [], 0
    for prompt in SAMPLE_PROMPTS:
        tokens = model.generate(optimizations_encode(prompt)[None, :], 150)  # (1, n + 150)
        line = optimizations_decode(tokens[0]).split("\n")[0]  # up to the first line break
        copied += line in training
        lines.append(line if len(line) <= SAMPLE_WIDTH else line[: SAMPLE_WIDTH - 1] + "…")
    text = "\n".join(lines)
    cpu = result["train_cpu_seconds"]
    return (
        f"```text\n{text}\n```\n\n"
        f"*Greedy continuations of {len(SAMPLE_PROMPTS)} prompts by the baseline, up to the "
        f"first line break (at most 150 characters, shown up to {SAMPLE_WIDTH}), after "
        f"{OPTIMIZATIONS_CONFIG.num_steps} training steps ({cpu:.0f} s of CPU time in this "
        f"build). {copied} of the {len(lines)} lines occur word for word in the training text.*"
    )


def optimizations_cache_timings() -> Figure:
    """Time per generated token against position, and the running total, with and without."""
    timings = generation_timings()
    positions = timings["positions"]
    fig = new_figure((8.4, 3.3))
    with plt.rc_context(BOOK_STYLE):
        per_token, total = fig.subplots(1, 2)
        for method, label in (("no_cache", "without cache"), ("cache", "with KV cache")):
            milliseconds = [1e3 * t for t in timings[method]]
            running, cumulative = 0.0, []
            for t in timings[method]:
                running += t
                cumulative.append(running)
            per_token.plot(positions, milliseconds, color=COLORS[method], lw=1, label=label)
            total.plot(positions, cumulative, color=COLORS[method], lw=1.5, label=label)
        per_token.set_xlabel("position of the generated token")
        per_token.set_ylabel("CPU time of that step (ms)")
        per_token.set_title("One step", fontsize=10)
        per_token.set_ylim(bottom=0)
        total.set_xlabel("tokens generated")
        total.set_ylabel("total CPU time (s)")
        total.set_title("All steps so far", fontsize=10)
        total.set_ylim(bottom=0)
        total.legend()
        fig.suptitle("Greedy generation, trained baseline, one CPU thread", fontsize=10)
        fig.tight_layout()
    return fig


def optimizations_cache_verdict(timings: dict[str, list[float]]) -> str:
    """Markdown: how the time of a step and the total time grew, with and without the cache.

    A step's time is read as the median over a quarter of the steps (the first quarter against
    the last), so that one slow step does not decide; the total as the time of all steps
    against that of the first half.

    Args:
        timings: `generation_timings`' result: "positions", and the seconds of each step per
            method ("cache", "no_cache").

    Returns:
        Two or three sentences; the last says whether a step's time grew without the cache
        and hardly with it.

    Raises:
        ValueError: If fewer than 8 steps were timed.
    """
    n = len(timings["positions"])
    if n < 8:
        raise ValueError(f"timings must hold at least 8 steps, got {n}")
    quarter, half = n // 4, n // 2
    growth, doubling = {}, {}
    for method in ("no_cache", "cache"):
        steps = timings[method]
        growth[method] = statistics.median(steps[-quarter:]) / statistics.median(steps[:quarter])
        doubling[method] = sum(steps) / sum(steps[:half])
    text = (
        f"The median step of the last {quarter} took {growth['no_cache']:.1f}× as long as the "
        f"median of the first {quarter} without the cache, and {growth['cache']:.1f}× with it. "
        f"Going from {half} to {n} tokens multiplied the total time by "
        f"{doubling['no_cache']:.1f} without the cache and {doubling['cache']:.1f} with it (4 "
        "for a step time proportional to the position, 2 for a constant one)."
    )
    if growth["no_cache"] >= 2 and growth["cache"] < 1.5:
        text += (
            " So without the cache the time of a step grew with the position, and with it the "
            "time of a step hardly grew: in a model this small the attention over a few hundred "
            "cached keys is cheap next to the fixed cost of running the layers, and of Python, "
            "for one token."
        )
    elif growth["no_cache"] > growth["cache"]:
        text += " The time of a step grew with the position, faster without the cache."
    else:
        text += " In this build the cache did not slow the growth of a step's time."
    return text


def optimizations_cache_speedup() -> str:
    """Markdown sentences: the speedup of the cache, and how the times grew with the position."""
    timings = generation_timings()
    last = timings["no_cache"][-1] / timings["cache"][-1]
    first = timings["no_cache"][0] / timings["cache"][0]
    whole = sum(timings["no_cache"]) / sum(timings["cache"])
    n = len(timings["positions"])
    return (
        f"In this build, at the last of {n} steps one step took "
        f"{1e3 * timings['no_cache'][-1]:.2f} ms without the cache and "
        f"{1e3 * timings['cache'][-1]:.2f} ms with it: **{last:.1f}× faster** (at the first "
        f"step the ratio was {first:.1f}). The whole generation took "
        f"{sum(timings['no_cache']):.2f} s without and {sum(timings['cache']):.2f} s with the "
        f"cache ({whole:.1f}×). CPU time of one thread, fastest of three runs per step.\n\n"
        + optimizations_cache_verdict(timings)
    )


# ---------------------------------------------------------------------------------------------
# Sections 2, 3 and 5: what each variant costs in loss


def optimizations_variants_table() -> str:
    """Markdown table: each variant's cache size, parameters and validation loss."""
    context = OPTIMIZATIONS_CONFIG.context
    baseline = optimizations_experiment("baseline")
    lines = [
        "| model | key/value heads | cache for one sequence of "
        f"{context} | parameters | validation loss | vs baseline | training (CPU) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for variant in VARIANTS:
        result = optimizations_experiment(variant)
        model = optimizations_make_model(variant)
        cache = model.new_cache(1, context)
        delta = result["valid_loss"] - baseline["valid_loss"]
        lines.append(
            f"| {LABELS[variant]} | {model.num_kv_heads if variant != 'linear' else '-'} | "
            f"{cache.nbytes / 1024:.0f} KiB | {result['num_parameters']:,} | "
            f"{result['valid_loss']:.3f} | {delta:+.3f} | {result['train_cpu_seconds']:.0f} s |"
        )
    other_seed = optimizations_experiment("baseline", seed=1)
    noise = abs(other_seed["valid_loss"] - baseline["valid_loss"])
    measurable = [
        SHORT[v]
        for v in SHORT
        if abs(optimizations_experiment(v)["valid_loss"] - baseline["valid_loss"]) > 2 * noise
    ]
    verdict = (
        "more than twice that gap from the baseline: " + ", ".join(measurable) + "."
        if measurable
        else "no variant differs from the baseline by more than twice that gap."
    )
    lines += [
        "",
        f"*Validation loss: mean cross-entropy per character (nats) over the first {context} "
        f"positions of {OPTIMIZATIONS_CONFIG.valid_windows} validation windows, after "
        f"{OPTIMIZATIONS_CONFIG.num_steps} steps of {OPTIMIZATIONS_CONFIG.batch_size} "
        "windows. Cache: float32 keys and values (or the running sums of linear attention), "
        "measured on the tensors `new_cache` allocates. The baseline trained with another "
        f"seed reached {other_seed['valid_loss']:.3f} ({noise:.3f} from the first run); "
        f"{verdict}*",
    ]
    return "\n".join(lines)


def optimizations_shared_heads_verdict(deltas: dict[str, float], seed_gap: float) -> str:
    """Markdown: whether sharing key/value heads cost a loss that the seeds' gap can resolve.

    Args:
        deltas: Validation loss minus the baseline's, for "gqa" and "mqa".
        seed_gap: How far apart the baseline's two seeds ended (at least 0).

    Returns:
        One sentence: the variants that moved the loss by more than twice the gap, or none.

    Raises:
        ValueError: If `seed_gap` is negative.
    """
    if seed_gap < 0:
        raise ValueError(f"seed_gap must be at least 0, got {seed_gap}")
    beyond = [v for v in ("gqa", "mqa") if abs(deltas[v]) > 2 * seed_gap]
    if not beyond:
        return (
            "Neither grouped-query nor multi-query attention moved the validation loss by more "
            "than twice the gap between the baseline's two seeds: in this run, the smaller "
            "caches cost no loss that this experiment can resolve."
        )
    parts = [f"{SHORT[v]} by {deltas[v]:+.3f}" for v in beyond]
    return (
        "Sharing key/value heads moved the validation loss by more than twice the gap between "
        "the baseline's two seeds: " + " and ".join(parts) + " nats per character."
    )


def optimizations_variant_facts() -> dict[str, str]:
    """Values for the prose: how many fewer parameters the shared key/value heads leave.

    Returns:
        "gqa_fewer" and "mqa_fewer": the parameters grouped-query and multi-query attention
        save, as a share of the baseline's ("7.7%"), and "gqa_parameters", "mqa_parameters",
        "baseline_parameters" (with thousands separators).
    """
    counts = {
        variant: sum(p.numel() for p in optimizations_make_model(variant).parameters())
        for variant in ("baseline", "gqa", "mqa")
    }
    facts = {f"{v}_parameters": f"{n:,}" for v, n in counts.items()}
    for variant in ("gqa", "mqa"):
        facts[f"{variant}_fewer"] = f"{1 - counts[variant] / counts['baseline']:.1%}"
    return facts


def optimizations_loss_facts() -> dict[str, str]:
    """Values for the prose: each variant's validation loss against the baseline's.

    Returns:
        "seed_gap", how far apart the baseline's two seeds ended ("0.005"); per variant other
        than the baseline, "<variant>_delta", its validation loss minus the baseline's
        ("+0.004"); and "shared_verdict", `optimizations_shared_heads_verdict` of grouped-query
        and multi-query attention.
    """
    baseline = optimizations_experiment("baseline")["valid_loss"]
    seed_gap = abs(optimizations_experiment("baseline", seed=1)["valid_loss"] - baseline)
    deltas = {v: optimizations_experiment(v)["valid_loss"] - baseline for v in SHORT}
    facts = {"seed_gap": f"{seed_gap:.3f}"}
    facts |= {f"{v}_delta": f"{delta:+.3f}" for v, delta in deltas.items()}
    facts["shared_verdict"] = optimizations_shared_heads_verdict(deltas, seed_gap)
    return facts


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


# ---------------------------------------------------------------------------------------------
# Section 4: local and sparse attention


def optimizations_receptive_field() -> Figure:
    """Which inputs reach each output, for 1 to 4 layers of the same sliding window."""
    data = receptive_fields()
    window, n, fields = data["window"], data["n"], data["fields"]
    fig = new_figure((2.3 * len(fields), 3.1))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, len(fields), sharey=True)
        for ax, (depth, field) in zip(axes, fields.items(), strict=True):
            reach = int(field[-1].sum())
            ax.imshow(field.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
            ax.set_title(f"{depth} layer{'s' * (depth > 1)}: reach {reach}", fontsize=9)
            ax.set_xlabel("input position")
        axes[0].set_ylabel("output position")
        fig.suptitle(
            f"Window of {window} keys per layer; measured by autograd (n = {n})", fontsize=10
        )
        fig.tight_layout()
    return fig


def _longformer_layout(num_blocks: int, global_blocks: int = 1) -> torch.Tensor:
    """Block layout: each block sees its neighbours; the first blocks see and are seen by all."""
    index = torch.arange(num_blocks)
    layout = (index[:, None] - index[None, :]).abs() <= 1
    layout[:global_blocks, :] = True
    layout[:, :global_blocks] = True
    return layout


def optimizations_sparse_patterns() -> Figure:
    """Four attention patterns of 32 tokens, with the share of (query, key) pairs each keeps."""
    n, block = 32, 4
    local = torch.eye(n // block, dtype=torch.bool)  # each block sees only itself
    patterns = {
        "causal (full)": causal_mask(n, n),
        "causal sliding window, 6 keys": sliding_window_mask(n, n, 6),
        "local blocks (Swin-like windows)": block_sparse_mask(local, block),
        "neighbour blocks + 1 global block": block_sparse_mask(
            _longformer_layout(n // block), block
        ),
    }
    fig = new_figure((2.4 * len(patterns), 2.9))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, len(patterns), sharey=True)
        for ax, (name, mask) in zip(axes, patterns.items(), strict=True):
            ax.imshow(mask.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
            ax.set_title(f"{name}\n{mask.float().mean():.0%} of the pairs", fontsize=8)
            ax.set_xlabel("key")
        axes[0].set_ylabel("query")
        fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Section 5: linear attention


def optimizations_linear_scaling() -> Figure:
    """Time and peak memory of causal softmax and linear attention against n (log-log)."""
    data = linear_attention_measurements()
    n = data["seq_lens"]
    labels = {
        "softmax": "softmax, explicit (book's DotProductAttention)",
        "softmax_fused": "softmax, PyTorch fused SDPA",
        "linear": "linear attention (elu + 1)",
    }
    fig = new_figure((8.6, 3.5))
    with plt.rc_context(BOOK_STYLE):
        time_ax, memory_ax = fig.subplots(1, 2)
        for method, label in labels.items():
            milliseconds = [1e3 * t for t in data[method]["seconds"]]
            mib = [b / 2**20 for b in data[method]["bytes"]]
            time_ax.plot(n, milliseconds, "o-", color=COLORS[method], label=label, ms=3)
            memory_ax.plot(n, mib, "o-", color=COLORS[method], label=label, ms=3)
        for ax, ylabel in (
            (time_ax, "CPU time (ms, median)"),
            (memory_ax, "peak tensor memory (MiB)"),
        ):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length n")
            ax.set_ylabel(ylabel)
        time_ax.legend(fontsize=7)
        fig.suptitle(
            f"Causal, forward only, 4 heads of {LINEAR_HEAD_DIM}, float32, one CPU thread",
            fontsize=10,
        )
        fig.tight_layout()
    return fig


def _crossover(seq_lens: list[int], ours: list[float], theirs: list[float]) -> int | None:
    """The first length from which `ours` stays below `theirs`, or None."""
    for index, n in enumerate(seq_lens):
        if all(a < b for a, b in zip(ours[index:], theirs[index:], strict=True)):
            return n
    return None


def optimizations_linear_crossover() -> str:
    """Markdown table: from which length linear attention is faster and smaller."""
    data = linear_attention_measurements()
    n = data["seq_lens"]
    linear = data["linear"]
    lines = [
        "| linear attention compared with | faster from | less memory from |",
        "| --- | --- | --- |",
    ]
    for method, name in (("softmax", "explicit softmax"), ("softmax_fused", "fused SDPA")):
        cells = []
        for quantity in ("seconds", "bytes"):
            at = _crossover(n, linear[quantity], data[method][quantity])
            cells.append(f"n = {at:,}" if at else "no measured length")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    ratio = data["softmax_fused"]["seconds"][-1] / linear["seconds"][-1]
    growth = {
        m: data[m]["bytes"][-1] / data[m]["bytes"][-2]
        for m in ("softmax", "softmax_fused", "linear")
    }
    lines += [
        "",
        f'*In this build, lengths {n[0]} to {n[-1]:,} (doubling); "from" means at that '
        f"length and every longer one. At n = {n[-1]:,} fused softmax attention took "
        f"{ratio:.1f}× the time of linear attention (CPU time of one thread, median of "
        f"three runs). From n = {n[-2]:,} to {n[-1]:,}, the peak tensor memory grew "
        f"{growth['softmax']:.1f}× for explicit softmax, {growth['softmax_fused']:.1f}× for "
        f"fused softmax and {growth['linear']:.1f}× for linear attention (4× when it grows "
        "with the square of the length, 2× when it grows in proportion).*",
    ]
    return "\n".join(lines)


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    optimizations_generation_sample,
    optimizations_cache_timings,
    optimizations_cache_speedup,
    optimizations_variants_table,
    optimizations_variant_facts,
    optimizations_loss_facts,
    optimizations_rope_error,
    optimizations_loss_by_position,
    optimizations_extrapolation,
    optimizations_receptive_field,
    optimizations_sparse_patterns,
    optimizations_linear_scaling,
    optimizations_linear_crossover,
)
