"""The FlashAttention chapter's measurements: memory, arithmetic intensity, GPU specifications.

Memory is measured with `attention_book.memory.measure_tensor_memory`, which counts the bytes of
every tensor PyTorch operators create and frees them as Python releases them. To keep the build
fast, the large sizes run on PyTorch's ``meta`` device: the same code and the same operators,
with shapes and allocations but no arithmetic. At the small sizes the functions also run on
real CPU tensors, check that the two counts agree and that naive and tiled outputs are equal.

`flash_attention_intensity` is the roofline model of the chapter (FLOP per byte of HBM
traffic), and `GPUS` the public specifications it is compared with. Measurements on a GPU are
made by ``benchmarks/flash_gpu.py``, not here. `flash_causal_tiles` counts the tiles of scores
the tiled reference computes with and without a causal mask, by watching its operators.
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention_book.flash.reference import naive_attention, tiled_attention_forward
from attention_book.masking import causal_mask
from attention_book.memory import measure_tensor_memory

__all__ = [
    "CAUSAL_SEQ_LEN",
    "CHECKED_ON_CPU",
    "GPUS",
    "MEMORY_BLOCK",
    "MEMORY_HEAD_DIM",
    "MEMORY_SEQ_LENS",
    "VERSION",
    "flash_attention_intensity",
    "flash_causal_tiles",
    "flash_memory_measurements",
    "flash_tiling_example",
    "flash_tiling_steps",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 2

#: Public specifications of three data-center GPUs (SXM boards), from NVIDIA's data sheets and
#: architecture whitepapers: dense (no sparsity) FP16/BF16 Tensor Core throughput in TFLOP/s,
#: HBM bandwidth in TB/s, HBM capacity in GB, streaming multiprocessors, the largest shared
#: memory (SRAM) one SM can give a kernel in KB, and the L2 cache in MB.
GPUS = {
    "A100 SXM 80GB": {
        "tflops": 312, "hbm_tb_s": 2.039, "hbm_gb": 80, "sms": 108, "smem_kb": 164, "l2_mb": 40,
    },
    "H100 SXM": {
        "tflops": 989, "hbm_tb_s": 3.35, "hbm_gb": 80, "sms": 132, "smem_kb": 228, "l2_mb": 50,
    },
    "H200 SXM": {
        "tflops": 989, "hbm_tb_s": 4.8, "hbm_gb": 141, "sms": 132, "smem_kb": 228, "l2_mb": 50,
    },
}  # fmt: skip

#: Sequence lengths of the memory measurement, its block size and head size.
MEMORY_SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
MEMORY_BLOCK = 512
MEMORY_HEAD_DIM = 64
#: The lengths that also run on real CPU tensors, to check the ``meta`` counts.
CHECKED_ON_CPU = (1024, 2048)


@functools.cache
def flash_memory_measurements() -> dict:
    """Peak tensor memory of naive and tiled forward passes, for each sequence length.

    One sequence, one head, head_dim 64, float32; the tiled reference uses 512 x 512 blocks.
    The sizes run on the ``meta`` device; those in CHECKED_ON_CPU also run on real tensors.

    Returns:
        "seq_lens", the peak bytes "naive" and "tiled" at each length, and the largest
        difference between the two outputs on real tensors ("max_difference").
    """
    peaks = {"naive": [], "tiled": []}
    max_difference = 0.0
    for seq_len in MEMORY_SEQ_LENS:
        devices = ("meta", "cpu") if seq_len in CHECKED_ON_CPU else ("meta",)
        for device in devices:
            generator = torch.Generator().manual_seed(seq_len)
            q, k, v = (
                torch.randn(1, 1, seq_len, MEMORY_HEAD_DIM, generator=generator).to(device)
                for _ in range(3)
            )
            with torch.no_grad():
                naive_out, naive_peak, _ = measure_tensor_memory(naive_attention, q, k, v)
                (tiled_out, _), tiled_peak, _ = measure_tensor_memory(
                    tiled_attention_forward, q, k, v, block_m=MEMORY_BLOCK, block_n=MEMORY_BLOCK
                )
            if device == "meta":
                peaks["naive"].append(naive_peak)
                peaks["tiled"].append(tiled_peak)
                continue
            # Real tensors: same allocation counts as on meta, and the same attention output.
            if (naive_peak, tiled_peak) != (peaks["naive"][-1], peaks["tiled"][-1]):
                raise AssertionError(f"meta and CPU memory counts differ at seq_len {seq_len}")
            difference = (naive_out - tiled_out).abs().max().item()
            if difference > 1e-5:
                raise AssertionError(f"naive and tiled outputs differ by {difference}")
            max_difference = max(max_difference, difference)
    return {"seq_lens": list(MEMORY_SEQ_LENS), **peaks, "max_difference": max_difference}


#: The sequence length of the chapter's count of causal tiles (queries = keys).
CAUSAL_SEQ_LEN = 512


class _ScoreTiles(TorchDispatchMode):
    """Counts the matrix products whose result is a (rows, cols) tile: the tiles of scores."""

    def __init__(self, rows: int, cols: int) -> None:
        super().__init__()
        self.shape = (rows, cols)
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        products = (torch.ops.aten.bmm.default, torch.ops.aten.mm.default)
        if func in products and tuple(result.shape[-2:]) == self.shape:
            self.count += 1
        return result


def flash_causal_tiles(seq_len: int = CAUSAL_SEQ_LEN, head_dim: int = 64) -> dict[str, int]:
    """How many tiles of scores the tiled reference computes, with and without a causal mask.

    `tiled_attention_forward` runs on the ``meta`` device (shapes only) in its default block
    sizes, and a dispatch mode counts the products Q_i K_j^T it makes, each one tile of
    ``block_m x block_n`` scores. The tiles the causal mask cuts through (some pairs allowed,
    some not) are counted from `attention_book.masking.causal_mask`.

    Args:
        seq_len: Queries and keys (as many of each).
        head_dim: Size of each query and key; it must differ from the block sizes, so that
            the product P_ij V_j is not taken for a tile of scores.

    Returns:
        ``{"seq_len", "block_m", "block_n", "full": tiles without a mask, "causal": tiles with
        the causal mask, "diagonal": causal tiles that are partly masked}``.
    """
    defaults = inspect.signature(tiled_attention_forward).parameters
    block_m, block_n = defaults["block_m"].default, defaults["block_n"].default
    if head_dim in (block_m, block_n):
        raise ValueError(f"head_dim must differ from the block sizes, got {head_dim}")
    q = torch.empty(1, 1, seq_len, head_dim, device="meta")
    counts = {}
    for causal in (False, True):
        with _ScoreTiles(block_m, block_n) as tiles:
            tiled_attention_forward(q, q, q, causal=causal)
        counts["causal" if causal else "full"] = tiles.count
    allowed = causal_mask(seq_len, seq_len)
    diagonal = sum(
        bool(tile.any() and not tile.all())
        for rows in allowed.split(block_m, dim=0)
        for tile in rows.split(block_n, dim=1)
    )
    return {"seq_len": seq_len, "block_m": block_m, "block_n": block_n, **counts,
            "diagonal": diagonal}  # fmt: skip


# --8<-- [start:intensity]
def flash_attention_intensity(seq_len: float, head_dim: int, block_m: int | None = None) -> dict:
    """Forward-pass FLOP per byte of HBM traffic, 16-bit inputs, one (batch, head).

    - naive: Q, K, V read once; S = QK^T written, read by softmax, P written, read by PV.
    - flash: Q, K, V, O move once (``block_m`` None, perfect reuse), or K and V are read again
      for every block of ``block_m`` queries (no reuse across blocks).

    Args:
        seq_len: Sequence length n (as many queries as keys).
        head_dim: Size d of each query, key and value.
        block_m: Queries per block when K and V are re-read for each block; None for the
            ideal case where every byte moves once.

    Returns:
        ``{"naive": FLOP per byte, "flash": FLOP per byte}``.
    """
    n, d = seq_len, head_dim
    flops = 4 * n * n * d
    naive_bytes = 2 * (4 * n * d + 4 * n * n)  # Q, K, V, O + S written, read, P written, read
    reads_of_kv = 1 if block_m is None else n / block_m
    flash_bytes = 2 * (2 * n * d + 2 * n * d * reads_of_kv)
    return {"naive": flops / naive_bytes, "flash": flops / flash_bytes}


# --8<-- [end:intensity]


def flash_tiling_example(
    block_m: int = 4, block_n: int = 4, num_key_blocks: int = 3, head_dim: int = 8
) -> dict:
    """The running state of one program of the tiled forward pass, block by block.

    One block of queries meets `num_key_blocks` blocks of keys and values, one at a time, as
    in `attention_book.flash.tiled_attention_forward`; after each block the running maximum m
    and sum l of the block's first query row are recorded. At the end the output acc / l is
    checked against softmax attention computed in one piece.

    Args:
        block_m: Queries in the block (rows of the tile).
        block_n: Keys in each key/value block (columns of the tile).
        num_key_blocks: How many key/value blocks stream through.
        head_dim: Size of each query, key and value.

    Returns:
        ``{"m": [m after block 1, ...], "l": [...], "max_difference": float}``, the last
        entry the largest difference between the tiled output and exact attention.
    """
    generator = torch.Generator().manual_seed(0)
    num_keys = block_n * num_key_blocks
    q = torch.randn(block_m, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(num_keys, head_dim, generator=generator, dtype=torch.float64)
    v = torch.randn(num_keys, head_dim, generator=generator, dtype=torch.float64)
    scale = head_dim**-0.5
    m_i = torch.full((block_m,), float("-inf"), dtype=torch.float64)
    l_i = torch.zeros(block_m, dtype=torch.float64)
    acc = torch.zeros(block_m, head_dim, dtype=torch.float64)
    record = {"m": [], "l": []}
    for start in range(0, num_keys, block_n):
        s_ij = scale * q @ k[start : start + block_n].T  # (block_m, block_n), the tile
        m_new = torch.maximum(m_i, s_ij.max(dim=-1).values)
        p_ij = torch.exp(s_ij - m_new[:, None])
        correction = torch.exp(m_i - m_new)  # rescales what was summed so far
        l_i = correction * l_i + p_ij.sum(dim=-1)
        acc = correction[:, None] * acc + p_ij @ v[start : start + block_n]
        m_i = m_new
        record["m"].append(m_i[0].item())
        record["l"].append(l_i[0].item())
    exact = torch.softmax(scale * q @ k.T, dim=-1) @ v
    record["max_difference"] = (acc / l_i[:, None] - exact).abs().max().item()
    return record


def flash_tiling_steps(
    block_m: int = 4, block_n: int = 4, num_key_blocks: int = 4, head_dim: int = 8, seed: int = 0
) -> dict:
    """Everything one program of the tiled forward pass holds, after each key/value block.

    The loop of `attention_book.flash.tiled_attention_forward`, for one block of queries, with
    its state recorded after every block of keys: the running maximum and sum of each query
    row, the factor that rescaled what was accumulated before (1 where the maximum did not
    grow), the weights ``exp(S - m)`` of every score seen so far relative to the *current*
    maximum (what ``l`` and ``acc`` hold, in effect), and how far ``acc / l`` is from softmax
    attention over the keys seen so far and over all keys.

    Args:
        block_m: Queries in the block.
        block_n: Keys in each key/value block.
        num_key_blocks: How many key/value blocks stream through.
        head_dim: Size of each query, key and value.
        seed: Seed of the random queries, keys and values (float64).

    Returns:
        ``{"steps": [...], "output": acc / l after the last block, "tiled": the same rows from
        tiled_attention_forward}``; each step is a dict with ``"m"``, ``"l"``, ``"rescale"``
        (tensors of shape (block_m,)), ``"weights"`` (block_m, keys; NaN for keys not loaded
        yet), ``"error_seen"`` and ``"error_all"`` (floats: the largest absolute difference).
    """
    if min(block_m, block_n, num_key_blocks, head_dim) < 1:
        raise ValueError(
            "flash_tiling_steps needs positive sizes, got "
            f"block_m={block_m}, block_n={block_n}, num_key_blocks={num_key_blocks}, "
            f"head_dim={head_dim}"
        )
    generator = torch.Generator().manual_seed(seed)
    num_keys = block_n * num_key_blocks
    q = torch.randn(block_m, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(num_keys, head_dim, generator=generator, dtype=torch.float64)
    v = torch.randn(num_keys, head_dim, generator=generator, dtype=torch.float64)
    scale = head_dim**-0.5
    scores = scale * q @ k.T  # only to draw and check: the loop below reads one tile at a time
    m_i = torch.full((block_m,), float("-inf"), dtype=torch.float64)
    l_i = torch.zeros(block_m, dtype=torch.float64)
    acc = torch.zeros(block_m, head_dim, dtype=torch.float64)
    steps = []
    for start in range(0, num_keys, block_n):
        stop = start + block_n
        s_ij = scale * q @ k[start:stop].T
        m_new = torch.maximum(m_i, s_ij.max(dim=-1).values)
        p_ij = torch.exp(s_ij - m_new[:, None])
        rescale = torch.exp(m_i - m_new)  # 0 on the first block: nothing was summed before
        l_i = rescale * l_i + p_ij.sum(dim=-1)
        acc = rescale[:, None] * acc + p_ij @ v[start:stop]
        m_i = m_new
        weights = torch.full_like(scores, float("nan"))
        weights[:, :stop] = torch.exp(scores[:, :stop] - m_i[:, None])
        output = acc / l_i[:, None]
        seen = torch.softmax(scores[:, :stop], dim=-1) @ v[:stop]
        everything = torch.softmax(scores, dim=-1) @ v
        steps.append({
            "m": m_i.clone(),
            "l": l_i.clone(),
            "rescale": rescale if start else torch.ones_like(rescale),
            "weights": weights,
            "error_seen": (output - seen).abs().max().item(),
            "error_all": (output - everything).abs().max().item(),
        })  # fmt: skip
    tiled, _ = tiled_attention_forward(
        q[None, None], k[None, None], v[None, None], block_m=block_m, block_n=block_n
    )
    return {"steps": steps, "output": acc / l_i[:, None], "tiled": tiled[0, 0]}
