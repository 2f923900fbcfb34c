"""Compile report of the book's FlashAttention kernels: what the compiler makes of them.

Compiles every autotune configuration of every kernel (`attention_book.flash.launch`'s
``TUNING_CONFIGS``) for Hopper (sm_90) and Ampere (sm_80) on a CPU, the way a launch compiles
them: the launchers run on tensors that have a shape, strides and a dtype but no memory (the
meta device), and each kernel launch is turned into a compilation for the chosen GPU, so the
kernels get exactly the specialization a real launch gets (float16, shape (4, 32, 4096,
head_dim), contiguous, strides divisible by 16). No GPU and no GPU driver are involved;
``ptxas`` and ``nvdisasm`` ship with Triton. For each compilation it records:

- registers per thread and bytes spilled to local memory (``ptxas -v``);
- shared memory, against the most one block may use (232,448 bytes on H100, 166,912 on
  A100: the values PyTorch's tests recognize these GPUs by, torch/testing/_internal/
  inductor_utils.py);
- whether the PTX uses ``wgmma.mma_async`` (Hopper's warpgroup MMA) or ``mma.sync``, TMA
  copies, and ``ex2.approx``;
- every loop of the SASS, which call of which inlined function it comes from, whether that
  call is the unmasked one (the main loop), its instruction count and its opcodes.

Optionally the same for the Triton tutorial's fused-attention kernels at the same tiles
(``--tutorial``: a copy of python/tutorials/06-fused-attention.py, whose ``@triton.jit``
functions are compiled and nothing else), and for the package at an earlier git revision
(``--baseline``). The results go to ``benchmarks/results/flash_compile.json`` with a table on
stdout. With ``--check``, the exit status is 1 if a listed configuration spills, needs more
shared memory than its GPU has, or uses ``mma.sync`` instead of ``wgmma`` on sm_90.

Usage::

    python benchmarks/flash_compile.py --tutorial PATH --baseline REV   # the committed report
    python benchmarks/flash_compile.py --quick --check --output /tmp/x.json  # the test's subset
    python benchmarks/flash_compile.py --configs fwd:128:128:4:3 --head-dims 128 --check
"""

from __future__ import annotations

import os

os.environ.pop("TRITON_INTERPRET", None)  # compiled mode; must happen before Triton is imported
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, made explicit
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cached kernel comes without ptxas's report

import argparse
import ast
import contextlib
import datetime
import functools
import hashlib
import importlib.util
import io
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch  # importing torch does not import Triton

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "flash_compile.json"
BATCH, NUM_HEADS, SEQ_LEN = 4, 32, 4096  # the launch whose specialization is compiled
#: Compute capability and the most shared memory one block may use, in bytes.
TARGETS = {"sm_90": (90, 232448), "sm_80": (80, 166912)}
KERNEL_NAMES = {
    "fwd": "attn_fwd", "dkdv": "attn_bwd_dkdv", "dq": "attn_bwd_dq",
    "preprocess": "attn_bwd_preprocess",
}  # fmt: skip
HEAD_DIMS = (16, 32, 64, 128)
#: Configurations compiled besides the listed ones, to show what keeps them off the lists:
#: the forward tile of the tutorial's tests at head dim 128, one whose stages need too much
#: shared memory, and the tutorial's backward tiles.
EXTRA = [
    ("fwd", "sm_90", 128, (128, 64, 4, 2)), ("fwd", "sm_90", 128, (128, 64, 4, 3)),
    ("fwd", "sm_90", 128, (128, 128, 8, 4)),
    *[("dkdv", "sm_90", d, (32, 128, 4, 5)) for d in (64, 128)],
    *[("dq", "sm_90", d, (128, 32, 4, 5)) for d in (64, 128)],
]  # fmt: skip
#: The compilation whose main-loop SASS the report keeps, for the chapter to quote from.
SHOWCASE = {"kernel": "fwd", "target": "sm_90", "head_dim": 64, "causal": False,
            "config": [128, 64, 4, 3]}  # fmt: skip
#: The tutorial's backward tiles: BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2, warps, stages.
TUTORIAL_BACKWARD = (32, 128, 128, 32, 4, 5)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="sm_90,sm_80")
    parser.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    parser.add_argument("--kernels", default="fwd,dkdv,dq,preprocess")
    parser.add_argument("--causal", default="false,true", help="comma list of true/false")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument(
        "--configs", help="KERNEL:BLOCK_M:BLOCK_N:WARPS:STAGES,... instead of the listed ones"
    )
    parser.add_argument("--tutorial", type=Path, help="a copy of 06-fused-attention.py")
    parser.add_argument("--tutorial-source", default="", help="where that copy comes from")
    parser.add_argument("--baseline", help="also compile the package at this git revision")
    parser.add_argument("--package-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--same-tiles", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--label", default="ours", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="sm_90, head dim 128, causal")
    parser.add_argument("--check", action="store_true", help="exit 1 on a violation")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.targets, args.head_dims, args.causal = "sm_90", "128", "true"
    return args


# ---------------------------------------------------------------------------------------------
# Compiling instead of launching
# ---------------------------------------------------------------------------------------------


class ShapeOnly(torch.Tensor):
    """A meta tensor the launchers take for a CUDA tensor: shape, strides, dtype, no memory."""

    @property
    def is_cuda(self):  # the launchers check the device before anything else
        return True


def shape_only(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta").as_subclass(ShapeOnly)


class CompileOnlyDriver:
    """Stands in for Triton's CUDA driver: names the target GPU, launches nothing."""

    def __init__(self, capability):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)
        self.device = capability  # one kernel cache per target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device=None):
        return 0


@contextlib.contextmanager
def compiling_for(capability, wanted):
    """Turn launches of the kernels named in `wanted` into compilations for `capability`.

    Args:
        capability: 90 or 80.
        wanted: ``{kernel function name: launch options to impose, or None to keep those of
            the launcher}``; launches of other kernels are skipped.

    Yields:
        A list that receives ``(name, compiled kernel, ptxas log)`` for each compilation.
    """
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    compiled = []
    original = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        name = self.fn.__name__
        if name not in wanted:
            return None
        kwargs.update(wanted[name] or {})
        self.device_caches.clear()  # compile again, so that ptxas reports again
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            kernel = original(self, *args, grid=grid, warmup=True, **kwargs)
        compiled.append((name, kernel, log.getvalue()))
        return kernel

    previous = driver._active  # not driver.active, which would look for a GPU driver
    knobs.nvidia.dump_ptxas_log = True
    driver.set_active(CompileOnlyDriver(capability))
    JITFunction.run = compile_only
    try:
        yield compiled
    finally:
        JITFunction.run = original
        driver.set_active(previous)


def import_package(package_root):
    """``attention_book.flash.launch`` in compiled mode, from `package_root` if given."""
    if package_root is not None:
        sys.path.insert(0, str(package_root))
    import attention_book

    if package_root is not None and not Path(attention_book.__file__).is_relative_to(package_root):
        raise RuntimeError(f"attention_book was imported from {attention_book.__file__}")
    from attention_book.flash import launch

    return launch


def listed_configs(launch, kernel, capability, head_dim):
    """The configurations a package's autotuner times, at the current or an older revision."""
    if kernel == "preprocess":
        return [None]  # not autotuned: the launcher's own options
    if hasattr(launch, "tuning_configs"):
        return [tuple(c) for c in launch.tuning_configs(kernel, capability // 10, head_dim)]
    # An older revision had one flat list per kernel; read it from the source.
    tree = ast.parse(Path(launch.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in (
            "_TUNING_CONFIGS", "TUNING_CONFIGS",
        ):  # fmt: skip
            return [tuple(c) for c in ast.literal_eval(node.value)[kernel]]
    raise RuntimeError(f"no tuning configurations found in {launch.__file__}")


def compile_ours(launch, kernel, config, head_dim, causal, capability, dtype):
    """Run one launcher so that it compiles `kernel` with `config`; return what compiled."""
    shape = (BATCH, NUM_HEADS, SEQ_LEN, head_dim)
    q, k, v, out, grad_out = (shape_only(shape, dtype) for _ in range(5))
    lse = shape_only(shape[:3], torch.float32)
    block_m, block_n = (config[0], config[1]) if config else (64, 64)
    options = {"num_warps": config[2], "num_stages": config[3]} if config else None
    with compiling_for(capability, {KERNEL_NAMES[kernel]: options}) as compiled:
        if kernel == "fwd":
            launch.triton_attention_forward(q, k, v, causal, None, None, block_m, block_n)
        else:
            launch.triton_attention_backward(
                q, k, v, out, lse, grad_out, causal, None, None, block_m, block_n
            )
    return compiled


def load_tutorial(path):
    """The ``@triton.jit`` functions of the tutorial at `path`, as a module (nothing else runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    keep = [
        node for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any("jit" in ast.unparse(decorator) for decorator in node.decorator_list)
    ]  # fmt: skip
    for node in keep:  # drop @triton.autotune: the tiles are chosen here
        node.decorator_list = [d for d in node.decorator_list if "jit" in ast.unparse(d)]
    header = "import triton\nimport triton.language as tl\n\n\n"
    source = header + "\n\n\n".join(ast.unparse(node) for node in keep) + "\n"
    directory = Path(tempfile.mkdtemp(prefix="flash_compile_"))
    module_path = directory / "fused_attention_tutorial.py"
    module_path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("fused_attention_tutorial", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_tutorial(tutorial, kernel, config, head_dim, causal, capability, dtype):
    """Launch the tutorial's kernels as its ``_attention`` Function does on that GPU."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    shape = (BATCH, NUM_HEADS, SEQ_LEN, head_dim)
    q, k, v, o, do = (shape_only(shape, dtype) for _ in range(5))
    M = shape_only(shape[:3], torch.float32)
    grid = (1, 1, 1)
    if kernel == "fwd":
        block_m, block_n, warps, stages = config
        rows = BATCH * NUM_HEADS * SEQ_LEN
        if capability >= 90:  # host-side descriptors, block shapes set by its pre-hook
            blocks = (block_m, block_n, block_n, block_m)
            descs = [
                TensorDescriptor(t, [rows, head_dim], [head_dim, 1], [b, head_dim])
                for t, b in zip((q, k, v, o), blocks, strict=True)
            ]
        else:  # device-side descriptors, made in the kernel
            descs = [q, k, v, o]
        wanted = {"_attn_fwd": {"num_warps": warps, "num_stages": stages}}
        with compiling_for(capability, wanted) as compiled:
            tutorial._attn_fwd[grid](
                0.125, M, BATCH, NUM_HEADS, *descs, N_CTX=SEQ_LEN, HEAD_DIM=head_dim,
                BLOCK_M=block_m, BLOCK_N=block_n, FP8_OUTPUT=False, STAGE=3 if causal else 1,
                warp_specialize=False, IS_HOPPER=capability == 90,
            )  # fmt: skip
        return compiled
    m1, n1, m2, n2, warps, stages = TUTORIAL_BACKWARD
    wanted = {"_attn_bwd": {"num_warps": warps, "num_stages": stages}}
    with compiling_for(capability, wanted) as compiled:
        tutorial._attn_bwd[grid](
            q, k, v, 0.125, do, q, k, v, M, M, *q.stride(), NUM_HEADS, SEQ_LEN,
            BLOCK_M1=m1, BLOCK_N1=n1, BLOCK_M2=m2, BLOCK_N2=n2, BLK_SLICE_FACTOR=2,
            HEAD_DIM=head_dim, CAUSAL=causal,
        )  # fmt: skip
    return compiled


# ---------------------------------------------------------------------------------------------
# Reading what was compiled
# ---------------------------------------------------------------------------------------------


def calls_with_loops(jit_function):
    """The calls in a kernel of functions that hold a loop: line range, callee, masked or not.

    A call is unmasked when it passes ``MASKED=False`` or ``MASK=False`` (the book's kernels,
    the tutorial's backward), or the tutorial forward's off-band stage ``4 - STAGE``.
    """
    path = Path(jit_function.fn.__code__.co_filename)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    with_loops = {
        name for name, node in functions.items()
        if any(isinstance(n, ast.For) for n in ast.walk(node))
    }  # fmt: skip
    calls = []
    for node in ast.walk(functions[jit_function.fn.__name__]):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in with_loops:
            flags = {kw.arg: kw.value for kw in node.keywords if kw.arg in ("MASKED", "MASK")}
            masked = None
            for value in flags.values():
                masked = bool(value.value) if isinstance(value, ast.Constant) else None
            if not flags:
                text = ast.unparse(node)
                masked = False if "4 - STAGE" in text else True if ", 2," in text else None
            calls.append((node.lineno, node.end_lineno, node.func.id, masked))
    return str(path), calls


@functools.cache
def reader():
    """`attention_book.flash.compiled` of this checkout, also when a baseline is compiled."""
    path = ROOT / "attention_book" / "flash" / "compiled.py"
    spec = importlib.util.spec_from_file_location("flash_compiled_reader", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def describe(name, kernel, log, jit_function, limit, keep_sass=False):
    """Registers, spills, shared memory, PTX features and every loop of one compiled kernel.

    With `keep_sass`, each main loop also keeps its instructions, as text.
    """
    read = reader()
    path, calls = calls_with_loops(jit_function)
    instructions, labels = read.parse_sass(read.disassemble(kernel.asm["cubin"]))
    loops = []
    for body_range in read.find_loops(instructions, labels):
        body = [instructions[i] for i in body_range]
        line = read.call_site(body, path)
        call = next((c for c in calls if line is not None and c[0] <= line <= c[1]), None)
        opcodes = read.instruction_mix(body)
        loop = {
            "function": call[2] if call else None,
            "masked": call[3] if call else None,
            "instructions": len(body),
            "mma": opcodes.get("HGMMA", 0) + opcodes.get("HMMA", 0),
        }
        if loop["masked"] is False and loop["mma"]:  # a main loop: what it is made of
            loop["opcodes"] = opcodes
            if keep_sass:
                loop["sass"] = [
                    f"{i.predicate} {i.opcode}{i.modifiers} {i.operands}".strip() for i in body
                ]
        loops.append(loop)
    return {
        **read.ptxas_usage(log),
        "shared_memory": kernel.metadata.shared,
        "shared_memory_limit": limit,
        "ptx": read.ptx_features(kernel.asm["ptx"]),
        "loops": loops,
    }


def violations(row):
    """What is wrong with one compiled configuration: spills, shared memory, mma.sync."""
    found = []
    if row["spill_stores"] or row["spill_loads"]:
        found.append(f"spills {row['spill_stores']} bytes (stores), {row['spill_loads']} (loads)")
    if row["shared_memory"] > row["shared_memory_limit"]:
        found.append(f"needs {row['shared_memory']} bytes of shared memory, over the limit")
    uses_mma = row["kernel"] != "preprocess"
    if (
        row["target"] == "sm_90"
        and uses_mma
        and (row["ptx"]["mma_sync"] or not row["ptx"]["wgmma"])
    ):
        found.append("uses mma.sync, not wgmma, on sm_90")
    return found


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def jobs(args, launch):
    """(kernel, config, listed, head_dim, causal, target) of every compilation of ours.

    With ``--same-tiles REPORT`` (how a baseline is compiled), the configurations of that
    report are compiled too, so that the two can be compared tile by tile.
    """
    also = {}
    if args.same_tiles:
        for row in json.loads(args.same_tiles.read_text(encoding="utf-8"))["results"]:
            if row["config"]:
                key = (row["kernel"], row["target"], row["head_dim"])
                also.setdefault(key, []).append(tuple(row["config"]))
    if not args.configs and not args.quick:
        for kernel, target, head_dim, config in EXTRA:
            also.setdefault((kernel, target, head_dim), []).append(config)
    chosen = {}
    if args.configs:
        for item in args.configs.split(","):
            kernel, *numbers = item.split(":")
            chosen.setdefault(kernel, []).append(tuple(int(n) for n in numbers))
    masks = args.causal.split(",")
    for target in args.targets.split(","):
        capability = TARGETS[target][0]
        for kernel in chosen or args.kernels.split(","):
            for head_dim in (int(h) for h in args.head_dims.split(",")):
                for k, causal in enumerate(c.strip().lower() == "true" for c in masks):
                    if kernel == "preprocess" and k > 0:
                        continue  # the same kernel with a causal mask or without
                    listed = listed_configs(launch, kernel, capability, head_dim)
                    configs = list(chosen.get(kernel, listed))
                    for config in also.get((kernel, target, head_dim), []):
                        configs += [config] if config not in configs else []
                    for config in configs:
                        yield kernel, config, config in listed, head_dim, causal, target


def run_ours(args):
    launch = import_package(args.package_root)
    dtype = getattr(torch, args.dtype)
    rows = []
    for kernel, config, listed, head_dim, causal, target in jobs(args, launch):
        capability, limit = TARGETS[target]
        start = time.perf_counter()
        compiled = compile_ours(launch, kernel, config, head_dim, causal, capability, dtype)
        if not compiled:  # an older revision without this kernel
            continue
        name, kernel_object, log = compiled[0]
        row = {
            "implementation": args.label, "kernel": kernel, "target": target,
            "head_dim": head_dim, "causal": causal, "dtype": args.dtype,
            "config": list(config) if config else None, "listed": listed,
        }  # fmt: skip
        jit = getattr(launch.kernels, name)
        showcase = all(row[key] == value for key, value in SHOWCASE.items())
        row |= describe(name, kernel_object, log, jit, limit, keep_sass=showcase)
        row["compile_seconds"] = round(time.perf_counter() - start, 1)
        row["violations"] = violations(row)
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def run_tutorial(args, ours):
    """The tutorial at the tiles of our forward compilations (d >= BLOCK_N), and its backward,
    at head dims 64 and 128, not causal and causal, on every target."""
    tutorial = load_tutorial(args.tutorial)
    dtype = getattr(torch, args.dtype)
    tiles = sorted({
        (tuple(r["config"]), r["head_dim"], r["target"]) for r in ours
        if r["kernel"] == "fwd" and r["head_dim"] in (64, 128)
    })  # fmt: skip
    work = [("fwd", config, head_dim, target) for config, head_dim, target in tiles]
    work += [("bwd", TUTORIAL_BACKWARD, d, t) for t in args.targets.split(",") for d in (64, 128)]
    rows = []
    for kernel, config, head_dim, target in work:
        if kernel == "fwd" and config[1] > head_dim:
            continue  # the tutorial asserts BLOCK_N <= HEAD_DIM
        for causal in (False, True):
            capability, limit = TARGETS[target]
            start = time.perf_counter()
            compiled = compile_tutorial(
                tutorial, kernel, config, head_dim, causal, capability, dtype
            )
            name, kernel_object, log = compiled[0]
            row = {
                "implementation": "tutorial", "kernel": kernel, "target": target,
                "head_dim": head_dim, "causal": causal, "dtype": args.dtype,
                "config": list(config), "listed": False,
            }  # fmt: skip
            showcase = all(row[key] == value for key, value in SHOWCASE.items())
            jit = getattr(tutorial, name)
            row |= describe(name, kernel_object, log, jit, limit, keep_sass=showcase)
            row["compile_seconds"] = round(time.perf_counter() - start, 1)
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def run_baseline(args, current):
    """This script, in a subprocess, on the package as it was at git revision ``--baseline``.

    It compiles that revision's own listed configurations and those of `current`.
    """
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.baseline], capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    subject = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%s", commit], capture_output=True,
        text=True, check=True,
    ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "attention_book"], capture_output=True,
            check=True,
        ).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
        output = Path(directory) / "baseline.json"
        tiles = Path(directory) / "current.json"  # compared tile by tile: sm_90, d = 64, 128
        same = [r for r in current if r["target"] == "sm_90" and r["head_dim"] in (64, 128)]
        tiles.write_text(json.dumps({"results": same}), encoding="utf-8")
        command = [
            sys.executable, __file__, "--package-root", directory, "--label", "baseline",
            "--targets", args.targets, "--head-dims", args.head_dims, "--causal", args.causal,
            "--kernels", args.kernels, "--dtype", args.dtype, "--output", str(output),
            "--same-tiles", str(tiles),
        ]  # fmt: skip
        subprocess.run(command, check=True)
        rows = json.loads(output.read_text(encoding="utf-8"))["results"]
    return {"commit": commit, "subject": subject}, rows


def format_row(row):
    main = [loop for loop in row["loops"] if loop["masked"] is False and loop["mma"]]
    loops = " ".join(f"{loop['function']}:{loop['instructions']}" for loop in main) or "-"
    config = "x".join(map(str, row["config"])) if row["config"] else "launcher's"
    flags = "; ".join(row.get("violations", [])) or "ok"
    return (
        f"{row['implementation']:9} {row['kernel']:10} {row['target']} d={row['head_dim']:<3} "
        f"causal={row['causal']!s:5} {config:12} regs {row['registers']:3} "
        f"spill {row['spill_stores']:5} smem {row['shared_memory']:6} "
        f"wgmma {row['ptx']['wgmma']!s:5} main loop {loops:24} {flags}"
    )


def write_report(report, path):
    """The report as JSON, one compilation per line (compact, and readable in a diff)."""
    head = {key: value for key, value in report.items() if key != "results"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "results": [\n'
    text += ",\n".join(json.dumps(row, separators=(",", ":")) for row in report["results"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n ]\n}\n", encoding="utf-8")


def environment():
    import triton
    from triton import knobs

    ptxas = {}  # Triton 3.9 assembles sm_90 with its "ptxas-blackwell", sm_80 with "ptxas"
    for target, tool in (("sm_90", knobs.nvidia.ptxas_blackwell), ("sm_80", knobs.nvidia.ptxas)):
        version = subprocess.run([tool.path, "--version"], capture_output=True, text=True)
        ptxas[target] = re.search(r"release (\S+),", version.stdout).group(1)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()  # fmt: skip
    sources = ROOT / "attention_book" / "flash"
    digest = hashlib.sha256()
    for name in ("kernels.py", "launch.py"):
        digest.update((sources / name).read_bytes())
    return {
        "triton": triton.__version__, "torch": torch.__version__, "ptxas": ptxas,
        "python": platform.python_version(), "machine": platform.machine(),
        "git_commit": commit, "kernels_sha256": digest.hexdigest(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    ours = run_ours(args)
    report = {
        "environment": environment(),
        "settings": {
            "shape": [BATCH, NUM_HEADS, SEQ_LEN], "dtype": args.dtype,
            "targets": {t: {"capability": c, "shared_memory_limit": m}
                        for t, (c, m) in TARGETS.items() if t in args.targets.split(",")},
        },
        "results": list(ours),
    }  # fmt: skip
    if args.tutorial:
        digest = hashlib.sha256(args.tutorial.read_bytes()).hexdigest()
        report["tutorial"] = {"source": args.tutorial_source, "sha256": digest}
        report["results"] += run_tutorial(args, ours)
    if args.baseline:
        report["baseline"], baseline_rows = run_baseline(args, ours)
        report["results"] += baseline_rows
    write_report(report, args.output)
    bad = [r for r in ours if r["violations"]]
    print(f"wrote {args.output} in {time.perf_counter() - start:.0f} s; {len(bad)} violations")
    for row in bad:
        print("VIOLATION", format_row(row))
    if args.check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
