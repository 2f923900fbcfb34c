"""Figures and build-time tables of the chapter "Transformer optimizations".

Drawing only: the trainings and measurements they show live in
`attention_book.experiments.optimizations`. The deep dives' figures have their own modules:
`attention_book.figures.optimizations_positions`, `.optimizations_windows` and
`.optimizations_linear`.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
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
    generation_timings,
)
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "optimizations_cache_speedup",
    "optimizations_cache_timings",
    "optimizations_cache_verdict",
    "optimizations_generation_sample",
    "optimizations_loss_facts",
    "optimizations_shared_heads_verdict",
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


#: The figures and build-time tables of this module, in the order of the chapter.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    optimizations_generation_sample,
    optimizations_cache_timings,
    optimizations_cache_speedup,
    optimizations_variants_table,
    optimizations_variant_facts,
    optimizations_loss_facts,
)
