"""Figures and build-time numbers of the FlashAttention chapter.

Drawing only: the measurements they show (peak memory of naive and tiled attention, the
roofline model's intensity, the GPUs' specifications) live in `attention_book.experiments.flash`.
The functions that read the results the scripts in ``benchmarks/`` commit as JSON (memory, GPU
throughput) take the directory of those results as their `results_dir` argument (see
`attention_book.figures`). The deep dives draw from their own modules:
`attention_book.figures.flash_gpu` (the roofline, the GPU run) and
`attention_book.figures.flash_compiled` (what the compiler made of the kernels).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from attention_book.experiments.flash import (
    CHECKED_ON_CPU,
    GPUS,
    flash_causal_tiles,
    flash_memory_measurements,
    flash_tiling_example,
    flash_tiling_steps,
)
from attention_book.figures import Frames
from attention_book.masking import causal_mask
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "flash_causal_blocks",
    "flash_causal_facts",
    "flash_causal_verdict",
    "flash_gpu_specs",
    "flash_memory_growth",
    "flash_memory_ratio",
    "flash_memory_rss",
    "flash_tiling_explorer",
    "flash_tiling_loop",
    "memory_growth_words",
]


def flash_memory_growth() -> Figure:
    """Peak memory of naive attention vs the tiled reference as the sequence grows (log-log)."""
    data = flash_memory_measurements()
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


def memory_growth_words(seq_lens: list[int], naive: list[float], tiled: list[float]) -> str:
    """A Markdown sentence: how much each peak grew from the shortest to the longest sequence.

    Each growth is given as a factor and as the slope of the log-log line through the first and
    the last measurement (2 where memory grows like n², 1 where it grows like n), and the tiled
    slope is compared with the figure's slope-1 guide.

    Args:
        seq_lens: The sequence lengths, shortest first.
        naive: Naive attention's peak bytes at each length.
        tiled: The tiled reference's peak bytes at each length.

    Returns:
        One sentence.
    """
    span = seq_lens[-1] / seq_lens[0]

    def slope(peaks: list[float]) -> float:
        return math.log(peaks[-1] / peaks[0]) / math.log(span)

    naive_slope, tiled_slope = round(slope(naive), 2), round(slope(tiled), 2)
    place = "under" if tiled_slope < 1 else "on" if tiled_slope == 1 else "above"
    return (
        f"From n = {seq_lens[0]:,} to {seq_lens[-1]:,}, {span:,.0f} times longer, naive "
        f"attention's peak grew {naive[-1] / naive[0]:,.0f}× (slope {naive_slope:.2f} on the "
        f"log-log axes; memory that grows like n² has slope 2) and the tiled reference's "
        f"{tiled[-1] / tiled[0]:,.1f}× (slope {tiled_slope:.2f}, {place} the slope-1 guide of "
        "memory that grows like n)."
    )


def flash_memory_ratio() -> str:
    """Markdown: the measured peak memories at the longest sequence, and how they grew."""
    data = flash_memory_measurements()
    naive, tiled = data["naive"][-1], data["tiled"][-1]
    n = data["seq_lens"][-1]
    checked = " and ".join(f"{x:,}" for x in CHECKED_ON_CPU)
    growth = memory_growth_words(data["seq_lens"], data["naive"], data["tiled"])
    return (
        f"At n = {n:,}, naive attention's tensors peak at **{naive / 2**20:,.0f} MiB** and the "
        f"tiled reference's at **{tiled / 2**20:,.1f} MiB**: a ratio of "
        f"**{naive / tiled:,.0f}×** in counted tensor bytes. On real CPU tensors at "
        f"n = {checked} the counts were the same as on the meta device, and the two outputs "
        f"differed by at most {data['max_difference']:.1e}. {growth}"
    )


def flash_memory_rss(results_dir: Path) -> str:
    """Table from ``flash_memory.json`` in `results_dir`: counted bytes vs process RSS.

    Args:
        results_dir: The directory ``benchmarks/flash_memory.py`` writes its results to.

    Returns:
        A Markdown table, or a note saying how to produce the file if it is missing.
    """
    path = Path(results_dir) / "flash_memory.json"
    if not path.exists():
        return (
            "*(No `benchmarks/results/flash_memory.json` yet: "
            "run `python benchmarks/flash_memory.py`.)*"
        )
    report = json.loads(path.read_text(encoding="utf-8"))
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
    return "\n".join(lines) + "\n\n" + _rss_words(report["results"])


def _rss_words(results: list[dict]) -> str:
    """What the memory benchmark's rows show: counted bytes against RSS growth, in words."""
    mib = 2**20

    def of(name: str, key: str) -> list[float]:
        return [row[name][key] / mib for row in results]

    naive_count, naive_rss = of("naive", "counted_bytes"), of("naive", "rss_bytes")
    tiled_count, tiled_rss = of("tiled", "counted_bytes"), of("tiled", "rss_bytes")
    spread = max(abs(r - c) / c for r, c in zip(naive_rss, naive_count, strict=True))
    naive_words = f"Naive attention's RSS growth is within {spread:.1%} of its count"
    naive_words += " at every length"
    if spread < 0.05:
        naive_words += ": the score-sized tensors are all there is"
    extra = [r - c for r, c in zip(tiled_rss, tiled_count, strict=True)]
    if min(extra) >= 0:
        tiled_words = f"exceeds its count by {min(extra):.1f} to {max(extra):.1f} MiB"
    else:
        tiled_words = f"differs from its count by up to {max(map(abs, extra)):.1f} MiB"
    text = f"{naive_words}. The tiled reference's RSS growth {tiled_words}"
    if len(results) > 1:
        first, last = results[0]["seq_len"], results[-1]["seq_len"]
        text += (
            f"; from n = {first:,} to {last:,} it grew from {tiled_rss[0]:,.1f} to "
            f"{tiled_rss[-1]:,.1f} MiB, naive attention's from {naive_rss[0]:,.1f} to "
            f"{naive_rss[-1]:,.1f} MiB"
        )
    text += "."
    last = results[-1]["seq_len"]
    counted, measured = naive_count[-1] / tiled_count[-1], naive_rss[-1] / tiled_rss[-1]
    factor = counted / measured
    if factor > 1.05:
        verdict = f"the count overstates the saving {factor:.1f}-fold"
    elif factor < 1 / 1.05:
        verdict = f"the count understates the saving {1 / factor:.1f}-fold"
    else:
        verdict = "the count and the process agree within 5%"
    return (
        f"{text} At n = {last:,}, naive attention needs **{measured:,.0f}×** the tiled "
        f"reference's memory by RSS growth, against {counted:,.0f}× counted: {verdict}."
    )


def flash_causal_verdict(counts: dict[str, int]) -> str:
    """How much of the work a causal mask saves, in words: the share of tiles it skips.

    Args:
        counts: Tiles computed "full" (without a mask) and "causal" (with it).

    Returns:
        "less than half", "half" or "more than half" (of the tiles, exactly).
    """
    skipped = counts["full"] - counts["causal"]
    if 2 * skipped < counts["full"]:
        return "less than half"
    return "half" if 2 * skipped == counts["full"] else "more than half"


def flash_causal_facts() -> dict[str, str]:
    """The numbers the chapter gives for the causal mask's saving, counted from the reference.

    Returns:
        "n", "block" (the reference's block size, queries and keys alike), the tiles of scores
        it computes without a mask ("full") and with the causal mask ("causal"), those the
        mask cuts through ("diagonal"), the share computed ("share", in %), and "saving"
        (`flash_causal_verdict`).
    """
    counts = flash_causal_tiles()
    if counts["block_m"] != counts["block_n"]:
        raise ValueError(f"the chapter's count assumes square blocks, got {counts}")
    return {
        "n": f"{counts['seq_len']:,}",
        "block": str(counts["block_m"]),
        "full": str(counts["full"]),
        "causal": str(counts["causal"]),
        "diagonal": str(counts["diagonal"]),
        "share": f"{100 * counts['causal'] / counts['full']:.1f}",
        "saving": flash_causal_verdict(counts),
    }


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


_BLOCK_COLORS = ("#9ecae1", "#a1d99b", "#fdae6b")  # key/value blocks 1, 2, 3
_QUERY_COLOR = "#c9b3e8"


def _block(ax, x, y, width, height, color, text="", fontsize=8.5, edge="#333333"):
    """A filled rectangle with centered text (a tile or a block of a matrix)."""
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, edgecolor=edge, linewidth=0.8))
    if text:
        ax.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, text="", rad=0.0, color="#333333"):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=10,
            color=color,
            linewidth=1.0,
            connectionstyle=f"arc3,rad={rad}",
        )
    )
    if text:
        middle = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12)
        ax.text(*middle, text, ha="center", va="bottom", fontsize=7.5, color=color)


def flash_tiling_loop() -> Figure:
    """One program of the forward pass: a query block stays in SRAM while K/V blocks stream.

    Left, the matrices in HBM, cut into blocks; the program owns query block Q_i. Right, the
    three steps of its loop: key/value block j is loaded, the tile S_ij = tau Q_i K_j^T is
    computed on chip, and the running maximum m_i, sum l_i and unnormalized output acc_i are
    updated. The numbers are those of the first query row of a small example, computed by
    `attention_book.experiments.flash.flash_tiling_example`. At the end O_i = acc_i / l_i and
    the log-sum-exp L_i are the only writes to HBM.
    """
    example = flash_tiling_example()
    fig = new_figure((10.4, 4.3))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 13.0)
    ax.set_ylim(0, 5.4)
    ax.axis("off")
    # HBM: Q, K, V and O, three blocks each; the program's query block is Q_2.
    ax.add_patch(
        FancyBboxPatch((0.15, 0.35), 2.9, 4.7, boxstyle="round,pad=0.05", facecolor="#f4f4f4",
                       edgecolor="#999999", linewidth=0.8)
    )  # fmt: skip
    ax.text(1.6, 4.85, "HBM (large, slow)", ha="center", va="center", fontsize=9, weight="bold")
    height = 1.0
    for name, x in (("Q", 0.4), ("K", 1.1), ("V", 1.8), ("O", 2.5)):
        ax.text(x + 0.25, 4.4, name, ha="center", va="center", fontsize=9)
        for block in range(3):
            y = 4.15 - (block + 1) * height
            if name in ("K", "V"):
                color = _BLOCK_COLORS[block]
            elif block == 1:
                color = _QUERY_COLOR if name == "Q" else "#e8ddf5"
            else:
                color = "white"
            label = f"{name}$_{block + 1}$" if (name in ("K", "V") or block == 1) else ""
            _block(ax, x, y, 0.5, height, color, label)
    ax.text(1.6, 0.55, "one program owns $Q_2$ and $O_2$", ha="center", fontsize=7.5)
    # The three steps of the loop, each in SRAM.
    for j in range(3):
        x0 = 3.55 + 3.1 * j
        ax.add_patch(
            FancyBboxPatch((x0, 0.75), 2.8, 3.95, boxstyle="round,pad=0.05",
                           facecolor="#fffbea", edgecolor="#b7950b", linewidth=1.0)
        )  # fmt: skip
        ax.text(x0 + 1.4, 4.5, f"step j = {j + 1}: in SRAM", ha="center", fontsize=9)
        _block(ax, x0 + 0.15, 2.65, 0.55, 1.5, _QUERY_COLOR, "$Q_2$")
        _block(ax, x0 + 0.85, 3.55, 1.8, 0.6, _BLOCK_COLORS[j], f"$K_{j + 1}^T$, $V_{j + 1}$")
        # The tile of scores, B_r x B_c, drawn as a small grid.
        for r in range(4):
            for c in range(4):
                _block(ax, x0 + 0.85 + 0.45 * c, 3.3 - 0.16 - 0.16 * (r + 1) * 1.0 - 0.0,
                       0.45, 0.16, "#fde0dd", edge="#c0392b")  # fmt: skip
        ax.text(x0 + 1.75, 2.22, f"tile $S_{{2{j + 1}}} = \\tau\\, Q_2 K_{j + 1}^T$",
                ha="center", fontsize=8)  # fmt: skip
        m, ell = example["m"][j], example["l"][j]
        grew = j > 0 and m > example["m"][j - 1]
        lines = [
            f"$m_2$ = {m:.3f}" + ("  (grew)" if grew else ""),
            f"$\\ell_2$ = {ell:.3f}",
            f"$acc_2$ += $\\tilde{{P}}_{{2{j + 1}}} V_{j + 1}$" + (", rescaled" if grew else ""),
        ]
        for k, line in enumerate(lines):
            ax.text(x0 + 0.2, 1.75 - 0.33 * k, line, fontsize=8, va="center")
        # K_j and V_j come in from HBM at the top of each step.
        _arrow(ax, (x0 + 1.75, 5.25), (x0 + 1.75, 4.72), "")
        ax.text(x0 + 1.85, 5.05, f"load $K_{j + 1}, V_{j + 1}$", fontsize=7.5, va="center")
        if j < 2:
            _arrow(ax, (x0 + 2.85, 2.7), (x0 + 3.1, 2.7))
    ax.text(3.55, 5.05, "load $Q_2$ once", fontsize=7.5, va="center", ha="left")
    last = "after the last block: write $O_2 = acc_2 / \\ell_2$ and $L_2 = m_2 + \\log \\ell_2$"
    ax.text(8.2, 0.3, last + " to HBM; nothing else", ha="center", fontsize=8)
    return fig


def flash_causal_blocks() -> Figure:
    """Which (query block, key block) tiles a causal pass computes, for q_len < and > k_len."""
    block = 4
    fig = new_figure((7.0, 3.4))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        axes = fig.subplots(1, 2)
        for ax, (q_len, k_len) in zip(axes, ((12, 20), (20, 12)), strict=True):
            mask = causal_mask(q_len, k_len, alignment="bottom-right").float()
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


def flash_tiling_explorer() -> Frames:
    """The tiled loop stepped block by block (a slider): what one program holds after each step.

    Left, the weights ``exp(S - m)`` of every score loaded so far, relative to each row's
    current maximum, the tile just computed outlined and the blocks not loaded yet blank.
    Middle, each query row's running maximum m and sum l, and the factor that rescaled what it
    had accumulated (below 1 where the new block held a larger score). Right, how far acc / l is
    from softmax attention over the keys loaded so far (always at rounding level) and over all
    keys (it reaches rounding level at the last block). The numbers come from
    `attention_book.experiments.flash.flash_tiling_steps`.
    """
    example = flash_tiling_steps()
    steps = example["steps"]
    block_m, num_keys = steps[0]["weights"].shape
    block_n = num_keys // len(steps)
    errors = [[step[key] for step in steps] for key in ("error_seen", "error_all")]
    figures = []
    for j, step in enumerate(steps):
        fig = new_figure((10.4, 3.5))
        with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
            heat, state, error = fig.subplots(1, 3, gridspec_kw={"width_ratios": [2.1, 1.25, 1.3]})
            loaded = (j + 1) * block_n
            heat.imshow(step["weights"].numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
            for boundary in range(block_n, num_keys, block_n):
                heat.axvline(boundary - 0.5, color="#555555", linewidth=0.8)
            heat.add_patch(
                Rectangle((j * block_n - 0.5, -0.5), block_n, block_m, fill=False,
                          edgecolor="#c0392b", linewidth=2.2)
            )  # fmt: skip
            for later in range(j + 1, len(steps)):
                heat.text(later * block_n + (block_n - 1) / 2, (block_m - 1) / 2,
                          "not\nloaded", ha="center", va="center", fontsize=7.5,
                          color="#555555")  # fmt: skip
            heat.set_xticks([b * block_n + (block_n - 1) / 2 for b in range(len(steps))],
                            [f"$K_{b + 1}, V_{b + 1}$" for b in range(len(steps))])  # fmt: skip
            heat.set_yticks(range(block_m), [f"row {r + 1}" for r in range(block_m)])
            heat.set_title(f"step {j + 1}: weights $e^{{S - m}}$ of the {loaded} keys loaded"
                           " (1 = the row's maximum)", fontsize=9)  # fmt: skip
            heat.tick_params(labelsize=8)
            state.axis("off")
            state.set_xlim(0, 1)
            state.set_ylim(0, 1)
            state.set_title("running state per row", fontsize=9)
            header = ("row", "$m$", "$\\ell$", "rescaled by")
            columns = (0.02, 0.25, 0.5, 0.76)
            for x, text in zip(columns, header, strict=True):
                state.text(x, 0.88, text, fontsize=8.5, weight="bold")
            for r in range(block_m):
                y = 0.72 - 0.17 * r
                factor = float(step["rescale"][r])
                grew = factor < 1
                cells = (
                    f"{r + 1}",
                    f"{float(step['m'][r]):.3f}",
                    f"{float(step['l'][r]):.3f}",
                    f"{factor:.3f}" if grew else "1 (same m)",
                )
                for x, text in zip(columns, cells, strict=True):
                    state.text(x, y, text, fontsize=8.5, color="#c0392b" if grew else "#222222")
            state.text(0.02, 0.02, "red: the block held a larger score,\nso l and acc were scaled"
                       " down first", fontsize=7.5, color="#c0392b")  # fmt: skip
            numbers = range(1, len(steps) + 1)
            for values, label, color in zip(
                errors, ("vs attention over keys loaded", "vs attention over all keys"),
                ("#2ca02c", "#1f77b4"), strict=True,
            ):  # fmt: skip
                floor = [max(value, 1e-17) for value in values]
                error.plot(numbers, floor, color=color, alpha=0.25, linewidth=1)
                error.plot(numbers[: j + 1], floor[: j + 1], "o-", color=color, label=label)
            error.set_yscale("log")
            error.set_ylim(1e-17, 10)
            error.tick_params(labelsize=8)
            error.set_xticks(list(numbers))
            error.set_xlabel("key/value blocks loaded", fontsize=8)
            error.set_title("max |acc / l − exact|", fontsize=9)
            error.grid(True, alpha=0.3)
            error.legend(fontsize=7, loc="center left")
            fig.tight_layout()
        figures.append(fig)
    labels = [f"after block {j + 1} of {len(steps)}" for j in range(len(steps))]
    return Frames("key/value block", labels, figures, start=0)


#: The figures and build-time tables of this module, in the order of the chapter.
FIGURES = (
    flash_tiling_loop,
    flash_tiling_explorer,
    flash_gpu_specs,
    flash_causal_blocks,
    flash_causal_facts,
    flash_memory_growth,
    flash_memory_ratio,
    flash_memory_rss,
)
