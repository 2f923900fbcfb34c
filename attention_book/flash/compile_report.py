"""The compile report in numbers: what the FlashAttention chapter shows of it.

``benchmarks/flash_compile.py`` compiles the kernels of `attention_book.flash.kernels` (and,
for comparison, those of Triton's fused-attention tutorial and of this package before its
tuning) for sm_90 and sm_80 on a CPU, and writes ``benchmarks/results/flash_compile.json``.
The functions here read that report (as `attention_book.flash.compiled.load_report` reads it)
for the chapter's deep dive "What the compiler made of our kernel"
(``docs/chapters/flash-attention-compiled.md``): the values its prose cites
(`compile_facts`, `change_numbers`, `score_paths`) and the compilations its tables read
(`select`, `first_match`, `loop_count`, `showcase`, `instruction_groups`). The sentences are
the chapter's own; the verdicts they state are asserted by
``tests/experiments/test_flash_compile.py`` against the committed report.
`attention_book.figures.flash_compiled` builds the chapter's tables and its one figure from
these functions.

The report keeps the SASS of one "showcase" compilation per implementation (the forward,
128 x 64 tiles, 4 warps, 3 stages, head dim 64, not causal, sm_90), from which `score_paths`
quotes the path of one score.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from attention_book.flash.compiled import OPCODE_GROUPS, group_mix, main_loop, score_path, select
from attention_book.memory import measure_tensor_memory

__all__ = [
    "IMPLEMENTATIONS",
    "KERNEL_NAMES",
    "change_numbers",
    "compile_facts",
    "first_match",
    "instruction_groups",
    "kernels_changed_since",
    "loop_count",
    "score_paths",
    "showcase",
    "tile_name",
]

#: The kernels of the report, as the chapter names them.
KERNEL_NAMES = {
    "fwd": "forward", "dkdv": "dK/dV", "dq": "dQ", "preprocess": "D and base-2 lse",
}  # fmt: skip
#: The implementations the report compiles, as the chapter's tables head their columns.
IMPLEMENTATIONS = {"baseline": "Before", "ours": "After", "tutorial": "Triton's tutorial"}


def tile_name(config: list[int]) -> str:
    """``128×64, 4 warps, 3 stages`` from ``[128, 64, 4, 3]``."""
    block_m, block_n, warps, stages = config
    return f"{block_m}×{block_n}, {warps} warps, {stages} stages"


def showcase(report: dict) -> dict[str, dict]:
    """The compilations whose main-loop SASS the report kept, by implementation."""
    return {
        row["implementation"]: row for row in report["results"]
        if any("sass" in loop for loop in row["loops"])
    }  # fmt: skip


def kernels_changed_since(report: dict) -> bool:
    """Whether kernels.py or launch.py differ from those the report was compiled from."""
    digest = hashlib.sha256()
    for name in ("kernels.py", "launch.py"):
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest() != report["environment"].get("kernels_sha256")


def first_match(report: dict, **fields) -> dict | None:
    """The first compilation of the report whose fields have these values, or None."""
    rows = select(report, **fields)
    return rows[0] if rows else None


def loop_count(row: dict | None, opcode: str | None = None, function: str | None = None):
    """Instructions (or one opcode's count) of a compilation's main loop, or None.

    Args:
        row: A compilation of the report, or None.
        opcode: Count only this opcode (``"FMUL"``); all instructions when None.
        function: The kernel function whose main loop (for a compilation of several).
    """
    loop = main_loop(row, function) if row else None
    if loop is None:
        return None
    return loop["instructions"] if opcode is None else loop["opcodes"].get(opcode, 0)


def compile_facts(report: dict) -> dict[str, str]:
    """What the last run of the report covered, as values the chapter's prose cites.

    Args:
        report: The compile report (`attention_book.flash.compiled.load_report`).

    Returns:
        ``date``, ``triton``, ``ptxas`` (each target's), the numbers of compilations
        ``ours``, ``tutorial`` and ``baseline``, the baseline's ``commit``, the launch's
        ``dtype`` and ``shape``, the tutorial's ``tutorial_source`` and ``tutorial_sha256``, and
        the ``showcase_tile``, ``showcase_head_dim`` and ``showcase_target`` of the compilation
        whose loop the section dissects; all as text.
    """
    env, settings = report["environment"], report["settings"]
    count = {name: len(select(report, implementation=name)) for name in IMPLEMENTATIONS}
    batch, heads, seq_len = settings["shape"]
    ours = showcase(report).get("ours", {})
    return {
        "date": env["date_utc"][:10],
        "triton": env["triton"],
        "ptxas": " and ".join(
            f"{version} for {target}" for target, version in env["ptxas"].items()
        ),
        "ours": str(count["ours"]),
        "tutorial": str(count["tutorial"]),
        "baseline": str(count["baseline"]),
        "commit": report.get("baseline", {}).get("commit", "")[:7],
        "dtype": settings["dtype"],
        "shape": f"{batch}, {heads}, {seq_len}",
        "tutorial_source": report.get("tutorial", {}).get("source", ""),
        "tutorial_sha256": report.get("tutorial", {}).get("sha256", "")[:12],
        "showcase_tile": tile_name(ours["config"]) if ours else "",
        "showcase_head_dim": str(ours.get("head_dim", "")),
        "showcase_target": ours.get("target", ""),
    }


def instruction_groups(report: dict) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The showcase's main loops by kind of instruction, and the kinds any of them uses.

    Returns:
        The kinds, in the order of `OPCODE_GROUPS`, and ``{implementation: {kind: count}}``.
    """
    mixes = {name: group_mix(main_loop(row)["opcodes"]) for name, row in showcase(report).items()}
    kinds = [k for k in [*OPCODE_GROUPS, "other"] if any(m[k] for m in mixes.values())]
    return kinds, mixes


def score_paths(report: dict) -> dict[str, list[str]]:
    """One score's path through the showcase's main loop, in SASS, per implementation.

    Args:
        report: The compile report.

    Returns:
        ``{"baseline": [...], "ours": [...], "tutorial": [...]}`` (those compiled): the
        instructions that read the score after the matrix multiply wrote it and carry it into
        its row's maximum, then the fused multiply-add that scales it and subtracts that
        maximum, then its exponential (`attention_book.flash.compiled.score_path`).
    """
    show = showcase(report)
    return {
        name: score_path(main_loop(show[name])["sass"]) for name in IMPLEMENTATIONS if name in show
    }


def change_numbers(report: dict) -> dict[str, str]:
    """What each change of the tuning bought, as values the chapter's prose cites.

    Args:
        report: The compile report (with a baseline).

    Returns:
        Text values: in the forward's main loop at the showcase's tile (``tile``, ``head_dim``),
        its FMULs (``fmul_before``, ``fmul_after``), per-thread asynchronous copies before
        (``ldgsts``) and TMA copies after (``utmaldg``), integer and address instructions
        (``int_before``, ``int_after``); the listed compilations that spill (``spilling_before``,
        ``spilling_after``); at the tile of the tutorial's tests (``tutorial_tile``), head dim
        128, the bytes spilled before, after and by the tutorial, without a causal mask
        (``spilled_before``, ...) and with one (``spilled_before_causal``, ...); the
        dK/dV and dQ main loops' FMULs and instructions at their tiles (``dkdv_tile``,
        ``dkdv_fmul_before``, ..., ``dq_instructions_after``); the preprocessing kernel's
        registers and the peak MiB of the PyTorch expression it replaces
        (``preprocess_registers``, ``preprocess_mib``).

    Raises:
        ValueError: If the report has no baseline, or lacks a compilation these numbers need.
    """
    show = showcase(report)
    if "baseline" not in show or "ours" not in show:
        raise ValueError("the compile report has no baseline: run it with --baseline REV")
    before, after = show["baseline"], show["ours"]
    mixes = {name: group_mix(main_loop(show[name])["opcodes"]) for name in ("baseline", "ours")}
    loads = [main_loop(row)["opcodes"] for row in (before, after)]
    values = {
        "tile": tile_name(after["config"]),
        "head_dim": after["head_dim"],
        "fmul_before": loop_count(before, "FMUL"),
        "fmul_after": loop_count(after, "FMUL"),
        "ldgsts": loads[0].get("LDGSTS", 0),
        "utmaldg": loads[1].get("UTMALDG", 0),
        "int_before": mixes["baseline"]["integer and address"],
        "int_after": mixes["ours"]["integer and address"],
    }
    for name, key in (("baseline", "before"), ("ours", "after")):
        listed = select(report, implementation=name, listed=True)
        values[f"spilling_{key}"] = (
            f"{sum(bool(r['spill_stores']) for r in listed)} of {len(listed)}"
        )
    tutorial_tile = [128, 64, 4, 2]
    values["tutorial_tile"] = tile_name(tutorial_tile)
    for name, key in (("baseline", "before"), ("ours", "after"), ("tutorial", "tutorial")):
        for causal, suffix in ((False, ""), (True, "_causal")):
            row = first_match(report, implementation=name, kernel="fwd", target="sm_90",
                              head_dim=128, config=tutorial_tile, causal=causal)  # fmt: skip
            values[f"spilled_{key}{suffix}"] = None if row is None else row["spill_stores"]
    for kernel, config in (("dkdv", [32, 128, 8, 3]), ("dq", [128, 64, 8, 3])):
        values[f"{kernel}_tile"] = tile_name(config)
        for name, key in (("baseline", "before"), ("ours", "after")):
            row = first_match(report, implementation=name, kernel=kernel, target="sm_90",
                         head_dim=128, config=config, causal=False)  # fmt: skip
            values[f"{kernel}_fmul_{key}"] = loop_count(row, "FMUL")
            values[f"{kernel}_instructions_{key}"] = loop_count(row)
    pre = first_match(report, implementation="ours", kernel="preprocess", target="sm_90",
                 head_dim=128, causal=False)  # fmt: skip
    batch, heads, seq_len = report["settings"]["shape"]
    o, grad = (torch.empty(batch, heads, seq_len, 128, dtype=torch.float16, device="meta")
               for _ in range(2))  # fmt: skip
    _, peak, _ = measure_tensor_memory(lambda o, g: (g.float() * o.float()).sum(-1), o, grad)
    values["preprocess_registers"] = None if pre is None else pre["registers"]
    values["preprocess_mib"] = f"{peak / 2**20:,.0f}"
    missing = sorted(key for key, value in values.items() if value is None)
    if missing:
        raise ValueError(f"the compile report lacks the compilations of {missing}")
    return {key: str(value) for key, value in values.items()}
