"""Figures and build-time numbers of the FlashAttention chapter.

Memory is measured with `attention_book.flash.measure_tensor_memory`, which counts the bytes of
every tensor PyTorch operators create and frees them as Python releases them. To keep the build
fast, the large sizes run on PyTorch's ``meta`` device: the same code and the same operators,
with shapes and allocations but no arithmetic. At the small sizes the functions also run on
real CPU tensors, check that the two counts agree and that naive and tiled outputs are equal.
"""

from __future__ import annotations

import base64
import functools
import io
import json
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.flash import measure_tensor_memory, naive_attention, tiled_attention_forward
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "GPUS",
    "flash_attention_intensity",
    "flash_causal_blocks",
    "flash_gpu_results",
    "flash_gpu_specs",
    "flash_memory_growth",
    "flash_memory_ratio",
    "flash_memory_rss",
    "flash_roofline",
]

#: Public specifications of three data-center GPUs (SXM boards), from NVIDIA's data sheets and
#: architecture whitepapers: dense (no sparsity) FP16/BF16 Tensor Core throughput in TFLOP/s,
#: HBM bandwidth in TB/s, HBM capacity in GB, streaming multiprocessors, the largest shared
#: memory (SRAM) one SM can give a kernel in KB, and the L2 cache in MB.
GPUS = {
    "A100 SXM 80GB": {
        "tflops": 312, "hbm_tb_s": 2.039, "hbm_gb": 80, "sms": 108, "smem_kb": 164, "l2_mb": 40,
    },
    "H100 SXM": {
        "tflops": 989, "hbm_tb_s": 3.35, "hbm_gb": 80, "sms": 132, "smem_kb": 228, "l2_mb": 50,
    },
    "H200 SXM": {
        "tflops": 989, "hbm_tb_s": 4.8, "hbm_gb": 141, "sms": 132, "smem_kb": 228, "l2_mb": 50,
    },
}  # fmt: skip

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
GPU_RESULTS = RESULTS / "flash_gpu.json"
MEMORY_RESULTS = RESULTS / "flash_memory.json"
MEMORY_SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
MEMORY_BLOCK = 512
MEMORY_HEAD_DIM = 64
CHECKED_ON_CPU = (1024, 2048)


# --8<-- [start:memory_measurements]
@functools.cache
def _memory_measurements() -> dict:
    """Peak tensor memory of naive and tiled forward passes, for each sequence length.

    One sequence, one head, head_dim 64, float32; the tiled reference uses 512 x 512 blocks.
    """
    peaks = {"naive": [], "tiled": []}
    max_difference = 0.0
    for seq_len in MEMORY_SEQ_LENS:
        devices = ("meta", "cpu") if seq_len in CHECKED_ON_CPU else ("meta",)
        for device in devices:
            generator = torch.Generator().manual_seed(seq_len)
            q, k, v = (
                torch.randn(1, 1, seq_len, MEMORY_HEAD_DIM, generator=generator).to(device)
                for _ in range(3)
            )
            with torch.no_grad():
                naive_out, naive_peak, _ = measure_tensor_memory(naive_attention, q, k, v)
                (tiled_out, _), tiled_peak, _ = measure_tensor_memory(
                    tiled_attention_forward, q, k, v, block_m=MEMORY_BLOCK, block_n=MEMORY_BLOCK
                )
            if device == "meta":
                peaks["naive"].append(naive_peak)
                peaks["tiled"].append(tiled_peak)
                continue
            # Real tensors: same allocation counts as on meta, and the same attention output.
            if (naive_peak, tiled_peak) != (peaks["naive"][-1], peaks["tiled"][-1]):
                raise AssertionError(f"meta and CPU memory counts differ at seq_len {seq_len}")
            difference = (naive_out - tiled_out).abs().max().item()
            if difference > 1e-5:
                raise AssertionError(f"naive and tiled outputs differ by {difference}")
            max_difference = max(max_difference, difference)
    return {"seq_lens": list(MEMORY_SEQ_LENS), **peaks, "max_difference": max_difference}


# --8<-- [end:memory_measurements]


def flash_memory_growth() -> Figure:
    """Peak memory of naive attention vs the tiled reference as the sequence grows (log-log)."""
    data = _memory_measurements()
    mib = 2**20
    fig = new_figure((5.6, 3.6))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        n = data["seq_lens"]
        ax.plot(n, [p / mib for p in data["naive"]], "o-", color="tab:red", label="naive")
        ax.plot(n, [p / mib for p in data["tiled"]], "s-", color="tab:blue", label="tiled")
        # Guides through the first point: slope 2 (quadratic) and slope 1 (linear).
        for key, power, style in (("naive", 2, ":"), ("tiled", 1, "--")):
            first = data[key][0] / mib
            ax.plot(n, [first * (x / n[0]) ** power for x in n], style, color="gray", linewidth=1)
        ax.text(n[-1], data["naive"][0] / mib * 16**2 * 1.3, "∝ n²", color="gray", ha="right")
        ax.text(n[-1], data["tiled"][0] / mib * 16 * 1.3, "∝ n", color="gray", ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(n, [f"{x // 1024}k" for x in n])
        ax.set_xlabel("sequence length n (queries = keys)")
        ax.set_ylabel("peak tensor memory (MiB)")
        ax.set_title("Forward pass, head_dim 64, float32, blocks 512×512", fontsize=9)
        ax.legend()
        fig.tight_layout()
    return fig


def flash_memory_ratio() -> str:
    """Markdown sentence with the measured peak memories at the longest sequence."""
    data = _memory_measurements()
    naive, tiled = data["naive"][-1], data["tiled"][-1]
    n = data["seq_lens"][-1]
    checked = " and ".join(f"{x:,}" for x in CHECKED_ON_CPU)
    return (
        f"At n = {n:,}, naive attention's tensors peak at **{naive / 2**20:,.0f} MiB** and the "
        f"tiled reference's at **{tiled / 2**20:,.1f} MiB**: a ratio of "
        f"**{naive / tiled:,.0f}×**. On real CPU tensors at n = {checked} the counts were the "
        f"same as on the meta device, and the two outputs differed by at most "
        f"{data['max_difference']:.1e}."
    )


def flash_memory_rss() -> str:
    """Table from ``benchmarks/results/flash_memory.json``: counted bytes vs process RSS."""
    if not MEMORY_RESULTS.exists():
        return (
            "*(No `benchmarks/results/flash_memory.json` yet: "
            "run `python benchmarks/flash_memory.py`.)*"
        )
    report = json.loads(MEMORY_RESULTS.read_text(encoding="utf-8"))
    mib = 2**20
    lines = [
        "| n | naive, counted (MiB) | naive, RSS growth (MiB) | tiled, counted (MiB) "
        "| tiled, RSS growth (MiB) | outputs agree |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["results"]:
        naive, tiled = row["naive"], row["tiled"]
        lines.append(
            f"| {row['seq_len']:,} | {naive['counted_bytes'] / mib:,.1f} "
            f"| {naive['rss_bytes'] / mib:,.1f} | {tiled['counted_bytes'] / mib:,.1f} "
            f"| {tiled['rss_bytes'] / mib:,.1f} | {'yes' if row['outputs_agree'] else 'no'} |"
        )
    env = report["environment"]
    lines.append(
        f"\n*Run of `benchmarks/flash_memory.py` on {env['date_utc'][:10]} ({env['machine']}, "
        f"PyTorch {env['torch']}).*"
    )
    return "\n".join(lines)


def flash_gpu_specs() -> str:
    """Markdown table of the GPUs' public specifications, with their ridge points."""
    lines = [
        "| GPU | FP16/BF16 TFLOP/s (dense) | HBM TB/s | HBM GB | SMs | shared memory per SM, KB "
        "| L2 MB | ridge point, FLOP/byte |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, gpu in GPUS.items():
        ridge = gpu["tflops"] / gpu["hbm_tb_s"]
        lines.append(
            f"| {name} | {gpu['tflops']} | {gpu['hbm_tb_s']} | {gpu['hbm_gb']} | {gpu['sms']} "
            f"| {gpu['smem_kb']} | {gpu['l2_mb']} | {ridge:.0f} |"
        )
    return "\n".join(lines)


# --8<-- [start:intensity]
def flash_attention_intensity(seq_len: float, head_dim: int, block_m: int | None = None) -> dict:
    """Forward-pass FLOP per byte of HBM traffic, 16-bit inputs, one (batch, head).

    - naive: Q, K, V read once; S = QK^T written, read by softmax, P written, read by PV.
    - flash: Q, K, V, O move once (``block_m`` None, perfect reuse), or K and V are read again
      for every block of ``block_m`` queries (no reuse across blocks).
    """
    n, d = seq_len, head_dim
    flops = 4 * n * n * d
    naive_bytes = 2 * (4 * n * d + 4 * n * n)  # Q, K, V, O + S written, read, P written, read
    reads_of_kv = 1 if block_m is None else n / block_m
    flash_bytes = 2 * (2 * n * d + 2 * n * d * reads_of_kv)
    return {"naive": flops / naive_bytes, "flash": flops / flash_bytes}


# --8<-- [end:intensity]


def flash_roofline() -> Figure:
    """Arithmetic intensity of naive and tiled attention against the GPUs' ridge points."""
    seq_lens = [2**p for p in range(7, 16)]
    fig = new_figure((7.6, 3.6))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for head_dim, style in ((64, "--"), (128, "-")):
            naive = [flash_attention_intensity(n, head_dim)["naive"] for n in seq_lens]
            ax.plot(seq_lens, naive, style, color="tab:red", label=f"naive, d={head_dim}")
        ideal = [flash_attention_intensity(n, 128)["flash"] for n in seq_lens]
        ax.plot(seq_lens, ideal, "-", color="tab:blue", label="tiled, each byte moved once")
        reread = [flash_attention_intensity(n, 128, block_m=128)["flash"] for n in seq_lens]
        ax.plot(seq_lens, reread, ":", color="tab:blue", label="tiled, K/V re-read per 128 rows")
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


def flash_causal_blocks() -> Figure:
    """Which (query block, key block) tiles a causal pass computes, for q_len < and > k_len."""
    from attention_book.flash import attention_mask

    block = 4
    fig = new_figure((7.0, 3.4))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, 2)
        for ax, (q_len, k_len) in zip(axes, ((12, 20), (20, 12)), strict=True):
            mask = attention_mask(q_len, k_len, causal=True)[0, 0].float()
            # Shade whole tiles: 0 skipped, 1 partly masked, 2 fully computed.
            tiles = torch.zeros(q_len, k_len)
            for i in range(0, q_len, block):
                for j in range(0, k_len, block):
                    tile = mask[i : i + block, j : j + block]
                    tiles[i : i + block, j : j + block] = 2 if tile.all() else float(tile.any())
            ax.imshow(tiles.numpy(), cmap="Blues", vmin=0, vmax=2.6)
            rows, cols = torch.nonzero(mask, as_tuple=True)
            ax.scatter(cols, rows, s=4, color="black")
            ax.set_xticks([x - 0.5 for x in range(0, k_len + 1, block)], [])
            ax.set_yticks([y - 0.5 for y in range(0, q_len + 1, block)], [])
            ax.grid(True, color="white", linewidth=1.5)
            ax.set_title(f"q_len={q_len}, k_len={k_len}", fontsize=9)
            ax.set_xlabel("keys (blocks of 4)")
            ax.set_ylabel("queries (blocks of 4)")
        fig.suptitle(
            "Causal, bottom-right: dots = allowed pairs; white tiles are skipped", fontsize=9
        )
        fig.tight_layout()
    return fig


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
            '!!! note "No GPU run yet"\n\n'
            "    No measurement from a GPU has been committed to this book yet, so this section "
            "shows no GPU number. Run `python benchmarks/flash_gpu.py` on a CUDA GPU: it "
            "writes `benchmarks/results/flash_gpu.json`, and the next build of the book draws "
            "its figure and table here."
        )
    report = json.loads(path.read_text(encoding="utf-8"))
    env = report["environment"]
    rows = [r for r in report["results"] if "fwd_tflops" in r]
    fig = _gpu_results_figure(rows)
    buffer = io.StringIO()
    with plt.rc_context(BOOK_STYLE):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    image = base64.b64encode(buffer.getvalue().encode()).decode()
    table = [
        "| provider | dtype | d | causal | n | fwd TFLOP/s | fwd+bwd TFLOP/s |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        table.append(
            f"| {r['provider']} | {r['dtype']} | {r['head_dim']} | {r['causal']} | "
            f"{r['seq_len']} | {r['fwd_tflops']:.1f} | {r['fwd_bwd_tflops']:.1f} |"
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
        f"![Forward TFLOP/s against sequence length](data:image/svg+xml;base64,{image})",
        "",
        *verdicts,
        *table,
    ])  # fmt: skip


def flash_gpu_results() -> str:
    """GPU throughput from ``benchmarks/results/flash_gpu.json``, or a note that none exists."""
    return _gpu_results_markdown(GPU_RESULTS)
