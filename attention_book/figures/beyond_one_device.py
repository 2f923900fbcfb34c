"""Figures and build-time tables of the chapter "Attention beyond one device".

Drawing only: the runs and measurements they show live in
`attention_book.experiments.beyond_one_device`.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.experiments.beyond_one_device import (
    BATCHING_BLOCK_SIZE,
    BATCHING_MAX_BATCH,
    RING_COSTS_SHAPE,
    RING_WORLD_SIZES,
    WORKLOAD_MAX_NEW,
    beyond_batching,
    beyond_paged_memory,
    beyond_parallel_sampling,
    beyond_ring_balance,
    beyond_ring_costs,
    beyond_ring_errors,
    beyond_ring_overlap,
)
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure

__all__ = [
    "FIGURES",
    "beyond_batching_facts",
    "beyond_batching_timeline",
    "beyond_paged_facts",
    "beyond_paged_memory_bars",
    "beyond_ring_balance_grid",
    "beyond_ring_costs_table",
    "beyond_ring_errors_table",
    "beyond_ring_facts",
    "beyond_verdict",
]

COLORS = {"static": "#d62728", "continuous": "#1f77b4", "used": "#2ca02c"}
LAYOUT_NAMES = {"contiguous": "contiguous split", "zigzag": "zig-zag split"}


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f}"


# ---------------------------------------------------------------------------------------------
# Ring attention


def beyond_ring_errors_table() -> str:
    """Markdown table: largest difference from single-process attention, every case."""
    cases = [(layout, causal) for layout in LAYOUT_NAMES for causal in (False, True)]
    largest = {}
    for row in beyond_ring_errors():
        key = (row["world_size"], row["layout"], row["causal"])
        largest[key] = max(row["forward"], row["backward"])
    rows = [
        [str(p), *(f"{largest[p, layout, causal]:.1e}" for layout, causal in cases)]
        for p in sorted({key[0] for key in largest})
    ]
    header = ["P", *(f"{LAYOUT_NAMES[l]}{', causal' if c else ''}" for l, c in cases)]
    return markdown_table(header, rows)


def beyond_ring_costs_table() -> str:
    """Markdown table: bytes sent and peak tensor memory per process, measured and by formula."""
    rows = []
    for row in beyond_ring_costs():
        rows.append([
            str(row["world_size"]), f"{row['rows']:,}", _mib(row["block_bytes"]),
            f"{_mib(row['bytes_forward'])} / {_mib(row['formula_forward'])}",
            f"{_mib(row['bytes_backward'])} / {_mib(row['formula_backward'])}",
            f"{_mib(row['peak_forward'])} / {_mib(row['formula_peak_forward'])}",
            _mib(row["peak_backward"]),
        ])  # fmt: skip
    header = [
        "P", "queries per process", "β (MiB)", "sent, forward: measured / formula",
        "sent, backward: measured / formula", "peak memory, forward: measured / formula",
        "peak memory, backward",
    ]  # fmt: skip
    return markdown_table(header, rows)


def beyond_ring_balance_grid() -> Figure:
    """Causal work of each rank at each step: pairs counted and CPU time measured, both splits."""
    balance = beyond_ring_balance()
    fig = new_figure((8.4, 5.4))
    with plt.rc_context(BOOK_STYLE):
        axes = fig.subplots(2, 2)
        for row, layout in enumerate(("contiguous", "zigzag")):
            panels = (
                ("pairs", "query-key pairs computed (counted)", 1e-3, "{:.0f}k"),
                ("seconds", "CPU time of the step, ms (measured)", 1e3, "{:.1f}"),
            )
            for col, (key, title, scale, fmt) in enumerate(panels):
                ax = axes[row, col]
                values = [[v * scale for v in rank] for rank in balance[layout][key]]
                top = scale * max(v for lay in balance.values() for rank in lay[key] for v in rank)
                ax.imshow(values, cmap="Blues", vmin=0, vmax=top, aspect="auto")
                for r, rank in enumerate(values):
                    for t, value in enumerate(rank):
                        color = "white" if value > 0.6 * top else "black"
                        ax.text(t, r, fmt.format(value), ha="center", va="center", fontsize=8,
                                color=color)  # fmt: skip
                ax.set_xticks(range(len(values[0])))
                ax.set_yticks(range(len(values)))
                ax.set_xlabel("step t")
                ax.set_ylabel("rank r")
                ax.set_title(f"{LAYOUT_NAMES[layout]}: {title}", fontsize=9)
        fig.suptitle("Causal ring attention on 4 processes: who works at each step", fontsize=10)
        fig.tight_layout()
    return fig


def beyond_verdict(
    *,
    formula_exact: bool | None = None,
    paged_same: bool | None = None,
    batching_same: bool | None = None,
) -> dict[str, str]:
    """The chapter's words that depend on its measurements: whether two results agree.

    Each argument is optional, so that each values function gives only what it measured.

    Args:
        formula_exact: Whether every measured forward peak of the ring equals the formula.
        paged_same: Whether the parallel samples drew the same tokens with and without a
            shared prompt.
        batching_same: Whether every request got under continuous batching the tokens it gets
            alone.

    Returns:
        For each argument given: ``"formula_exact"`` (``"equal"`` or ``"not equal"``),
        ``"paged_same"`` and ``"batching_same"`` (``"the same"`` or ``"not the same"``).
    """
    words = {}
    if formula_exact is not None:
        words["formula_exact"] = "equal" if formula_exact else "not equal"
    for key, same in (("paged_same", paged_same), ("batching_same", batching_same)):
        if same is not None:
            words[key] = "the same" if same else "not the same"
    return words


def beyond_ring_facts() -> dict[str, str]:
    """Values for the prose: balance, overlap and memory of the ring, as this build measured.

    Returns:
        "contiguous_pairs_ratio", "zigzag_pairs_ratio" (the slowest rank's work summed over
        the steps, over the mean rank's, counted in pairs), the same measured in CPU seconds
        ("contiguous_seconds_ratio", "zigzag_seconds_ratio"), "critical_speedup" (contiguous
        over zig-zag, measured), "step_ms", "hop_ms", "hidden" (what a perfect overlap would
        save of a step), "memory_ratio" (peak forward memory at the largest P over P = 1),
        "largest_p", "formula_exact" (`beyond_verdict`: whether every measured forward peak
        equals the formula), "largest_error" (of `beyond_ring_errors`) and the shape of the
        runs ("seq_len", "shape").
    """
    balance, overlap, costs = beyond_ring_balance(), beyond_ring_overlap(), beyond_ring_costs()
    errors = beyond_ring_errors()
    facts = {}
    for layout in ("contiguous", "zigzag"):
        for key in ("pairs", "seconds"):
            ratio = balance[layout][f"{key}_critical"] / balance[layout][f"{key}_mean"]
            facts[f"{layout}_{key}_ratio"] = f"{ratio:.2f}"
    speedup = balance["contiguous"]["seconds_critical"] / balance["zigzag"]["seconds_critical"]
    one, last = costs[0], costs[-1]
    exact = all(r["peak_forward"] == r["formula_peak_forward"] for r in costs)
    batch, heads, seq_len, head_dim = RING_COSTS_SHAPE
    return {
        **facts,
        "critical_speedup": f"{speedup:.2f}",
        "step_ms": f"{1e3 * overlap['step_seconds']:.1f}",
        "hop_ms": f"{1e3 * overlap['hop_seconds']:.1f}",
        "hidden": f"{overlap['hidden']:.0%}",
        "memory_ratio": f"{last['peak_forward'] / one['peak_forward']:.2f}",
        "largest_p": str(RING_WORLD_SIZES[-1]),
        **beyond_verdict(formula_exact=exact),
        "largest_error": f"{max(max(r['forward'], r['backward']) for r in errors):.1e}",
        "seq_len": f"{seq_len:,}",
        "shape": f"batch {batch}, {heads} heads of {head_dim}",
    }


# ---------------------------------------------------------------------------------------------
# The paged cache


def beyond_paged_memory_bars() -> Figure:
    """Cache memory of the workload: contiguous reservations and paged allocations, vs used."""
    memory = beyond_paged_memory()
    labels = ["contiguous,\nmodel max_len", "contiguous,\nrequest's max"]
    values = [memory["contiguous_max_len"], memory["contiguous_request"]]
    for block_size, nbytes in sorted(memory["paged"].items(), reverse=True):
        labels.append(f"paged,\nblocks of {block_size}")
        values.append(nbytes)
    fig = new_figure((8.4, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.subplots()
        colors = ["#d62728", "#d62728"] + ["#1f77b4"] * len(memory["paged"])
        ax.bar(range(len(values)), [v / 2**20 for v in values], color=colors)
        ax.axhline(memory["used"] / 2**20, color=COLORS["used"], lw=1.5, ls="--",
                   label="what the positions need")  # fmt: skip
        for i, value in enumerate(values):
            waste = 1 - memory["used"] / value
            ax.text(i, value / 2**20, f"{waste:.0%}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(values)), labels, fontsize=7)
        ax.set_ylabel("MiB for all requests")
        ax.set_title(
            f"Key/value memory of {memory['requests']} requests at their longest "
            "(percent: share reserved but unused)", fontsize=9,
        )  # fmt: skip
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def beyond_paged_facts() -> dict[str, str]:
    """Values for the prose: the waste of each cache, and what sharing a prompt saves.

    Returns:
        "waste_max_len", "waste_request", "waste_16" and "waste_1" (shares reserved but
        unused), "used_mib", "requests", and of the parallel samples: "prompt", "samples",
        "sample_tokens", "shared_blocks", "copied_blocks", "saved" and "same" (`beyond_verdict`:
        whether the samples drew the same tokens both ways).
    """
    memory, sampling = beyond_paged_memory(), beyond_parallel_sampling()
    return {
        "waste_max_len": f"{1 - memory['used'] / memory['contiguous_max_len']:.0%}",
        "waste_request": f"{1 - memory['used'] / memory['contiguous_request']:.0%}",
        "waste_16": f"{1 - memory['used'] / memory['paged'][16]:.0%}",
        "waste_64": f"{1 - memory['used'] / memory['paged'][64]:.0%}",
        "used_mib": _mib(memory["used"]),
        "requests": str(memory["requests"]),
        "prompt": str(sampling["prompt"]),
        "samples": str(sampling["num_samples"]),
        "sample_tokens": str(sampling["max_new_tokens"]),
        "shared_blocks": str(sampling["shared"]),
        "copied_blocks": str(sampling["copied"]),
        "saved": f"{1 - sampling['shared'] / sampling['copied']:.0%}",
        "same": beyond_verdict(paged_same=sampling["same"])["paged_same"],
    }


# ---------------------------------------------------------------------------------------------
# Continuous batching


def beyond_batching_timeline() -> Figure:
    """Sequences still generating at each step, and when each request was done, both policies."""
    result = beyond_batching()
    fig = new_figure((8.4, 3.3))
    with plt.rc_context(BOOK_STYLE):
        busy, done = fig.subplots(1, 2)
        for policy in ("static", "continuous"):
            run = result[policy]
            steps = range(1, run["steps"] + 1)
            spans = list(zip(run["start_step"], run["finish_step"], strict=True))
            useful = [sum(start <= s <= end for start, end in spans) for s in steps]
            label = f"{policy} ({run['steps']} steps)"
            busy.step(steps, useful, where="mid", color=COLORS[policy], lw=1, label=label)
            finished = sorted(run["finish_seconds"])
            done.step(finished, range(1, len(finished) + 1), where="post", color=COLORS[policy],
                      lw=1.5, label=policy)  # fmt: skip
        busy.axhline(BATCHING_MAX_BATCH, color="gray", lw=0.8, ls=":")
        busy.set_xlabel("step")
        busy.set_ylabel("sequences still generating")
        busy.set_title(f"Useful places in a batch of {BATCHING_MAX_BATCH}", fontsize=10)
        busy.set_ylim(0, BATCHING_MAX_BATCH + 1)
        busy.legend(fontsize=8, loc="lower left")
        done.set_xlabel("CPU seconds of the server since all requests arrived")
        done.set_ylabel("requests done")
        done.set_title("Requests done over time (this build)", fontsize=10)
        done.legend(fontsize=8)
        fig.tight_layout()
    return fig


def beyond_batching_facts() -> dict[str, str]:
    """Values for the prose: steps, throughput and latency of both policies, and their ratios.

    Returns:
        Per policy ("static_", "continuous_"): "steps", "seconds", "tokens_per_second",
        "mean_latency" (seconds); the ratios "steps_ratio", "throughput_ratio",
        "latency_ratio" (static over continuous, continuous's throughput over static's);
        "same" (`beyond_verdict`: whether every request got the tokens it gets alone), "tokens",
        "requests", "stopped" (requests that ended at the stop token, before their limit),
        "median_tokens" (tokens generated per request), "max_batch", "block_size" and
        "max_new".
    """
    result = beyond_batching()
    facts = {}
    for policy in ("static", "continuous"):
        run = result[policy]
        latency = sum(run["finish_seconds"]) / len(run["finish_seconds"])
        facts[f"{policy}_steps"] = str(run["steps"])
        facts[f"{policy}_seconds"] = f"{run['seconds']:.2f}"
        facts[f"{policy}_tokens_per_second"] = f"{result['tokens'] / run['seconds']:,.0f}"
        facts[f"{policy}_mean_latency"] = f"{latency:.2f}"
        facts[f"_{policy}_latency"] = latency
    static, continuous = result["static"], result["continuous"]
    return {
        **{k: v for k, v in facts.items() if not k.startswith("_")},
        "steps_ratio": f"{static['steps'] / continuous['steps']:.2f}",
        "throughput_ratio": f"{static['seconds'] / continuous['seconds']:.2f}",
        "latency_ratio": f"{facts['_static_latency'] / facts['_continuous_latency']:.2f}",
        "same": beyond_verdict(batching_same=result["same_as_alone"])["batching_same"],
        "tokens": f"{result['tokens']:,}",
        "requests": str(len(static["tokens"])),
        "stopped": str(sum(t[-1] == result["eos"] for t in continuous["tokens"])),
        "median_tokens": str(int(statistics.median(map(len, continuous["tokens"])))),
        "max_batch": str(BATCHING_MAX_BATCH),
        "block_size": str(BATCHING_BLOCK_SIZE),
        "max_new": str(WORKLOAD_MAX_NEW),
    }


FIGURES = (
    beyond_ring_errors_table,
    beyond_ring_costs_table,
    beyond_ring_balance_grid,
    beyond_ring_facts,
    beyond_paged_memory_bars,
    beyond_paged_facts,
    beyond_batching_timeline,
    beyond_batching_facts,
)
