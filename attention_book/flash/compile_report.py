"""The compile report in tables and sentences: what the FlashAttention chapter shows of it.

``benchmarks/flash_compile.py`` compiles the kernels of `attention_book.flash.kernels` (and,
for comparison, those of Triton's fused-attention tutorial and of this package before its
tuning) for sm_90 and sm_80 on a CPU, and writes ``benchmarks/results/flash_compile.json``.
The functions here turn that report (as `attention_book.flash.compiled.load_report` reads it)
into the Markdown of the chapter's section "What the compiler made of our kernel"; every number
they print comes from the report. `attention_book.figures.flash_compiled` calls them, and draws
the one figure, from `instruction_groups`.

The report keeps the SASS of one "showcase" compilation per implementation (the forward,
128 x 64 tiles, 4 warps, 3 stages, head dim 64, not causal, sm_90), from which
`excerpt_markdown` quotes the path of one score.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from attention_book.flash.compiled import OPCODE_GROUPS, group_mix, main_loop, score_path, select
from attention_book.memory import measure_tensor_memory

__all__ = [
    "KERNEL_NAMES",
    "before_after_markdown",
    "changes_markdown",
    "excerpt_markdown",
    "instruction_groups",
    "kernels_changed_since",
    "showcase",
    "summary_markdown",
    "table_markdown",
    "tile_name",
]

#: The kernels of the report, as the chapter names them.
KERNEL_NAMES = {
    "fwd": "forward", "dkdv": "dK/dV", "dq": "dQ", "preprocess": "D and base-2 lse",
}  # fmt: skip
_LABELS = {"baseline": "Before", "ours": "After", "tutorial": "Triton's tutorial"}


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


def _first(report: dict, **fields) -> dict | None:
    rows = select(report, **fields)
    return rows[0] if rows else None


def _count(row: dict | None, opcode: str | None = None, function: str | None = None):
    """Instructions (or one opcode's count) of a compilation's main loop, or None."""
    loop = main_loop(row, function) if row else None
    if loop is None:
        return None
    return loop["instructions"] if opcode is None else loop["opcodes"].get(opcode, 0)


def _change(before, after, what: str) -> str:
    """``128 → 68 FMULs``, or says that one side was not compiled."""
    if before is None or after is None:
        return f"{what}: not compiled"
    return f"{before} → {after} {what}"


def summary_markdown(report: dict) -> str:
    """What the run covered, and each kernel's resources by GPU (listed configurations)."""
    env, settings = report["environment"], report["settings"]
    count = {name: len(select(report, implementation=name)) for name in _LABELS}
    batch, heads, seq_len = settings["shape"]
    fresh = (
        "The kernels have changed since that run: rerun the script to bring this section up "
        "to date."
        if kernels_changed_since(report)
        else "It compiled the kernels exactly as this book shows them."
    )
    baseline = report.get("baseline", {}).get("commit", "")[:7]
    ptxas = " and ".join(f"{version} for {target}" for target, version in env["ptxas"].items())
    lines = [
        f"The last run of `benchmarks/flash_compile.py` ({env['date_utc'][:10]}, Triton "
        f"{env['triton']}, its ptxas {ptxas}) made {count['ours']} compilations of this "
        f"book's kernels (every listed configuration at every head dim, with and without a "
        f"causal mask, and a few more), {count['tutorial']} of the tutorial's, and "
        f"{count['baseline']} of this book's kernels as they were before the changes below "
        f"(commit `{baseline}`), each with the specialization that a launch on "
        f"{settings['dtype']} tensors of shape ({batch}, {heads}, {seq_len}, head_dim) gets. "
        f"{fresh}",
        "",
    ]
    if "tutorial" in report:
        source, digest = report["tutorial"]["source"], report["tutorial"]["sha256"]
        lines += [f"The tutorial's kernels compiled: {source} (SHA-256 `{digest[:12]}`).", ""]
    lines += [
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


def table_markdown(report: dict) -> str:
    """Every listed configuration of the tuned kernels, in a collapsed block."""
    lines = [
        "| GPU | kernel | d | tile | registers | bytes spilled | shared memory, KB "
        "| main loop, instructions |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for row in select(report, implementation="ours", listed=True, causal=False):
        if row["kernel"] == "preprocess":
            continue
        causal = _first(
            report, implementation="ours", kernel=row["kernel"], target=row["target"],
            head_dim=row["head_dim"], config=row["config"], causal=True,
        )  # fmt: skip
        pair = [row] if causal is None else [row, causal]
        cells = [
            " / ".join(str(value(r)) for r in pair) for value in (
                lambda r: r["registers"],
                lambda r: r["spill_stores"] + r["spill_loads"],
                lambda r: f"{r['shared_memory'] / 1024:.0f}",
                _count,
            )
        ]  # fmt: skip
        lines.append(
            f"| {row['target']} | {KERNEL_NAMES[row['kernel']]} | {row['head_dim']} "
            f"| {tile_name(row['config'])} | " + " | ".join(cells) + " |"
        )
    return (
        '??? info "Every listed configuration (not causal / causal)"\n\n'
        "    Instructions are per warp and per iteration of the unmasked loop.\n\n"
        + "\n".join(f"    {line}" for line in lines)
    )


def instruction_groups(report: dict) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The showcase's main loops by kind of instruction, and the kinds any of them uses.

    Returns:
        The kinds, in the order of `OPCODE_GROUPS`, and ``{implementation: {kind: count}}``.
    """
    mixes = {name: group_mix(main_loop(row)["opcodes"]) for name, row in showcase(report).items()}
    kinds = [k for k in [*OPCODE_GROUPS, "other"] if any(m[k] for m in mixes.values())]
    return kinds, mixes


def excerpt_markdown(report: dict) -> str:
    """What the showcase loop does with one score, per kernel, and the difference in words."""
    show = showcase(report)
    paths = {name: score_path(main_loop(row)["sass"]) for name, row in show.items()}
    parts = []
    for name in [name for name in _LABELS if name in paths]:
        parts += [f"{_LABELS[name]}:", "", "```text", *paths[name], "```", ""]
    first = {name: path[0].split()[0] for name, path in paths.items()}
    if first.get("baseline") == "FMUL" and first.get("ours") == "FMNMX":
        parts.append(
            "Before, each score was first multiplied by the scale (`FMUL`), so that the "
            "maximum was taken of scaled scores; after, the maximum is taken of the raw score "
            "(`FMNMX`)"
            + (", as in the tutorial" if first.get("tutorial") == "FMNMX" else "")
            + ", and the scale enters the `FFMA` alone."
        )
    return "\n".join(parts).rstrip()


def changes_markdown(report: dict) -> str:
    """What each change bought, one bullet per change, or "" without a baseline."""
    show = showcase(report)
    if "baseline" not in show or "ours" not in show:
        return ""
    before, after = show["baseline"], show["ours"]
    where = f"{tile_name(after['config'])}, head dim {after['head_dim']}"
    mixes = {name: group_mix(main_loop(show[name])["opcodes"]) for name in ("baseline", "ours")}

    def kind(group, what):
        return _change(mixes["baseline"][group], mixes["ours"][group], what)

    loads = [main_loop(row)["opcodes"] for row in (before, after)]
    bullets = [
        f"- **The scale folded into the exponent.** In the forward's main loop ({where}): "
        f"{_change(_count(before, 'FMUL'), _count(after, 'FMUL'), 'FMULs')} per iteration. "
        "The scores are no longer multiplied one by one before their maximum is taken; the "
        "scale multiplies each row's maximum, and rides in the fused multiply-add (FFMA) that "
        "subtracts it.",
        f"- **Loads through tensor descriptors.** Same loop: {loads[0].get('LDGSTS', 0)} "
        f"per-thread asynchronous copies (LDGSTS) from global memory before, "
        f"{loads[1].get('UTMALDG', 0)} TMA copies (UTMALDG) after, one per tile of K and of V; "
        f"{kind('integer and address', 'integer and address instructions')}: the "
        "descriptor holds the tensor's shape and strides, instead of each thread computing the "
        "addresses of the elements it loads.",
    ]
    spilling = {}
    for name in ("baseline", "ours"):
        listed = select(report, implementation=name, listed=True)
        spilling[name] = f"{sum(bool(r['spill_stores']) for r in listed)} of {len(listed)}"
    theirs = [
        _first(report, implementation=name, kernel="fwd", target="sm_90", head_dim=128,
               config=[128, 64, 4, 2], causal=False)
        for name in ("baseline", "ours", "tutorial")
    ]  # fmt: skip
    registers = (
        f"- **Registers.** Compilations of the listed configurations that spill (both GPUs, "
        f"every head dim, with and without a causal mask): {spilling['baseline']} before, "
        f"{spilling['ours']} after."
    )
    if all(theirs):
        spilled = [row["spill_stores"] for row in theirs]
        registers += (
            f" The tile of the tutorial's tests, {tile_name(theirs[0]['config'])}, at head dim "
            f"128 (not causal): {spilled[0]} bytes spilled before, {spilled[1]} after, "
            f"{spilled[2]} in the tutorial's kernel."
        )
    bullets.append(registers)
    for kernel, config in (("dkdv", [32, 128, 8, 3]), ("dq", [128, 64, 8, 3])):
        pair = [
            _first(report, implementation=name, kernel=kernel, target="sm_90", head_dim=128,
                   config=config, causal=False)
            for name in ("baseline", "ours")
        ]  # fmt: skip
        fmuls = (_count(pair[0], "FMUL"), _count(pair[1], "FMUL"))
        same = (
            " (the same: this kernel loads the log-sum-exp of its queries once, before the "
            "loop, so the multiply by log2(e) was never repeated in it)"
            if fmuls[0] == fmuls[1] and kernel == "dq"
            else ""
        )
        bullets.append(
            f"- **The {KERNEL_NAMES[kernel]} loop reads the log-sum-exp in base 2.** Its main "
            f"loop at head dim 128, {tile_name(config)}: {_change(*fmuls, 'FMULs')}{same}, "
            f"{_change(_count(pair[0]), _count(pair[1]), 'instructions')}."
        )
    pre = _first(report, implementation="ours", kernel="preprocess", target="sm_90",
                 head_dim=128, causal=False)  # fmt: skip
    if pre:
        batch, heads, seq_len = report["settings"]["shape"]
        o, grad = (torch.empty(batch, heads, seq_len, 128, dtype=torch.float16, device="meta")
                   for _ in range(2))  # fmt: skip
        _, peak, _ = measure_tensor_memory(lambda o, g: (g.float() * o.float()).sum(-1), o, grad)
        bullets.append(
            f"- **D in a kernel of its own.** `attn_bwd_preprocess` ({pre['registers']} "
            f"registers) reads O and dO once, in their own dtype, and writes D and the base-2 "
            f"log-sum-exp. The PyTorch expression it replaces, "
            f"`(grad_out.float() * out.float()).sum(-1)`, peaks at {peak / 2**20:,.0f} MiB of "
            "temporary tensors at head dim 128 for this shape (counted by "
            "`measure_tensor_memory`)."
        )
    return "\n".join(bullets)


def before_after_markdown(report: dict) -> str:
    """The table of the tuning: main loops, spills and shared memory, before and after."""
    lines = [
        "| compiled for sm_90 unless said, float16 | before | after | Triton's tutorial |",
        "|---|---:|---:|---:|",
    ]

    def fwd(name, head_dim, config, causal=False):
        return _first(report, implementation=name, kernel="fwd", target="sm_90",
                      head_dim=head_dim, config=config, causal=causal)  # fmt: skip

    for head_dim, config in ((64, [128, 64, 4, 3]), (128, [128, 64, 8, 3])):
        rows = [fwd(name, head_dim, config) for name in _LABELS]
        for what, opcode in (("instructions", None), ("FMULs", "FMUL")):
            values = ["–" if v is None else str(v) for v in (_count(r, opcode) for r in rows)]
            lines.append(
                f"| forward main loop, d = {head_dim}, {tile_name(config)}: {what} "
                f"| {' | '.join(values)} |"
            )
    for config in ([128, 64, 4, 2], [128, 64, 4, 3]):
        cells = []
        for name in _LABELS:
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
        return _first(report, implementation=name, kernel=kernel, target="sm_90",
                      head_dim=head_dim, config=config, causal=False)  # fmt: skip

    for kernel, config in (("dkdv", [32, 128, 8, 3]), ("dq", [128, 64, 8, 3])):
        values = [_count(bwd(name, kernel, 128, config)) for name in ("baseline", "ours")]
        lines.append(
            f"| {KERNEL_NAMES[kernel]} main loop, d = 128, {tile_name(config)}: instructions "
            f"| {' | '.join('–' if v is None else str(v) for v in values)} | – |"
        )
    # The tutorial's backward is one kernel with both loops, at tiles of its own.
    tiles = {"dkdv": [32, 128, 4, 5], "dq": [128, 32, 4, 5]}
    functions = {"dkdv": "_attn_bwd_dkdv", "dq": "_attn_bwd_dq"}
    for head_dim in (64, 128):
        theirs = _first(report, implementation="tutorial", kernel="bwd", target="sm_90",
                        head_dim=head_dim, causal=False)  # fmt: skip
        for kernel, config in tiles.items():
            values = [_count(bwd(name, kernel, head_dim, config)) for name in ("baseline", "ours")]
            values.append(_count(theirs, function=functions[kernel]))
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
