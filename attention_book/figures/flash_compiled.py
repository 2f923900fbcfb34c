"""The figures of the FlashAttention deep dive "What the compiler made of our kernel".

That page is ``docs/chapters/flash-attention-compiled.md``.

They read the compile report that ``benchmarks/flash_compile.py`` commits as
``benchmarks/results/flash_compile.json`` (through `attention_book.flash.compiled.load_report`)
and return its tables, built here from the compilations that
`attention_book.flash.compile_report` selects, or the values that the chapter's own sentences
cite (from the same module); each takes the directory of the results as its
`results_dir` argument (see `attention_book.figures`), and fails with a clear error when there
is no report. The chapter's other figures are in
`attention_book.figures.flash`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.figures import inline_svg
from attention_book.flash import compile_report, compiled
from attention_book.flash.compile_report import (
    IMPLEMENTATIONS,
    KERNEL_NAMES,
    first_match,
    loop_count,
    tile_name,
)
from attention_book.flash.compiled import select
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "flash_compile_before_after",
    "flash_compile_changes",
    "flash_compile_facts",
    "flash_compile_mix",
    "flash_compile_resources",
    "flash_compile_score_paths",
    "flash_compile_shared_memory",
    "flash_compile_table",
]


def _report(results_dir: Path) -> dict:
    """The compile report in `results_dir`.

    Raises:
        ValueError: If there is none (``python benchmarks/flash_compile.py`` writes it; it
            needs no GPU).
    """
    report = compiled.load_report(results_dir)
    if report is None:
        raise ValueError(
            f"no compile report in {results_dir}: run `python benchmarks/flash_compile.py` "
            "(it needs no GPU) to write benchmarks/results/flash_compile.json"
        )
    return report


def flash_compile_facts(results_dir: Path) -> dict[str, str]:
    """What the last compile report covered: its date, versions, counts, launch and showcase.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Values for the chapter's prose (`attention_book.flash.compile_report.compile_facts`).
    """
    return compile_report.compile_facts(_report(results_dir))


def flash_compile_resources(results_dir: Path) -> str:
    """Each kernel's registers, spills, shared memory and matrix multiply, by GPU.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return _resources_table(_report(results_dir))


def flash_compile_table(results_dir: Path) -> str:
    """Every listed configuration: registers, spills, shared memory, main-loop instructions.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return _configurations_table(_report(results_dir))


def flash_compile_shared_memory(results_dir: Path) -> dict[str, str]:
    """The hand estimate of the forward's shared memory, against the report's counts.

    By hand, a forward program holds its query tile once and a key tile and a value tile per
    pipeline stage, in float16. The values compare that with what the report counts for every
    listed configuration of the forward kernel (both masks, every head dim).

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        For sm_90, the fewest and most bytes the count exceeds the estimate by
        (``sm90_extra_min``, ``sm90_extra_max``); for sm_80, the count as a share of the
        estimate (``sm80_share_min``, ``sm80_share_max``), and one configuration's estimate and
        count in KB (``sm80_tile``, ``sm80_head_dim``, ``sm80_estimate_kb``, ``sm80_kb``); the
        most KB by which a ``cp.async`` kernel compiled for sm_80 (this one before the changes,
        the tutorial's) exceeds its query tile and stages - 1 key and value tiles
        (``cp_async_extra_kb``).
    """
    report = _report(results_dir)
    rows = {
        target: select(report, implementation="ours", kernel="fwd", target=target, listed=True)
        for target in ("sm_90", "sm_80")
    }
    extra = [row["shared_memory"] - _tiles_by_hand(row) for row in rows["sm_90"]]
    share = [row["shared_memory"] / _tiles_by_hand(row) for row in rows["sm_80"]]
    example = next(row for row in rows["sm_80"] if row["head_dim"] == 128)
    copies = [
        row for name in ("baseline", "tutorial")
        for row in select(report, implementation=name, kernel="fwd", target="sm_80")
    ]  # fmt: skip
    beyond = [r["shared_memory"] - _tiles_by_hand(r, stages=r["config"][3] - 1) for r in copies]
    return {
        "sm90_extra_min": f"{min(extra):,}",
        "sm90_extra_max": f"{max(extra):,}",
        "sm80_share_min": f"{min(share):.0%}",
        "sm80_share_max": f"{max(share):.0%}",
        "sm80_tile": tile_name(example["config"]),
        "sm80_head_dim": str(example["head_dim"]),
        "sm80_estimate_kb": f"{_tiles_by_hand(example) / 1024:.0f}",
        "sm80_kb": f"{example['shared_memory'] / 1024:.0f}",
        "cp_async_extra_kb": f"{max(beyond) / 1024:.0f}",
    }


def _tiles_by_hand(row: dict, stages: int | None = None) -> int:
    """Bytes of a forward compilation's 16-bit tiles by hand, its shared memory on Hopper.

    The query tile, and a key tile and a value tile per pipeline stage (`stages`, the
    configuration's own by default).
    """
    block_m, block_n, _, config_stages = row["config"]
    stages = config_stages if stages is None else stages
    q_tile, kv_tiles = block_m * row["head_dim"] * 2, 2 * block_n * row["head_dim"] * 2
    return q_tile + stages * kv_tiles


def flash_compile_score_paths(results_dir: Path) -> dict[str, str]:
    """The path of one score through the forward's main loop, in SASS: before, after, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        ``{"before": ..., "after": ..., "tutorial": ...}``, each a short ``text`` listing.
    """
    paths = compile_report.score_paths(_report(results_dir))
    keys = {"baseline": "before", "ours": "after", "tutorial": "tutorial"}
    return {keys[name]: "\n".join(["```text", *path, "```"]) for name, path in paths.items()}


def flash_compile_changes(results_dir: Path) -> dict[str, str]:
    """What each change bought, read off the compile report.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Values for the chapter's prose (`attention_book.flash.compile_report.change_numbers`).
    """
    return compile_report.change_numbers(_report(results_dir))


def flash_compile_before_after(results_dir: Path) -> str:
    """The before/after table of the tuning: main loops, spills, shared memory, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return _before_after_table(_report(results_dir))


# ---------------------------------------------------------------------------------------------
# The tables, built from the compilations that `attention_book.flash.compile_report` selects


def _resources_table(report: dict) -> str:
    """Each kernel's resources by GPU, over its listed configurations: a Markdown table.

    Args:
        report: The compile report.

    Returns:
        The table.
    """
    settings = report["settings"]
    lines = [
        "| GPU | kernel | configurations listed | registers | bytes spilled "
        "| shared memory, KB (the most a block may use) | matrix multiply |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    ours = select(report, implementation="ours", listed=True)
    for target, limits in settings["targets"].items():
        for kernel, name in KERNEL_NAMES.items():
            rows = [r for r in ours if r["target"] == target and r["kernel"] == kernel]
            if not rows:
                continue
            registers = sorted({r["registers"] for r in rows})
            spilled = max(r["spill_stores"] + r["spill_loads"] for r in rows)
            shared = max(r["shared_memory"] for r in rows) / 1024
            mma = {
                "wgmma" if r["ptx"]["wgmma"] else "mma.sync" if r["ptx"]["mma_sync"] else "none"
                for r in rows
            }  # fmt: skip
            listed = {(tuple(r["config"] or ()), r["head_dim"]) for r in rows}
            limit = limits["shared_memory_limit"] / 1024
            lines.append(
                f"| {target} | {name} | {len(listed)} | {registers[0]}–{registers[-1]} "
                f"| {spilled} | {shared:.0f} ({limit:.0f}) | {', '.join(sorted(mma))} |"
            )
    return "\n".join(lines)


def _configurations_table(report: dict) -> str:
    """Every listed configuration of the tuned kernels (not causal / causal): a Markdown table.

    Args:
        report: The compile report.

    Returns:
        The table: registers, spills, shared memory and main-loop instructions of each.
    """
    lines = [
        "| GPU | kernel | d | tile | registers | bytes spilled | shared memory, KB "
        "| main loop, instructions |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in select(report, implementation="ours", listed=True, causal=False):
        if row["kernel"] == "preprocess":
            continue
        causal = first_match(
            report, implementation="ours", kernel=row["kernel"], target=row["target"],
            head_dim=row["head_dim"], config=row["config"], causal=True,
        )  # fmt: skip
        pair = [row] if causal is None else [row, causal]
        cells = [
            " / ".join(str(value(r)) for r in pair) for value in (
                lambda r: r["registers"],
                lambda r: r["spill_stores"] + r["spill_loads"],
                lambda r: f"{r['shared_memory'] / 1024:.0f}",
                loop_count,
            )
        ]  # fmt: skip
        lines.append(
            f"| {row['target']} | {KERNEL_NAMES[row['kernel']]} | {row['head_dim']} "
            f"| {tile_name(row['config'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def _before_after_table(report: dict) -> str:
    """The table of the tuning: main loops, spills and shared memory, before and after."""
    lines = [
        "| compiled for sm_90 unless said, float16 | before | after | Triton's tutorial |",
        "|---|---:|---:|---:|",
    ]

    def fwd(name, head_dim, config, causal=False):
        return first_match(report, implementation=name, kernel="fwd", target="sm_90",
                      head_dim=head_dim, config=config, causal=causal)  # fmt: skip

    for head_dim, config in ((64, [128, 64, 4, 3]), (128, [128, 64, 8, 3])):
        rows = [fwd(name, head_dim, config) for name in IMPLEMENTATIONS]
        for what, opcode in (("instructions", None), ("FMULs", "FMUL")):
            values = ["–" if v is None else str(v) for v in (loop_count(r, opcode) for r in rows)]
            lines.append(
                f"| forward main loop, d = {head_dim}, {tile_name(config)}: {what} "
                f"| {' | '.join(values)} |"
            )
    for config in ([128, 64, 4, 2], [128, 64, 4, 3]):
        cells = []
        for name in IMPLEMENTATIONS:
            pair = [fwd(name, 128, config, causal) for causal in (False, True)]
            cells.append(" / ".join("–" if r is None else str(r["spill_stores"]) for r in pair))
        lines.append(
            f"| forward, d = 128, {tile_name(config)}: bytes spilled (not causal / causal) "
            f"| {' | '.join(cells)} |"
        )
    big = [fwd(name, 128, [128, 128, 8, 4]) for name in ("baseline", "ours")]
    if all(big):
        most = big[1]["shared_memory_limit"] / 1024
        lines.append(
            f"| forward, d = 128, {tile_name([128, 128, 8, 4])}: shared memory, KB (the most "
            f"a block may use: {most:.0f}) | {big[0]['shared_memory'] / 1024:.0f} "
            f"| {big[1]['shared_memory'] / 1024:.0f} | – |"
        )

    def bwd(name, kernel, head_dim, config):
        return first_match(report, implementation=name, kernel=kernel, target="sm_90",
                      head_dim=head_dim, config=config, causal=False)  # fmt: skip

    for kernel, config in (("dkdv", [32, 128, 8, 3]), ("dq", [128, 64, 8, 3])):
        values = [loop_count(bwd(name, kernel, 128, config)) for name in ("baseline", "ours")]
        lines.append(
            f"| {KERNEL_NAMES[kernel]} main loop, d = 128, {tile_name(config)}: instructions "
            f"| {' | '.join('–' if v is None else str(v) for v in values)} | – |"
        )
    # The tutorial's backward is one kernel with both loops, at tiles of its own.
    tiles = {"dkdv": [32, 128, 4, 5], "dq": [128, 32, 4, 5]}
    functions = {"dkdv": "_attn_bwd_dkdv", "dq": "_attn_bwd_dq"}
    for head_dim in (64, 128):
        theirs = first_match(report, implementation="tutorial", kernel="bwd", target="sm_90",
                        head_dim=head_dim, causal=False)  # fmt: skip
        for kernel, config in tiles.items():
            values = [
                loop_count(bwd(name, kernel, head_dim, config)) for name in ("baseline", "ours")
            ]
            values.append(loop_count(theirs, function=functions[kernel]))
            lines.append(
                f"| {KERNEL_NAMES[kernel]} main loop, d = {head_dim}, the tutorial's tile, "
                f"{tile_name(config)}: instructions "
                f"| {' | '.join('–' if v is None else str(v) for v in values)} |"
            )
        spilled = [
            " + ".join(
                "–" if (row := bwd(name, kernel, head_dim, config)) is None
                else str(row["spill_stores"]) for kernel, config in tiles.items()
            )
            for name in ("baseline", "ours")
        ]  # fmt: skip
        spilled.append("–" if theirs is None else str(theirs["spill_stores"]))
        lines.append(
            f"| backward, d = {head_dim}, the tutorial's tiles: bytes spilled (dK/dV + dQ; the "
            f"tutorial: one kernel for both) | {' | '.join(spilled)} |"
        )
    for target in report["settings"]["targets"]:
        counts = []
        for name in ("baseline", "ours"):
            listed = select(report, implementation=name, listed=True, target=target)
            spilled = sum(bool(r["spill_stores"] or r["spill_loads"]) for r in listed)
            counts.append(f"{spilled} of {len(listed)}")
        lines.append(
            f"| compilations of listed configurations that spill, {target} (every head dim, "
            f"both masks) "
            f"| {counts[0]} | {counts[1]} | – |"
        )
    return "\n".join(lines)


def _mix_figure(kinds: list[str], mixes: dict[str, dict[str, int]]) -> Figure:
    """Horizontal bars: instructions of one iteration by kind, one bar per implementation."""
    labels = {"baseline": "before", "ours": "after", "tutorial": "Triton's tutorial"}
    colors = {"baseline": "#bbbbbb", "ours": "tab:blue", "tutorial": "tab:orange"}
    names = [name for name in labels if name in mixes]
    fig = new_figure((7.6, 0.42 * len(kinds) + 1.2))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        ax = fig.add_subplot()
        height = 0.8 / len(names)
        for k, name in enumerate(names):
            ys = [i + (k - (len(names) - 1) / 2) * height for i in range(len(kinds))]
            counts = [mixes[name][kind] for kind in kinds]
            label = f"{labels[name]} ({sum(mixes[name].values())} in all)"
            ax.barh(ys, counts, height=height, color=colors[name], label=label)
            for y, count in zip(ys, counts, strict=True):
                ax.text(count + 1, y, str(count), va="center", fontsize=6.5)
        ax.set_yticks(range(len(kinds)), kinds, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("instructions per warp in one iteration", fontsize=8)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
    return fig


def flash_compile_mix(results_dir: Path) -> str:
    """One iteration of the forward's main loop by kind of instruction: before, after, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown: the bar chart (inline SVG, drawn for light and dark pages).
    """
    report = _report(results_dir)
    alt = (
        "Horizontal bars: the instructions of one main-loop iteration of the forward kernel by "
        "kind, before the tuning, after it, and in Triton's tutorial"
    )
    return inline_svg(_mix_figure(*compile_report.instruction_groups(report)), alt)


#: The build-time tables and the figure of this module, in the order of the chapter.
FIGURES = (
    flash_compile_facts,
    flash_compile_resources,
    flash_compile_table,
    flash_compile_shared_memory,
    flash_compile_mix,
    flash_compile_score_paths,
    flash_compile_changes,
    flash_compile_before_after,
)
