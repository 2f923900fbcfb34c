"""Peak memory of naive attention vs the tiled reference on the CPU, two ways.

1. ``counted``: `attention_book.memory.measure_tensor_memory`, the exact count of tensor bytes
   that the chapter's figure uses (on real tensors here, not on the meta device).
2. ``rss``: the growth of the process's peak resident set size (``ru_maxrss``) while the
   function runs, in a fresh Python process per measurement, on top of the inputs. It includes
   what the count leaves out (operators' scratch space, the allocator), and page-level noise.

Forward pass, one sequence, one head, head_dim 64, float32, blocks 512 x 512. Writes
``benchmarks/results/flash_memory.json``. Usage::

    python benchmarks/flash_memory.py                  # 1k to 16k (needs about 4 GB free)
    python benchmarks/flash_memory.py --max-len 4096
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "flash_memory.json"

CHILD = textwrap.dedent(
    """
    import json, resource, sys, torch
    from attention_book.flash import naive_attention, tiled_attention_forward
    from attention_book.memory import measure_tensor_memory
    method, seq_len, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, seq_len, 64, generator=generator) for _ in range(3))
    function = naive_attention if method == "naive" else tiled_attention_forward
    options = {} if method == "naive" else {"block_m": block, "block_n": block}
    with torch.no_grad():
        # Warm up the kernels and the counting mode (its first use imports more of PyTorch).
        measure_tensor_memory(function, q[:, :, :64], k[:, :, :64], v[:, :, :64], **options)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out, counted, _ = measure_tensor_memory(function, q, k, v, **options)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = out[0] if isinstance(out, tuple) else out  # the tiled forward also returns the lse
    print(json.dumps({"rss_bytes": (after - before) * 1024, "counted_bytes": counted,
                      "checksum": float(out.double().sum())}))
    """
)


def measure(method: str, seq_len: int, block: int) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, method, str(seq_len), str(block)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"measuring {method} at n={seq_len} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-len", type=int, default=16384)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    rows = []
    seq_len = 1024
    start = time.perf_counter()
    while seq_len <= args.max_len:
        row = {"seq_len": seq_len}
        for method in ("naive", "tiled"):
            row[method] = measure(method, seq_len, args.block)
        row["outputs_agree"] = abs(row["naive"]["checksum"] - row["tiled"]["checksum"]) < 1e-2
        rows.append(row)
        naive, tiled = (
            {key: value / 2**20 for key, value in row[m].items() if key.endswith("bytes")}
            for m in ("naive", "tiled")
        )
        print(
            f"n={seq_len:6}: naive counted {naive['counted_bytes']:8.1f} MiB, "
            f"rss +{naive['rss_bytes']:8.1f} MiB | tiled counted {tiled['counted_bytes']:6.1f} "
            f"MiB, rss +{tiled['rss_bytes']:6.1f} MiB | outputs agree: {row['outputs_agree']}",
            flush=True,
        )
        seq_len *= 2
    report = {
        "environment": {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
        "settings": {"head_dim": 64, "dtype": "float32", "block": args.block, "threads": 1},
        "results": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
