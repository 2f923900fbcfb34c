"""Reading what the compiler made of a Triton kernel, without a GPU.

Triton compiles a kernel in stages: Triton IR, TritonGPU IR, LLVM IR, PTX (NVIDIA's virtual
instruction set), and a cubin, the machine code of one GPU generation, which NVIDIA's assembler
``ptxas`` makes from the PTX. All of it runs on a CPU, and three of the results answer the
questions that decide a kernel's speed:

- ptxas's report (``ptxas -v``): registers per thread, and the bytes *spilled* to local memory
  (a per-thread slice of the GPU's main memory) when the registers do not suffice;
- the PTX: which instructions Triton chose, for example Hopper's warpgroup matrix multiply
  ``wgmma.mma_async`` or the older warp-level ``mma.sync``, and ``cp.async.bulk.tensor``, a
  copy by the Tensor Memory Accelerator (TMA);
- the SASS, the GPU's own instructions, disassembled from the cubin by ``nvdisasm`` (which
  ships with Triton): how many instructions one iteration of a loop costs, and of which kind.

`ptxas_usage`, `ptx_features` and `parse_sass` read these texts; `find_loops` finds the loops
of a disassembled kernel, `call_site` tells which call of an inlined function a loop comes
from, and `instruction_mix` counts a loop's instructions by opcode (`group_mix` by kind,
`OPCODE_GROUPS`). ``benchmarks/flash_compile.py`` uses them to write the compile report, and
`load_report`, `select` and `main_loop` read that report back. Only `disassemble` needs Triton
(for its ``nvdisasm``); the rest works on text.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile
from typing import NamedTuple

__all__ = [
    "OPCODE_GROUPS",
    "Instruction",
    "call_site",
    "disassemble",
    "find_loops",
    "group_mix",
    "instruction_mix",
    "load_report",
    "main_loop",
    "opcode_group",
    "parse_sass",
    "ptx_features",
    "ptxas_usage",
    "score_path",
    "select",
]

#: The kinds of SASS instructions a reader of an attention kernel looks for, by opcode (the
#: mnemonic without its ``.modifiers``). Opcodes that are not listed count as "other".
OPCODE_GROUPS = {
    "tensor-core matrix multiply": ("HGMMA", "HMMA"),
    "special functions (MUFU: exp2)": ("MUFU",),
    "float32 multiply": ("FMUL",),
    "float32 add, max": ("FADD", "FMNMX"),
    "float32 fused multiply-add": ("FFMA",),
    "compare and select": ("FSEL", "SEL", "FSETP", "ISETP", "PLOP3", "P2R", "R2P"),
    "convert to 16 bits": ("F2FP", "F2F", "PRMT", "I2F", "F2I", "I2FP"),
    "integer and address": (
        "IMAD", "IADD3", "LEA", "SHF", "LOP3", "IABS", "VIADD", "IMNMX", "SGXT", "IADD",
    ),
    "uniform (per-warp) operations": (
        "UIADD3", "UMOV", "ULEA", "USHF", "ULOP3", "UISETP", "UIMAD", "USEL", "UPRMT", "USGXT",
        "R2UR", "S2UR", "ULDC", "UVIADD", "UPLOP3", "VOTEU",
    ),
    "global memory": (
        "LDG", "STG", "LDGSTS", "LDGDEPBAR", "UTMALDG", "UTMASTG", "UBLKCP", "UTMAPF", "RED",
        "ATOM", "UTMACCTL", "UTMACMDFLUSH",
    ),
    "shared memory": ("LDS", "STS", "LDSM", "STSM"),
    "local memory (spills)": ("LDL", "STL"),
    "synchronization": (
        "BAR", "SYNCS", "WARPGROUP", "DEPBAR", "MEMBAR", "FENCE", "WARPSYNC", "ERRBAR", "ELECT",
    ),
    "warp shuffle": ("SHFL",),
    "moves": ("MOV", "CS2R", "S2R", "LDC"),
    "control flow": ("BRA", "EXIT", "NOP", "BSSY", "BSYNC", "CALL", "RET", "YIELD"),
}  # fmt: skip

_GROUP_OF = {opcode: group for group, opcodes in OPCODE_GROUPS.items() for opcode in opcodes}

_LINE = re.compile(r'//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
_INSTRUCTION = re.compile(
    r"^\s*/\*(?P<address>[0-9a-f]{4,})\*/\s+(?P<predicate>@!?U?P[T0-7]\s+)?"
    r"(?P<opcode>[A-Z][A-Z0-9_]*)(?P<modifiers>(?:\.[A-Za-z0-9_]+)*)\s*(?P<operands>[^;]*);"
)
_LABEL = re.compile(r"^(?P<label>\.L_x_\d+):")
_TARGET = re.compile(r"`\((?P<label>\.L_x_\d+)\)")
_REGISTER = re.compile(r"\bU?R\d+\b")


class Instruction(NamedTuple):
    """One SASS instruction, with the source lines it was compiled from (when known)."""

    address: int
    opcode: str
    modifiers: str
    predicate: str
    operands: str
    target: str | None  # the label a branch jumps to
    source: tuple[tuple[str, int], ...]  # (file, line), innermost inlined function first


def ptxas_usage(log: str) -> dict:
    """Registers and spills from ptxas's verbose report (``ptxas -v``) of one kernel.

    Args:
        log: What ptxas printed, for example ``Used 168 registers, used 1 barriers`` and
            ``0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads``.

    Returns:
        ``{"registers", "spill_stores", "spill_loads", "stack_frame"}``: registers per thread
        and bytes per thread.

    Raises:
        ValueError: If the log has no register count (it is not a ``-v`` report).
    """
    registers = re.search(r"Used (\d+) registers", log)
    if registers is None:
        raise ValueError(f"log must be a ptxas -v report with 'Used N registers', got {log!r}")
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    return {
        "registers": int(registers.group(1)),
        "spill_stores": int(spills.group(1)) if spills else 0,
        "spill_loads": int(spills.group(2)) if spills else 0,
        "stack_frame": int(stack.group(1)) if stack else 0,
    }


def ptx_features(ptx: str) -> dict:
    """Which of the instructions that matter for attention the PTX of a kernel uses.

    Args:
        ptx: The PTX text (Triton's ``compiled.asm["ptx"]``).

    Returns:
        Booleans: "wgmma" (Hopper's warpgroup MMA), "mma_sync" (warp-level MMA),
        "tma" (``cp.async.bulk.tensor``), "cp_async" (Ampere's per-thread asynchronous copy)
        and "ex2_approx" (the hardware base-2 exponential).
    """
    return {
        "wgmma": "wgmma.mma_async" in ptx,
        "mma_sync": re.search(r"\bmma\.sync\b", ptx) is not None,
        "tma": "cp.async.bulk.tensor" in ptx,
        "cp_async": re.search(r"\bcp\.async\.c[ag]\b", ptx) is not None,
        "ex2_approx": "ex2.approx" in ptx,
    }


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin, with source lines and inlining, by the ``nvdisasm`` of Triton.

    Args:
        cubin: The machine code (Triton's ``compiled.asm["cubin"]``).

    Returns:
        The text of ``nvdisasm -c -gi``.
    """
    from triton import knobs  # only this function needs Triton

    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as file:
        file.write(cubin)
    try:
        command = [knobs.nvidia.nvdisasm.path, "-c", "-gi", file.name]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout
    finally:
        os.remove(file.name)


def parse_sass(text: str) -> tuple[list[Instruction], dict[str, int]]:
    """The instructions of ``nvdisasm -c -gi`` output, and where each label points.

    Args:
        text: The disassembly.

    Returns:
        The instructions in address order, and ``{label: index of the next instruction}``.
    """
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    source: tuple = ()
    frames: list[tuple[str, int]] = []  # nvdisasm -gi prints the innermost frame first
    for raw in text.splitlines():
        if match := _LINE.search(raw):
            frames.append((match["file"], int(match["line"])))
            continue
        if frames:
            source, frames = tuple(frames), []
        if match := _LABEL.match(raw):
            labels[match["label"]] = len(instructions)
        elif match := _INSTRUCTION.match(raw):
            target = _TARGET.search(match["operands"])
            instructions.append(
                Instruction(
                    int(match["address"], 16), match["opcode"], match["modifiers"],
                    (match["predicate"] or "").strip(), match["operands"].strip(),
                    target["label"] if target else None, source,
                )
            )  # fmt: skip
    return instructions, labels


# --8<-- [start:sass_loops]
def find_loops(instructions: list[Instruction], labels: dict[str, int]) -> list[range]:
    """The loops of a kernel: each backward branch and the instructions it jumps back over.

    A branch to an earlier label closes a loop whose body runs from that label to the branch.
    Branches placed after the kernel's last ``EXIT`` are left out: ptxas puts there the retry
    paths of barrier waits, which jump back into the code they came from but are not loops of
    the source.

    Args:
        instructions: As returned by `parse_sass`.
        labels: As returned by `parse_sass`.

    Returns:
        One range of instruction indices per loop, in address order.
    """
    exits = [i for i, instruction in enumerate(instructions) if instruction.opcode == "EXIT"]
    last_exit = exits[-1] if exits else len(instructions)
    loops = []
    for index, instruction in enumerate(instructions[:last_exit]):
        start = labels.get(instruction.target) if instruction.opcode == "BRA" else None
        if start is not None and start <= index:
            loops.append(range(start, index + 1))
    return loops


def call_site(body: list[Instruction], source_file: str) -> int | None:
    """The line of `source_file` where the function that a loop comes from was called.

    Triton inlines every ``@triton.jit`` function a kernel calls, and ``nvdisasm -gi`` gives
    each instruction its chain of source lines, from the innermost inlined function out to the
    kernel. Two calls of the same function (one with a mask, one without) give two loops of
    identical inner lines; the outermost line, the call in the kernel, tells them apart.

    Args:
        body: The instructions of one loop.
        source_file: The path of the kernel's source file.

    Returns:
        The most common outermost line of the body's instructions that were inlined from a
        call in `source_file`, or None if there is none.
    """
    lines = collections.Counter(
        instruction.source[-1][1]
        for instruction in body
        if len(instruction.source) > 1 and instruction.source[-1][0] == source_file
    )
    return lines.most_common(1)[0][0] if lines else None


# --8<-- [end:sass_loops]


def score_path(sass: list[str]) -> list[str]:
    """What a loop does with one score, from the matrix multiply to its exponential.

    The loop's first exponential of a fused multiply-add (``MUFU.EX2`` of an ``FFMA``, as in
    ``exp2(qk * qk_scale - m)``) names the score: the ``FFMA``'s operand that is neither
    subtracted nor shared by the other ``FFMA`` instructions (as the scale is). Listed are the
    instructions that read that score after it was written (matrix multiplies left out), every
    instruction through which the score's value reaches the register that the ``FFMA``
    subtracts (the row's maximum: the chain of maxima and shuffles that reads the score, and
    what follows it up to that register's last write), the ``FFMA``, and the exponential.
    Instructions that do not carry the score, such as the maxima of the row's other scores,
    are left out. An instruction's first register operand is the one it writes.

    Args:
        sass: One loop's instructions as text, ``"OPCODE.MODIFIERS destination, sources"``.

    Returns:
        Those instructions, in program order.

    Raises:
        ValueError: If `sass` has no exponential of a fused multiply-add.
    """
    words = [line.split() for line in sass]
    opcodes = [w[1] if w[0].startswith("@") else w[0] for w in words]
    registers = [_REGISTER.findall(line.split(None, 1)[-1]) for line in sass]

    def last_writer(index, register):
        return next((j for j in range(index - 1, -1, -1) if registers[j][:1] == [register]), None)

    fma = exp = None
    for index, opcode in enumerate(opcodes):
        if opcode == "MUFU.EX2" and len(registers[index]) > 1:
            writer = last_writer(index, registers[index][1])
            if writer is not None and opcodes[writer] == "FFMA":
                fma, exp = writer, index
                break
    if fma is None:
        raise ValueError("sass must hold an exponential (MUFU.EX2) of an FFMA, got none")
    uses = collections.Counter(
        r for i, opcode in enumerate(opcodes) if opcode == "FFMA" for r in set(registers[i][1:])
    )
    subtracted = set(re.findall(r"-(U?R\d+)", sass[fma]))
    operands = [r for r in registers[fma][1:] if r not in subtracted and not r.startswith("U")]
    score = min(operands, key=lambda register: uses[register])
    written = last_writer(fma, score)
    if written is None:  # a matrix multiply wrote the score as part of a range of registers
        mma = [k for k in range(fma) if opcodes[k].startswith(("HGMMA", "HMMA"))]
        written = mma[-1] if mma else -1
    readers = [
        k for k in range(max(written, 0), fma)
        if score in registers[k][1:] and not opcodes[k].startswith(("HGMMA", "HMMA"))
    ]  # fmt: skip
    # Forward from the score: the instructions that read a register holding its value.
    carries, holding = set(), {score}
    for k in range(written + 1, fma):
        if opcodes[k].startswith(("HGMMA", "HMMA")) or not registers[k]:
            continue
        if holding & set(registers[k][1:]):
            carries.add(k)
            holding.add(registers[k][0])
        elif not words[k][0].startswith("@"):  # overwritten with something else
            holding.discard(registers[k][0])
    # Back from the subtracted register: the instructions its value was computed by.
    feeds, todo = set(), [(fma, r) for r in subtracted if not r.startswith("U")]
    while todo:
        index, register = todo.pop()
        writer = last_writer(index, register)
        if writer is not None and writer not in feeds:
            feeds.add(writer)
            todo += [(writer, r) for r in registers[writer][1:] if not r.startswith("U")]
    chain = sorted(set(readers) | (carries & feeds))
    return [sass[k] for k in [*chain, fma, exp]]


def opcode_group(opcode: str) -> str:
    """The kind of an opcode in `OPCODE_GROUPS`, or "other"."""
    return _GROUP_OF.get(opcode, "other")


def instruction_mix(body: list[Instruction]) -> dict[str, int]:
    """How many instructions of each opcode a stretch of SASS has, most frequent first.

    Args:
        body: Instructions, for example one loop's.

    Returns:
        ``{opcode: count}``.
    """
    return dict(collections.Counter(instruction.opcode for instruction in body).most_common())


def load_report(results_dir: str | os.PathLike) -> dict | None:
    """The compile report ``flash_compile.json`` that ``benchmarks/flash_compile.py`` writes.

    Args:
        results_dir: The directory of the benchmark results.

    Returns:
        The report, or None if the directory has none.
    """
    import json
    from pathlib import Path

    path = Path(results_dir) / "flash_compile.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def select(report: dict, **fields: object) -> list[dict]:
    """The compilations of a report whose fields equal the given ones.

    Args:
        report: As returned by `load_report`.
        **fields: For example ``implementation="ours", kernel="fwd", config=(128, 64, 4, 3)``
            (a config may be given as a tuple).

    Returns:
        The matching rows, in the report's order.
    """
    wanted = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
    return [row for row in report["results"] if all(row.get(k) == v for k, v in wanted.items())]


def main_loop(row: dict, function: str | None = None) -> dict | None:
    """The main loop of one compilation: the unmasked loop with matrix multiplies.

    Args:
        row: One compilation of the report.
        function: The inlined function the loop comes from, for kernels with two main loops
            (the tutorial's backward has one for dK and dV, one for dQ).

    Returns:
        The loop's record (instructions, opcodes, ...), or None if there is none.
    """
    loops = [
        loop for loop in row["loops"]
        if loop["masked"] is False and loop["mma"]
        and (function is None or loop["function"] == function)
    ]  # fmt: skip
    return loops[0] if loops else None


def group_mix(opcodes: dict[str, int]) -> dict[str, int]:
    """Instruction counts by kind, in the order of `OPCODE_GROUPS`, then "other".

    Args:
        opcodes: ``{opcode: count}``, as in a loop's record.

    Returns:
        ``{group: count}`` for every group, zeros included.
    """
    groups = dict.fromkeys([*OPCODE_GROUPS, "other"], 0)
    for opcode, count in opcodes.items():
        groups[opcode_group(opcode)] += count
    return groups
