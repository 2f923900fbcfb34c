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
    BASELINE_SEEDS,
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
    "optimizations_cache_timings",
    "optimizations_facts",
    "optimizations_generation_sample",
    "optimizations_variants_table",
    "optimizations_verdict",
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
SAMPLE_LENGTH = 150  # characters generated for each prompt
SHORT = {
    "gqa": "grouped-query attention",
    "mqa": "multi-query attention",
    "sinusoidal": "sinusoidal positions",
    "linear": "linear attention",
    "alibi": "ALiBi",
}


# ---------------------------------------------------------------------------------------------
# Section 1: the key/value cache


def _generation_lines() -> tuple[list[str], int]:
    """The baseline's greedy continuation of each sample prompt, up to its first line break.

    Returns:
        (the lines, shortened to `SAMPLE_WIDTH`; how many occur word for word in the training
        text).
    """
    model = optimizations_trained_model("baseline")
    training = set(optimizations_text("train").splitlines())
    lines, copied = [], 0
    for prompt in SAMPLE_PROMPTS:
        prompt_tokens = optimizations_encode(prompt)[None, :]  # (1, n)
        tokens = model.generate(prompt_tokens, SAMPLE_LENGTH)  # (1, n + SAMPLE_LENGTH)
        line = optimizations_decode(tokens[0]).split("\n")[0]  # up to the first line break
        copied += line in training
        lines.append(line if len(line) <= SAMPLE_WIDTH else line[: SAMPLE_WIDTH - 1] + "…")
    return lines, copied


def optimizations_generation_sample() -> str:
    """Markdown: the trained baseline's greedy continuations of three prompts."""
    lines, _ = _generation_lines()
    return "```text\n" + "\n".join(lines) + "\n```"


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
    return "\n".join(lines)


def _growth(timings: dict[str, list[float]]) -> tuple[int, int, dict[str, float], dict[str, float]]:
    """How the time of a step and the total time grew, with and without the cache.

    A step's time is read as the median over a quarter of the steps (the first quarter against
    the last), so that one slow step does not decide; the total as the time of all steps
    against that of the first half.

    Returns:
        (a quarter of the steps, half of them, each method's growth of a step's time, each
        method's growth of the total), the methods being "cache" and "no_cache".

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
    return quarter, half, growth, doubling


def _listed(words: list[str]) -> str:
    """Words as a sentence lists them: "a", "a and b", "a, b and c"."""
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def optimizations_verdict(
    *, timings: dict[str, list[float]], deltas: dict[str, float], seed_spread: float
) -> dict[str, str]:
    """The core page's words that depend on its numbers; the rest of each sentence is the page's.

    Args:
        timings: `generation_timings`' result: "positions", and the seconds of each step per
            method ("cache", "no_cache").
        deltas: Validation loss minus the baseline's, for each variant of `SHORT`.
        seed_spread: How far apart the baseline's runs with its random seeds ended: the
            highest validation loss minus the lowest (at least 0).

    Returns:
        ``"cache_growth"``: a sentence, whether a step's time grew without the cache and hardly
        with it; ``"measurable"``: the variants that moved the loss by more than twice the
        seeds' spread, or that none did; ``"shared"``: a sentence, whether sharing key/value
        heads cost a loss that the seeds' spread can resolve.

    Raises:
        ValueError: If fewer than 8 steps were timed, or `seed_spread` is negative.
    """
    if seed_spread < 0:
        raise ValueError(f"seed_spread must be at least 0, got {seed_spread}")
    _, _, growth, _ = _growth(timings)
    words = {}
    if growth["no_cache"] >= 2 and growth["cache"] < 1.5:
        words["cache_growth"] = (
            "So without the cache the time of a step grew with the position, and with it the "
            "time of a step hardly grew: in a model this small the attention over a few hundred "
            "cached keys is cheap next to the fixed cost of running the layers, and of Python, "
            "for one token."
        )
    elif growth["no_cache"] > growth["cache"]:
        words["cache_growth"] = (
            "The time of a step grew with the position, faster without the cache."
        )
    else:
        words["cache_growth"] = "In this build the cache did not slow the growth of a step's time."
    measurable = [SHORT[v] for v in SHORT if abs(deltas[v]) > 2 * seed_spread]
    words["measurable"] = (
        "more than twice that spread from the baseline: " + ", ".join(measurable) + "."
        if measurable
        else "no variant differs from the baseline by more than twice that spread."
    )
    beyond = [v for v in ("gqa", "mqa") if abs(deltas[v]) > 2 * seed_spread]
    if not beyond:
        words["shared"] = (
            "Neither grouped-query nor multi-query attention moved the validation loss by more "
            "than twice the spread of the baseline over its random seeds: in this run, the "
            "smaller caches cost no loss that this experiment can resolve."
        )
    else:
        parts = [f"{SHORT[v]} by {deltas[v]:+.3f}" for v in beyond]
        words["shared"] = (
            "Sharing key/value heads moved the validation loss by more than twice the spread "
            "of the baseline over its random seeds: " + " and ".join(parts) + " nats per character."
        )
    return words


def optimizations_facts() -> dict[str, str]:
    """The numbers the chapter's sentences cite, and `optimizations_verdict`'s words on them.

    Read from the stored runs (each variant's validation loss and size, the baseline's
    training), the sample of the trained baseline, and the timings of generation with and
    without the cache measured in this build.

    Returns:
        Among others "seeds" (how many random seeds the baseline was trained with, "3"),
        "other_seed_losses" (the validation losses of its runs other than the first,
        "0.402, 0.409, 0.405 and 0.404"), "seed_spread" (the highest of its losses minus the lowest,
        "0.005"), per
        variant other than the baseline "<variant>_delta" (its validation loss minus the
        baseline's, "+0.004"), "gqa_fewer" and "mqa_fewer" (the parameters grouped-query and
        multi-query attention save, as a share of the baseline's, "7.7%"), and
        "gqa_parameters", "mqa_parameters", "baseline_parameters".
    """
    baseline = optimizations_experiment("baseline")
    others = [
        optimizations_experiment("baseline", seed=s)["valid_loss"] for s in BASELINE_SEEDS[1:]
    ]
    losses = [baseline["valid_loss"], *others]
    seed_spread = max(losses) - min(losses)
    deltas = {v: optimizations_experiment(v)["valid_loss"] - baseline["valid_loss"] for v in SHORT}
    counts = {
        variant: sum(p.numel() for p in optimizations_make_model(variant).parameters())
        for variant in ("baseline", "gqa", "mqa")
    }
    lines, copied = _generation_lines()
    timings = generation_timings()
    quarter, half, growth, doubling = _growth(timings)
    no_cache, cache = timings["no_cache"], timings["cache"]
    config = OPTIMIZATIONS_CONFIG
    facts = {
        "seeds": str(len(BASELINE_SEEDS)),
        "seed_spread": f"{seed_spread:.3f}",
        "other_seed_losses": _listed([f"{loss:.3f}" for loss in others]),
        "context": str(config.context),
        "valid_windows": str(config.valid_windows),
        "num_steps": str(config.num_steps),
        "batch_size": str(config.batch_size),
        "sample_prompts": str(len(SAMPLE_PROMPTS)),
        "sample_length": str(SAMPLE_LENGTH),
        "sample_width": str(SAMPLE_WIDTH),
        "sample_lines": str(len(lines)),
        "sample_copied": str(copied),
        "baseline_cpu_seconds": f"{baseline['train_cpu_seconds']:.0f}",
        "cache_steps": str(len(timings["positions"])),
        "no_cache_last_ms": f"{1e3 * no_cache[-1]:.2f}",
        "cache_last_ms": f"{1e3 * cache[-1]:.2f}",
        "speedup_last": f"{no_cache[-1] / cache[-1]:.1f}",
        "speedup_first": f"{no_cache[0] / cache[0]:.1f}",
        "no_cache_seconds": f"{sum(no_cache):.2f}",
        "cache_seconds": f"{sum(cache):.2f}",
        "speedup_total": f"{sum(no_cache) / sum(cache):.1f}",
        "quarter": str(quarter),
        "half": str(half),
        "growth_no_cache": f"{growth['no_cache']:.1f}",
        "growth_cache": f"{growth['cache']:.1f}",
        "doubling_no_cache": f"{doubling['no_cache']:.1f}",
        "doubling_cache": f"{doubling['cache']:.1f}",
    }
    facts |= {f"{v}_delta": f"{delta:+.3f}" for v, delta in deltas.items()}
    facts |= {f"{v}_parameters": f"{n:,}" for v, n in counts.items()}
    for variant in ("gqa", "mqa"):
        facts[f"{variant}_fewer"] = f"{1 - counts[variant] / counts['baseline']:.1%}"
    return facts | optimizations_verdict(timings=timings, deltas=deltas, seed_spread=seed_spread)


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    optimizations_generation_sample,
    optimizations_cache_timings,
    optimizations_variants_table,
    optimizations_facts,
)
