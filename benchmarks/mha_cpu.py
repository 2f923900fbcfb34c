"""Forward+backward time of our MultiHeadAttention against torch.nn.MultiheadAttention on CPU.

Both modules get the same weights and the same input (self-attention, batch 32, length 128,
num_hiddens 256, 8 heads, dropout 0, training mode). Four variants run interleaved in the same
process, so machine noise hits all of them alike; the script reports median times and ratios:

- ``weights``: our explicit path (keeps per-head weights) vs ``nn.MultiheadAttention`` called
  the default way (``need_weights=True``, weights averaged over heads);
- ``fused``: our SDPA path (``need_weights=False``) vs ``nn.MultiheadAttention`` with
  ``need_weights=False``.

Run: ``.venv/bin/python benchmarks/mha_cpu.py [--repeats N]``. Writes
``benchmarks/results/mha_cpu.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from attention_book.multihead import MultiHeadAttention

BATCH, LENGTH, NUM_HIDDENS, NUM_HEADS = 32, 128, 256, 8
RESULTS = Path(__file__).parent / "results" / "mha_cpu.json"


def build_modules(bias: bool = True):
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(NUM_HIDDENS, NUM_HEADS, dropout=0.0, bias=bias, batch_first=True)
    ours = MultiHeadAttention(NUM_HIDDENS, NUM_HEADS, dropout=0.0, bias=bias)
    with torch.no_grad():
        W_q, W_k, W_v = theirs.in_proj_weight.chunk(3)
        ours.W_q.weight.copy_(W_q)
        ours.W_k.weight.copy_(W_k)
        ours.W_v.weight.copy_(W_v)
        ours.W_o.weight.copy_(theirs.out_proj.weight)
        if bias:
            b_q, b_k, b_v = theirs.in_proj_bias.chunk(3)
            ours.W_q.bias.copy_(b_q)
            ours.W_k.bias.copy_(b_k)
            ours.W_v.bias.copy_(b_v)
            ours.W_o.bias.copy_(theirs.out_proj.bias)
    return ours.train(), theirs.train()


def step(module, X, grad, call):
    """One forward and backward pass; returns seconds."""
    module.zero_grad(set_to_none=True)
    X.grad = None
    start = time.perf_counter()
    output = call(module, X)
    output.backward(grad)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    ours, theirs = build_modules()
    X = torch.randn(BATCH, LENGTH, NUM_HIDDENS, requires_grad=True)
    grad = torch.randn(BATCH, LENGTH, NUM_HIDDENS)
    with torch.no_grad():  # the same function, so the timing compares like with like
        torch.testing.assert_close(ours(X, X, X), theirs(X, X, X)[0], atol=1e-5, rtol=1e-4)

    variants = {
        "ours_weights": (ours, lambda m, x: m(x, x, x, need_weights=True)),
        "torch_weights": (theirs, lambda m, x: m(x, x, x, need_weights=True)[0]),
        "ours_fused": (ours, lambda m, x: m(x, x, x, need_weights=False)),
        "torch_fused": (theirs, lambda m, x: m(x, x, x, need_weights=False)[0]),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for repeat in range(args.warmup + args.repeats):
        for name, (module, call) in variants.items():  # interleaved: noise hits all alike
            seconds = step(module, X, grad, call)
            if repeat >= args.warmup:
                times[name].append(seconds)

    medians = {name: statistics.median(samples) for name, samples in times.items()}
    ratios = {
        "weights": medians["ours_weights"] / medians["torch_weights"],
        "fused": medians["ours_fused"] / medians["torch_fused"],
        "ours_fused_vs_torch_default": medians["ours_fused"] / medians["torch_weights"],
    }
    result = {
        "benchmark": "MultiHeadAttention forward+backward, CPU",
        "config": {
            "batch": BATCH,
            "length": LENGTH,
            "num_hiddens": NUM_HIDDENS,
            "num_heads": NUM_HEADS,
            "dropout": 0.0,
            "bias": True,
            "dtype": "float32",
            "self_attention": True,
        },
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "median_seconds": medians,
        "min_seconds": {name: min(samples) for name, samples in times.items()},
        "ratios": ratios,
        "target_ratio": 1.3,
        "note": "Shared, noisy machine; ratios are measured within one run, interleaved.",
    }
    for name, seconds in medians.items():
        print(f"{name:>14}: median {seconds * 1e3:8.2f} ms")
    for name, ratio in ratios.items():
        print(f"ratio {name:>28}: {ratio:.3f}  (ours / torch)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
