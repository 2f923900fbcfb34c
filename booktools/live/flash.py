"""The FlashAttention widget's reference: inputs and PyTorch's outputs, for the WebGPU kernels.

The widget of the FlashAttention chapter (``{{ live:flash }}``, `booktools.live.widgets`) runs
two WGSL kernels in the reader's browser (``docs/assets/javascripts/live/flash.js``): the
chapter's tiled forward pass and the naive one that writes the whole score matrix. Nothing is
trained: this module, run by the build in a fresh interpreter
(``python -m booktools.live.flash --out DIR``), writes a few seeded cases into a folder named
after a digest of this file:

- ``reference.json``: for each case (a length that is a multiple of the tile or not, causal or
  not), the float32 inputs ``q``, ``k``, ``v`` (values with three decimals, which a page turns
  into the same float32 numbers) and PyTorch's output (`torch.nn.functional.
  scaled_dot_product_attention`, float32), with `TOLERANCE`;
- ``about.json``: its sizes, which the page cites.

The browser check (`booktools.live.check`) presses the widget's button and compares what both
kernels computed with PyTorch's outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

#: How far the kernels' outputs may be from PyTorch's (absolute): both compute in float32, in
#: another order, and the reference is rounded to 6 decimals (5e-7).
TOLERANCE = 1e-5
#: The cases: (length, head_dim, causal). 16 is the kernels' tile: 37 and 70 are no multiple.
CASES = ((16, 16, False), (37, 16, False), (37, 16, True), (70, 32, True))
DECIMALS = 6


def digest() -> str:
    """A digest of this file: another exporter writes another folder."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


def flash_cases(seed: int = 0) -> list[dict]:
    """The reference cases: seeded inputs and PyTorch's float32 output for each of `CASES`."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    cases = []
    for length, head_dim, causal in CASES:
        # Three decimals: the JSON text is the number, and the page's float32 is PyTorch's.
        q, k, v = (
            (torch.randn(length, head_dim, generator=generator) * 1000).round() / 1000
            for _ in range(3)
        )
        out = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]
        cases.append(
            {
                "length": length,
                "head_dim": head_dim,
                "causal": causal,
                **{name: [round(float(x), 3) for x in t.reshape(-1)] for name, t in
                   (("q", q), ("k", k), ("v", v))},
                "out": [round(float(x), DECIMALS) for x in out.reshape(-1)],
            }
        )  # fmt: skip
    return cases


def export_flash(out_dir: Path) -> dict:
    """Write ``reference.json`` and ``about.json`` into `out_dir`; return what about.json holds."""
    import gzip

    import torch

    torch.set_num_threads(1)
    reference = {"tolerance": TOLERANCE, "cases": flash_cases()}
    data = json.dumps(reference, separators=(",", ":")).encode()
    (out_dir / "reference.json").write_bytes(data)
    about = {
        "reference_bytes": len(data),
        "reference_gzip_bytes": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "tolerance": TOLERANCE,
    }
    (out_dir / "about.json").write_text(json.dumps(about, indent=1), "utf-8")
    return about


def exported(root: Path) -> Path:
    """The reference's folder under `root` (``flash-<digest>``), written now unless it is there."""
    folder = root / f"flash-{digest()}"
    if not (folder / "about.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        export_flash(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Export the reference; print one JSON line: its name and its folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder of exported models")
    args = parser.parse_args(argv)
    print(json.dumps({"name": "flash", "folder": str(exported(args.out))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
