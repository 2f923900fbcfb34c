"""Figures of the deep dive "FlashAttention on a GPU": the roofline and the GPU run.

The roofline model of naive and tiled attention against the ridge points of the GPUs of
`attention_book.experiments.flash`, and the throughput that ``benchmarks/flash_gpu.py``
measures on a CUDA GPU and commits as ``flash_gpu.json`` (read from `results_dir`, see
`attention_book.figures`).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.experiments.flash import GPUS, flash_attention_intensity
from attention_book.figures import inline_svg
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "flash_gpu_results",
    "flash_gpu_verdict",
    "flash_roofline",
    "flash_roofline_facts",
]


def flash_roofline() -> Figure:
    """Arithmetic intensity of naive and tiled attention against the GPUs' ridge points.

    The tiled kernel is drawn twice: with K and V fetched from HBM once (the re-reads of every
    query block served by the L2 cache), and with K and V re-read from HBM for every block of
    B_r = 128 queries, no reuse at all. The second levels off near B_r FLOP per byte.
    """
    seq_lens = [2**p for p in range(7, 16)]
    block_m = 128
    fig = new_figure((7.8, 3.8))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for head_dim, style in ((64, "--"), (128, "-")):
            naive = [flash_attention_intensity(n, head_dim)["naive"] for n in seq_lens]
            ax.plot(seq_lens, naive, style, color="tab:red", label=f"naive, d={head_dim}")
        ideal = [flash_attention_intensity(n, 128)["flash"] for n in seq_lens]
        ax.plot(seq_lens, ideal, "-", color="tab:blue", label="tiled, K/V from HBM once (L2 reuse)")
        reread = [flash_attention_intensity(n, 128, block_m=block_m)["flash"] for n in seq_lens]
        label = f"tiled, K/V re-read per {block_m} queries"
        ax.plot(seq_lens, reread, ":", color="tab:blue", linewidth=2, label=label)
        ax.text(seq_lens[-1], reread[-1] * 0.8, f"→ $B_r$ = {block_m}", ha="right", va="top",
                fontsize=8, color="tab:blue")  # fmt: skip
        colors = ("tab:gray", "tab:green", "tab:purple")
        for (name, gpu), color in zip(GPUS.items(), colors, strict=True):
            ridge = gpu["tflops"] / gpu["hbm_tb_s"]
            ax.axhline(ridge, color=color, linewidth=1.2, label=f"ridge {ridge:.0f}: {name}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel("FLOP per byte of HBM traffic")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
    return fig


def flash_gpu_verdict(limit: float, ridges: dict[str, float]) -> dict[str, str]:
    """The page's words on the roofline that depend on its numbers.

    Args:
        limit: The intensity (FLOP per byte) at which tiled attention levels off when K and V
            are re-read from HBM for every block of queries.
        ridges: Each GPU's ridge point (FLOP per byte), by name.

    Returns:
        ``"no_reuse"``: where that level stands against the ridge points (below every one,
        naming the lowest, or below which).
    """
    below = [name for name, ridge in ridges.items() if limit < ridge]
    if len(below) == len(ridges):
        lowest = min(ridges, key=ridges.get)
        return {
            "no_reuse": (
                f"below the ridge point of every GPU in the table (the lowest is {lowest}'s, "
                f"{ridges[lowest]:.0f}): without reuse, tiled attention is memory-bound on all "
                "of them too"
            )
        }
    names = ", ".join(below) if below else "none"
    return {"no_reuse": f"below the ridge points of these GPUs of the table: {names}"}


def flash_roofline_facts() -> dict[str, str]:
    """Where each tiled line of the roofline stands against each ridge point, for the bullets.

    Returns:
        ``"block_m"`` (the query block of the re-reads), ``"limit"`` (the intensity they level
        off at), ``"crossings"`` (where the n/2 line crosses each GPU's ridge point), and
        `flash_gpu_verdict`'s words.
    """
    block_m = 128
    ridges = {name: gpu["tflops"] / gpu["hbm_tb_s"] for name, gpu in GPUS.items()}
    limit = flash_attention_intensity(2**30, 128, block_m=block_m)["flash"]
    return {
        "block_m": str(block_m),
        "limit": f"{limit:.0f}",
        "crossings": ", ".join(f"{name} at n = {2 * ridge:,.0f}" for name, ridge in ridges.items()),
        **flash_gpu_verdict(limit, ridges),
    }


def _gpu_results_figure(rows: list[dict]) -> Figure:
    """Forward TFLOP/s against sequence length, one panel per (head_dim, causal)."""
    dtype = rows[0]["dtype"] if rows else "bfloat16"
    configs = sorted({(r["head_dim"], r["causal"]) for r in rows})
    providers = list(dict.fromkeys(r["provider"] for r in rows))
    fig = new_figure((3.2 * max(1, len(configs)), 3.4))
    with plt.rc_context(BOOK_STYLE):
        axes = fig.subplots(1, max(1, len(configs)), squeeze=False)[0]
        for ax, (head_dim, causal) in zip(axes, configs, strict=False):
            for provider in providers:
                points = sorted(
                    (r["seq_len"], r["fwd_tflops"]) for r in rows
                    if (r["provider"], r["head_dim"], r["causal"], r["dtype"])
                    == (provider, head_dim, causal, dtype)
                )  # fmt: skip
                if points:
                    ax.plot(*zip(*points, strict=True), "o-", label=provider, markersize=3)
            ax.set_xscale("log", base=2)
            ax.set_title(f"d={head_dim}, {'causal' if causal else 'not causal'}", fontsize=9)
            ax.set_xlabel("sequence length")
        axes[0].set_ylabel(f"forward TFLOP/s ({dtype})")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
    return fig


def _gpu_results_markdown(path: Path) -> str:
    """The GPU section's content: a plain note without results, else a table and a figure."""
    if not path.exists():
        return (
            "*No GPU run yet: this build found no `benchmarks/results/flash_gpu.json`, so the "
            "figure and the table described above are not drawn here. Running "
            "`python benchmarks/flash_gpu.py` on a CUDA GPU writes that file, and the next "
            "build draws them in this place.*"
        )
    report = json.loads(path.read_text(encoding="utf-8"))
    env = report["environment"]
    rows = [r for r in report["results"] if "fwd_tflops" in r]
    image = inline_svg(_gpu_results_figure(rows), "Forward TFLOP/s against sequence length")
    table = [
        "| provider | dtype | d | causal | n | fwd TFLOP/s | fwd+bwd TFLOP/s | tiles chosen |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        tiles = "; ".join(
            f"{name} {'×'.join(map(str, tile[:2]))}, {tile[2]} warps, {tile[3]} stages"
            for name, tile in r.get("tuned", {}).items()
        )  # the autotuner's choice, recorded for this book's kernel only
        table.append(
            f"| {r['provider']} | {r['dtype']} | {r['head_dim']} | {r['causal']} | "
            f"{r['seq_len']} | {r['fwd_tflops']:.1f} | {r['fwd_bwd_tflops']:.1f} | {tiles} |"
        )
    verdicts = [
        f"- {'met' if check['passed'] else 'not met'}: {check['target']} "
        f"({', '.join(f'{k}={v}' for k, v in check['config'].items())})"
        for check in report.get("targets", [])
    ]
    if verdicts:
        verdicts = ["Targets, as checked by the script on this run:", "", *verdicts, ""]
    table = ['??? info "Every measurement of this run"', ""] + [f"    {line}" for line in table]
    return "\n".join([
        f"Measured on **{env.get('gpu')}** (driver {env.get('driver')}, CUDA {env.get('cuda')}, "
        f"PyTorch {env.get('torch')}, Triton {env.get('triton')}) on {env.get('date_utc')}.",
        "",
        image,
        "",
        *verdicts,
        *table,
    ])  # fmt: skip


def flash_gpu_results(results_dir: Path) -> str:
    """GPU throughput from ``flash_gpu.json`` in `results_dir`, or a note that none exists.

    Args:
        results_dir: The directory ``benchmarks/flash_gpu.py`` writes its results to.

    Returns:
        Markdown: a sentence on the run, a figure, and a table of every measurement.
    """
    return _gpu_results_markdown(Path(results_dir) / "flash_gpu.json")


#: The figures and build-time tables of this module, in the order of the page.
FIGURES = (flash_roofline, flash_roofline_facts, flash_gpu_results)
