"""Attention throughput on a CUDA GPU: the book's Triton kernel vs PyTorch's SDPA backends.

Measures forward and forward+backward time with ``triton.testing.do_bench`` (median of
repeated runs after warm-up) for:

- ``triton``: attention_book.flash's Triton kernel (autotuned block sizes);
- ``sdpa-flash``, ``sdpa-cudnn``, ``sdpa-efficient``, ``sdpa-math``: PyTorch's
  ``scaled_dot_product_attention`` restricted to one backend with
  ``torch.nn.attention.sdpa_kernel``;
- ``naive``: softmax(Q K^T / sqrt(d)) V written with three PyTorch operations.

Shapes follow the FlashAttention-2 paper's benchmark: batch * seq_len = 16k tokens and
num_heads * head_dim = 2048, for seq_len 512 to 16k, head_dim 64 and 128, causal and not,
float16 and bfloat16. FLOPs are counted as in that paper: 4 * batch * heads * seq_len^2 *
head_dim for the forward (two matmuls), halved when causal, and 2.5 times the forward for the
backward (five matmuls instead of two). TFLOP/s = FLOPs / time.

The results, with the GPU's name, driver, library versions and the date, are written to
``benchmarks/results/flash_gpu.json`` after every configuration, so a run cut short still
leaves its data. For the book's kernel each row also records the tiles the autotuner chose
(BLOCK_M, BLOCK_N, num_warps, num_stages of the forward, dK/dV and dQ kernels), which the
chapter puts beside what ``benchmarks/flash_compile.py`` reports for the same configurations.
The chapter draws its GPU figure from that file.

Usage::

    python benchmarks/flash_gpu.py            # everything (not timed on a GPU yet: minutes)
    python benchmarks/flash_gpu.py --quick    # bf16, head_dim 128, three lengths
    python benchmarks/flash_gpu.py --dtypes float16 && \
        python benchmarks/flash_gpu.py --dtypes bfloat16 --merge   # the sweep in two runs

Without a CUDA device it exits with a message and status 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "flash_gpu.json"
PROVIDERS = ["triton", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "sdpa-math", "naive"]
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-lens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--causal", default="false,true", help="comma list of true/false")
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--tokens", type=int, default=16384, help="batch * seq_len")
    parser.add_argument("--model-dim", type=int, default=2048, help="num_heads * head_dim")
    parser.add_argument("--warmup-ms", type=int, default=25)
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="bf16, d=128, n in 1k/4k/16k")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows of an existing output file that this run does not measure again "
        "(to split a long sweep into several runs on the same GPU)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_lens, args.head_dims, args.dtypes = "1024,4096,16384", "128", "bfloat16"
    return args


def attention_flops(batch, num_heads, seq_len, head_dim, causal, mode):
    """FLOPs of one call, counted as in the FlashAttention-2 paper."""
    forward = 4 * batch * num_heads * seq_len**2 * head_dim / (2 if causal else 1)
    return {"fwd": forward, "bwd": 2.5 * forward, "fwd_bwd": 3.5 * forward}[mode]


def naive_attention(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def make_call(provider, q, k, v, causal):
    """A zero-argument function computing attention with `provider`, and its context manager."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attention_book.flash import flash_attention

    backends = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa-math": SDPBackend.MATH,
    }
    if provider == "triton":
        return lambda: flash_attention(q, k, v, causal=causal, backend="triton"), nullcontext()
    if provider == "naive":
        return lambda: naive_attention(q, k, v, causal), nullcontext()
    # q_len == k_len here, so PyTorch's top-left is_causal equals the book's bottom-right.
    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    return call, sdpa_kernel(backends[provider])


def bench_one(provider, batch, num_heads, seq_len, head_dim, dtype, causal, args):
    """Times of forward and forward+backward in ms, or the reason they could not be measured."""
    from triton.testing import do_bench

    generator = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch, num_heads, seq_len, head_dim)
    q, k, v = (
        torch.randn(shape, device="cuda", dtype=dtype, generator=generator).requires_grad_()
        for _ in range(3)
    )
    grad_out = torch.randn(shape, device="cuda", dtype=dtype, generator=generator)
    call, context = make_call(provider, q, k, v, causal)
    result = {}
    try:
        with torch.no_grad():  # PyTorch's default SDPA choice, as the accuracy reference
            reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with context:
            out = call()  # compiles / autotunes / raises if the backend is unavailable
            result["max_abs_diff_vs_sdpa_default"] = (out - reference).abs().max().item()
            del out, reference
            fwd_ms = do_bench(call, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")

            def forward_backward():
                torch.autograd.grad(call(), (q, k, v), grad_out)

            forward_backward()  # the backward kernels compile and autotune here, untimed
            fwd_bwd_ms = do_bench(
                forward_backward, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median"
            )
    except (RuntimeError, torch.cuda.OutOfMemoryError) as error:  # unsupported or too large
        torch.cuda.empty_cache()
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        return {"error": f"{type(error).__name__}: {first_line[:300]}"}
    if provider == "triton":
        result["tuned"] = chosen_tiles()
    flops = {m: attention_flops(batch, num_heads, seq_len, head_dim, causal, m) for m in
             ("fwd", "bwd", "fwd_bwd")}  # fmt: skip
    bwd_ms = fwd_bwd_ms - fwd_ms
    result.update(
        fwd_ms=fwd_ms,
        fwd_bwd_ms=fwd_bwd_ms,
        bwd_ms=bwd_ms,
        fwd_tflops=flops["fwd"] / fwd_ms / 1e9,
        fwd_bwd_tflops=flops["fwd_bwd"] / fwd_bwd_ms / 1e9,
        bwd_tflops=flops["bwd"] / bwd_ms / 1e9 if bwd_ms > 0 else None,
    )
    return result


def chosen_tiles():
    """The configuration the autotuner chose last for each tuned kernel of the book's Triton
    backend: ``{"fwd": [BLOCK_M, BLOCK_N, num_warps, num_stages], ...}``."""
    from attention_book.flash import launch

    tiles = {}
    for name, kernel in (launch.AUTOTUNED._asdict() if launch.AUTOTUNED else {}).items():
        config = getattr(kernel, "best_config", None)
        if config is not None:
            blocks = [config.kwargs.get("BLOCK_M"), config.kwargs.get("BLOCK_N")]
            tiles[name] = [*blocks, config.num_warps, config.num_stages]
    return tiles


def environment():
    """The GPU, driver, library versions and the date of the run."""
    import triton

    def command_output(command):
        try:
            return subprocess.run(
                command, capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    properties = torch.cuda.get_device_properties(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": list(torch.cuda.get_device_capability(0)),
        "gpu_memory_gib": round(properties.total_memory / 2**30, 1),
        "driver": command_output(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        ),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "git_commit": command_output(["git", "-C", str(ROOT), "rev-parse", "HEAD"]),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def check_targets(rows):
    """The chapter's targets, evaluated on the measured rows (None where not measured)."""

    def rate(provider, dtype, head_dim, seq_len, causal, key):
        for row in rows:
            if (row["provider"], row["dtype"], row["head_dim"], row["seq_len"], row["causal"]) == (
                provider, dtype, head_dim, seq_len, causal,
            ):  # fmt: skip
                return row.get(key)
        return None

    checks = []
    for row in rows:
        if row["provider"] != "triton" or "fwd_tflops" not in row:
            continue
        key = (row["dtype"], row["head_dim"], row["seq_len"], row["causal"])
        if row["head_dim"] == 128 and row["seq_len"] >= 4096 and not row["causal"]:
            sdpa = rate("sdpa-flash", *key, "fwd_tflops")
            checks.append({
                "target": "triton fwd >= 0.9x sdpa-flash and >= 350 TFLOP/s",
                "config": dict(zip(("dtype", "head_dim", "seq_len", "causal"), key, strict=True)),
                "triton_fwd_tflops": row["fwd_tflops"],
                "sdpa_flash_fwd_tflops": sdpa,
                "passed": sdpa is not None
                and row["fwd_tflops"] >= 0.9 * sdpa
                and row["fwd_tflops"] >= 350,
            })  # fmt: skip
        if row.get("bwd_tflops") is not None:
            checks.append({
                "target": "triton bwd >= 0.5x triton fwd",
                "config": dict(zip(("dtype", "head_dim", "seq_len", "causal"), key, strict=True)),
                "ratio": row["bwd_tflops"] / row["fwd_tflops"],
                "passed": row["bwd_tflops"] >= 0.5 * row["fwd_tflops"],
            })  # fmt: skip
    return checks


def _row_key(row):
    return tuple(row[k] for k in ("provider", "dtype", "head_dim", "seq_len", "causal"))


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit(
            "flash_gpu.py needs a CUDA GPU and none is visible (torch.cuda.is_available() is "
            "False); nothing was measured and no result file was written."
        )
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.exit("flash_gpu.py needs the triton package (pip install triton)")
    seq_lens = [int(s) for s in args.seq_lens.split(",")]
    head_dims = [int(s) for s in args.head_dims.split(",")]
    dtypes = args.dtypes.split(",")
    causals = [s.strip().lower() == "true" for s in args.causal.split(",")]
    providers = args.providers.split(",")
    report = {"environment": environment(), "settings": vars(args) | {"output": str(args.output)}}
    report["flop_count"] = "fwd 4*b*h*n^2*d (halved if causal); bwd 2.5x fwd; fwd_bwd 3.5x fwd"
    rows = []
    kept = []
    if args.merge and args.output.exists():
        kept = json.loads(args.output.read_text(encoding="utf-8"))["results"]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for dtype_name in dtypes:
        for head_dim in head_dims:
            for causal in causals:
                for seq_len in seq_lens:
                    batch = max(1, args.tokens // seq_len)
                    num_heads = args.model_dim // head_dim
                    for provider in providers:
                        row = {
                            "provider": provider, "dtype": dtype_name, "head_dim": head_dim,
                            "seq_len": seq_len, "causal": causal, "batch": batch,
                            "num_heads": num_heads,
                        }  # fmt: skip
                        row |= bench_one(
                            provider, batch, num_heads, seq_len, head_dim, DTYPES[dtype_name],
                            causal, args,
                        )  # fmt: skip
                        rows.append(row)
                        shown = row.get("error") or (
                            f"fwd {row['fwd_tflops']:7.1f}  fwd+bwd {row['fwd_bwd_tflops']:7.1f}"
                            " TFLOP/s"
                        )
                        print(
                            f"[{time.perf_counter() - start:6.0f}s] {dtype_name} d={head_dim} "
                            f"causal={causal!s:5} n={seq_len:5} {provider:15} {shown}",
                            flush=True,
                        )
                    measured = {_row_key(row) for row in rows}
                    report["results"] = [r for r in kept if _row_key(r) not in measured] + rows
                    report["targets"] = check_targets(report["results"])
                    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for check in report["targets"]:
        status = "PASS" if check["passed"] else "FAIL"
        print(status, check["target"], check["config"])
    print(f"wrote {args.output} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
