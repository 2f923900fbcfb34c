"""The measurements of the chapter on attention beyond one device.

- **Ring attention** on 1, 2 and 4 processes of a gloo group on this machine's CPU
  (`attention_book.distributed`): its largest difference from single-process attention, the
  bytes each process sends and the most tensor memory it allocates, the causal work of each
  rank at each step with the contiguous and the zig-zag split, and how long passing a block
  takes next to computing with it.
- **The paged cache**: the memory a contiguous cache reserves for the requests of a workload
  against what paging allocates, and what forking the samples of one prompt saves.
- **Continuous batching**: static against continuous batching of the same requests on the
  trained GPT of the optimizations chapter, with the same tokens as each generated alone.

Nothing here is stored: each measurement runs when a figure asks for it (seconds, except the
first load of the trained GPT, which trains it if the store does not hold it) and is kept for
the life of the process. Process-based measurements start their own workers and end them.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from attention_book.batching import Request, parallel_samples, serve
from attention_book.distributed import run_workers
from attention_book.experiments.optimizations import (
    optimizations_encode,
    optimizations_text,
    optimizations_trained_model,
    optimizations_vocab,
)
from attention_book.flash.reference import naive_attention
from attention_book.kv_cache import KVCache
from attention_book.masking import causal_mask
from attention_book.memory import measure_tensor_memory
from attention_book.paged_cache import PagedKVCache
from attention_book.ring_attention import (
    RingComm,
    gather_sequence,
    ring_attention,
    ring_bytes_formula,
    sequence_chunks,
    split_sequence,
)
from attention_book.timing import torch_threads

__all__ = [
    "BATCHING_BLOCK_SIZE",
    "BATCHING_MAX_BATCH",
    "PAGED_BLOCK_SIZES",
    "RING_COSTS_SHAPE",
    "RING_WORLD_SIZES",
    "VERSION",
    "WORKLOAD_MAX_NEW",
    "WORKLOAD_REQUESTS",
    "WORKLOAD_STOP",
    "beyond_batching",
    "beyond_causal_pairs",
    "beyond_paged_memory",
    "beyond_parallel_sampling",
    "beyond_ring_balance",
    "beyond_ring_costs",
    "beyond_ring_errors",
    "beyond_ring_overlap",
    "beyond_ring_worker",
    "beyond_workload",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 1

#: Numbers of processes the ring runs on.
RING_WORLD_SIZES = (1, 2, 4)
#: (batch, heads, sequence length, head size) of the bytes, memory and timing runs (float32).
RING_COSTS_SHAPE = (1, 2, 2048, 64)
#: (batch, heads, sequence length, head size) of the equality check (float64).
RING_CHECK_SHAPE = (1, 2, 64, 16)
#: Block sizes of the paged cache compared in the memory measurement.
PAGED_BLOCK_SIZES = (1, 4, 8, 16, 32, 64)
#: Most sequences per step of serving.
BATCHING_MAX_BATCH = 8
#: Positions per block of the paged cache when serving (vLLM's default on CUDA GPUs).
BATCHING_BLOCK_SIZE = 16
#: Requests of the workload.
WORKLOAD_REQUESTS = 32
#: Most tokens a request may get.
WORKLOAD_MAX_NEW = 128
#: The token that ends a request before that: the first comma.
WORKLOAD_STOP = ","
#: Seed of the points where the prompts are cut.
WORKLOAD_SEED = 0


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(dtype) for _ in range(4)]


# ---------------------------------------------------------------------------------------------
# Ring attention


# --8<-- [start:worker]
def beyond_ring_worker(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, layout: str,
    causal: bool, measure_memory: bool = False, warm_up: bool = False, *,
    comm: RingComm | None = None,
) -> dict:  # fmt: skip
    """What each process does: its share of a forward and a backward pass of ring attention.

    Every process gets the whole sequence, keeps its part (`split_sequence`), runs
    `ring_attention` and its backward pass, and reports what it computed and sent. The
    page's `run_workers` runs it, and so does `examples/ring_attention.py` under `torchrun`:
    it works on the tensors' device (CPU with gloo, CUDA with NCCL).

    Args:
        q: Queries of the whole sequence.
        k: Keys.
        v: Values.
        grad_out: Gradient of the loss with respect to the whole output.
        layout: ``"contiguous"`` or ``"zigzag"``.
        causal: Causal attention.
        measure_memory: Also count the tensor memory of each pass (`measure_tensor_memory`).
        warm_up: Run one forward pass first, untimed (the first one pays for allocations).
        comm: The ring (a new `RingComm` if None): its timeout bounds every transfer.

    Returns:
        "out", "grad_q", "grad_k", "grad_v" (this rank's parts), "bytes_forward" and
        "bytes_backward" (what it sent), "peak_forward" and "peak_backward" (the most bytes
        of new tensors alive at once, if measured, else 0) and "steps" (the compute and wait
        seconds of each forward step).

    Shapes:
        - q, k, v, grad_out: ``(batch, num_heads, seq_len, head_dim)``
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    parts = [split_sequence(t, world_size, layout)[rank] for t in (q, k, v, grad_out)]
    q, k, v = (t.clone().requires_grad_() for t in parts[:3])
    if warm_up:
        ring_attention(q.detach(), k.detach(), v.detach(), layout=layout, causal=causal)
    comm = RingComm() if comm is None else comm
    run = measure_tensor_memory if measure_memory else lambda f, *a, **kw: (f(*a, **kw), 0, 0)
    out, peak_forward, _ = run(ring_attention, q, k, v, layout=layout, causal=causal, comm=comm)
    bytes_forward = comm.bytes_sent
    _, peak_backward, _ = run(out.backward, parts[3])
    return {
        "out": out.detach(), "grad_q": q.grad, "grad_k": k.grad, "grad_v": v.grad,
        "bytes_forward": bytes_forward, "bytes_backward": comm.bytes_sent - bytes_forward,
        "peak_forward": peak_forward, "peak_backward": peak_backward, "steps": comm.steps,
    }  # fmt: skip


# --8<-- [end:worker]


def _run_ring(
    world_size: int, shape, dtype, layout: str, causal: bool, memory: bool, warm_up: bool = False
) -> list:
    """One launch of `beyond_ring_worker` on `world_size` processes."""
    if memory:  # the first counted operator imports torch._dynamo: once here, not per worker
        measure_tensor_memory(torch.zeros, 1)
    q, k, v, grad_out = _inputs(shape, dtype)
    arguments = (q, k, v, grad_out, layout, causal, memory, warm_up)
    return run_workers(beyond_ring_worker, world_size, *arguments, timeout=120)


@functools.cache
def beyond_ring_errors() -> list[dict[str, Any]]:
    """Largest differences of ring attention from single-process attention, in float64.

    For every number of processes of `RING_WORLD_SIZES`, each split and with and without the
    causal mask: the output and the gradients of q, k and v gathered from the ranks, against
    `naive_attention` and autograd through it on the whole sequence (`RING_CHECK_SHAPE`).

    Returns:
        One dict per case: "world_size", "layout", "causal", "forward" (largest difference
        of the outputs) and "backward" (largest difference of the three gradients).
    """
    rows = []
    q, k, v, grad_out = _inputs(RING_CHECK_SHAPE, torch.float64)
    for world_size in RING_WORLD_SIZES:
        for layout in ("contiguous", "zigzag"):
            for causal in (False, True):
                ranks = _run_ring(
                    world_size, RING_CHECK_SHAPE, torch.float64, layout, causal, False
                )
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                expected = naive_attention(*leaves, causal=causal)
                grads = torch.autograd.grad(expected, leaves, grad_out)
                out = gather_sequence([r["out"] for r in ranks], layout)
                backward = max(
                    (gather_sequence([r[name] for r in ranks], layout) - want).abs().max().item()
                    for name, want in zip(("grad_q", "grad_k", "grad_v"), grads, strict=True)
                )
                rows.append({
                    "world_size": world_size, "layout": layout, "causal": causal,
                    "forward": (out - expected).abs().max().item(), "backward": backward,
                })  # fmt: skip
    return rows


@functools.cache
def beyond_ring_costs() -> list[dict[str, Any]]:
    """Bytes sent and tensor memory per process, measured and by formula, for each P.

    Non-causal ring attention with the contiguous split on `RING_COSTS_SHAPE` in float32.
    The memory counts new tensors only (`measure_tensor_memory`): not this rank's q, k and v,
    which it holds before the pass starts.

    Returns:
        One dict per number of processes: "world_size", "rows" (queries per rank),
        "block_bytes" (bytes of one rank's keys), "bytes_forward", "bytes_backward" (the most
        any rank sent), "formula_forward", "formula_backward" (`ring_bytes_formula`),
        "peak_forward", "peak_backward" (the most any rank allocated), "formula_peak_forward"
        (the forward pass's buffers by formula, see the chapter).
    """
    batch, heads, seq_len, head_dim = RING_COSTS_SHAPE
    rows = []
    for world_size in RING_WORLD_SIZES:
        ranks = _run_ring(world_size, RING_COSTS_SHAPE, torch.float32, "contiguous", False, True)
        block = batch * heads * (seq_len // world_size) * head_dim * 4
        lse = block // head_dim
        formula = ring_bytes_formula(block, world_size)
        received = 2 * min(world_size - 1, 2) * block  # blocks arriving and being used
        rows.append({
            "world_size": world_size, "rows": seq_len // world_size, "block_bytes": block,
            "bytes_forward": max(r["bytes_forward"] for r in ranks),
            "bytes_backward": max(r["bytes_backward"] for r in ranks),
            "formula_forward": formula["forward"], "formula_backward": formula["backward"],
            "peak_forward": max(r["peak_forward"] for r in ranks),
            "peak_backward": max(r["peak_backward"] for r in ranks),
            "formula_peak_forward": 5 * block + 4 * lse + received,
        })  # fmt: skip
    return rows


def beyond_causal_pairs(layout: str, world_size: int, seq_len: int) -> list[list[int]]:
    """Query-key pairs the causal mask lets through, for each rank at each step of the ring.

    At step ``t`` rank ``r`` holds the keys of rank ``(r - t) mod P``; a pair counts when the
    key's position is not after the query's. This is the useful work of each rank at each step.

    Args:
        layout: ``"contiguous"`` or ``"zigzag"``.
        world_size: Number of ranks P.
        seq_len: Length of the sequence (divisible by the number of chunks).

    Returns:
        ``pairs[r][t]``.
    """
    num_chunks = world_size * len(sequence_chunks(layout, 0, world_size))
    size = seq_len // num_chunks
    visible = causal_mask(seq_len, seq_len)  # (seq_len, seq_len), True = may attend

    def positions(rank: int) -> torch.Tensor:
        chunks = sequence_chunks(layout, rank, world_size)
        return torch.cat([torch.arange(c * size, (c + 1) * size) for c in chunks])

    return [
        [
            int(visible[positions(r)][:, positions((r - t) % world_size)].sum())
            for t in range(world_size)
        ]
        for r in range(world_size)
    ]


@functools.cache
def beyond_ring_balance(world_size: int = 4) -> dict[str, Any]:
    """The causal work of each rank at each step, counted and timed, for both splits.

    Args:
        world_size: Number of processes.

    Returns:
        Per layout ("contiguous", "zigzag"): "pairs" (`beyond_causal_pairs`), "seconds"
        (``seconds[r][t]``, the CPU time of rank r's attention at step t), and for both the
        "critical" sum over steps of the slowest rank's work and the "mean" work per rank.
    """
    seq_len = RING_COSTS_SHAPE[2]
    result = {}
    for layout in ("contiguous", "zigzag"):
        ranks = _run_ring(world_size, RING_COSTS_SHAPE, torch.float32, layout, True, False, True)
        seconds = [[c for c, _ in r["steps"]] for r in ranks]
        pairs = beyond_causal_pairs(layout, world_size, seq_len)
        result[layout] = {"pairs": pairs, "seconds": seconds}
        for name, work in (("pairs", pairs), ("seconds", seconds)):
            critical = sum(max(column) for column in zip(*work, strict=True))
            result[layout][f"{name}_critical"] = critical
            result[layout][f"{name}_mean"] = sum(map(sum, work)) / world_size
    return result


def _hop_worker(shape: tuple[int, ...], repeats: int) -> list[float]:
    """Seconds to pass one rank's keys and values to the next rank, all ranks at once."""
    comm = RingComm()
    k, v, _, _ = _inputs(shape, torch.float32, seed=dist.get_rank())
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        comm.shift([k, v])()
        times.append(time.perf_counter() - start)
    return times


@functools.cache
def beyond_ring_overlap(world_size: int = 4, repeats: int = 9) -> dict[str, float]:
    """How long one step computes, and how long passing its block on takes, on this machine.

    The step is timed in a pass of its own, after an untimed one (`beyond_ring_worker`'s
    ``warm_up``) and without counting memory: `measure_tensor_memory` hooks every allocation,
    which makes a step several times slower than it runs (`beyond_ring_costs`' passes).

    Returns:
        "step_seconds" (median CPU time of one step's attention, non-causal, contiguous split,
        over every rank and step), "hop_seconds" (median wall time of passing a rank's keys and
        values to the next rank, all ranks at once) and "hidden" (the share of a step that a
        perfect overlap would save: ``min(step, hop) / (step + hop)``).
    """
    batch, heads, seq_len, head_dim = RING_COSTS_SHAPE
    shape = (batch, heads, seq_len // world_size, head_dim)
    hops = run_workers(_hop_worker, world_size, shape, repeats, timeout=120)
    hop = statistics.median(t for rank in hops for t in rank)
    ranks = _run_ring(world_size, RING_COSTS_SHAPE, torch.float32, "contiguous", False, False, True)
    step = statistics.median(c for r in ranks for c, _ in r["steps"])
    return {"step_seconds": step, "hop_seconds": hop, "hidden": min(step, hop) / (step + hop)}


# ---------------------------------------------------------------------------------------------
# The workload: requests to the trained GPT of the optimizations chapter


@functools.cache
def beyond_workload() -> tuple[Request, ...]:
    """Requests to continue French sentences up to their next comma, from prompts of all sizes.

    Each request is the start of a sentence of the validation text, cut at a random point, and
    asks for at most `WORKLOAD_MAX_NEW` new tokens; generation stops earlier at the first comma
    (`WORKLOAD_STOP`, a stop token as serving APIs offer), which the server cannot foresee.

    Returns:
        `WORKLOAD_REQUESTS` requests.
    """
    generator = torch.Generator().manual_seed(WORKLOAD_SEED)
    lines = optimizations_text("valid").splitlines()[:WORKLOAD_REQUESTS]
    requests = []
    for line in lines:
        cut = int(torch.randint(1, len(line), (1,), generator=generator))
        prompt = tuple(optimizations_encode(line[:cut]).tolist())
        requests.append(Request(prompt, WORKLOAD_MAX_NEW))
    return tuple(requests)


@functools.cache
def beyond_batching(repeats: int = 3) -> dict[str, Any]:
    """Static against continuous batching of the workload on the trained GPT, in one run.

    The GPT of the optimizations chapter, in float64, serves `beyond_workload` both ways,
    `repeats` times each in turn, timed by the CPU time of the serving thread (which other
    processes of a shared machine do not inflate); the fastest run of each is kept. Each
    request's tokens are also generated alone with the GPT's own contiguous cache, to check
    they are the same.

    Returns:
        Per policy ("static", "continuous") the result of `serve`, "same_as_alone" (whether
        every request got the tokens it gets alone, under both policies), "tokens" (tokens
        generated in all) and "eos" (the stop token).
    """
    model = optimizations_trained_model("baseline").double()
    requests, eos = list(beyond_workload()), optimizations_vocab().index(WORKLOAD_STOP)
    runs: dict[str, list[dict]] = {"static": [], "continuous": []}
    for _ in range(repeats):
        for policy in runs:
            options = (BATCHING_MAX_BATCH, BATCHING_BLOCK_SIZE, eos, time.thread_time)
            runs[policy].append(serve(model, requests, policy, *options))
    best = {policy: min(results, key=lambda r: r["seconds"]) for policy, results in runs.items()}
    with torch_threads(1):
        alone = [
            model.generate(torch.tensor(r.prompt)[None], len(tokens))[0, len(r.prompt) :].tolist()
            for r, tokens in zip(requests, best["continuous"]["tokens"], strict=True)
        ]
    same = all(best[p]["tokens"] == alone for p in best)
    return {**best, "same_as_alone": same, "tokens": sum(map(len, alone)), "eos": eos}


@functools.cache
def beyond_paged_memory() -> dict[str, Any]:
    """Cache memory for the workload's sequences: contiguous reservations against paging.

    Every request of `beyond_workload` at its longest (prompt and generated tokens, from
    `beyond_batching`), all in the cache at once, for the trained GPT's layers and heads in
    float32. A contiguous cache reserves, per request, its most positions (prompt plus
    ``max_new_tokens``: the server cannot know when it ends) or the model's ``max_len``; a
    paged cache allocates whole blocks as positions arrive. Sizes are read from a `KVCache`
    and a `PagedKVCache` built for them.

    Returns:
        "used" (bytes the positions need), "contiguous_request", "contiguous_max_len" (bytes
        reserved) and "paged" (block size to bytes allocated).
    """
    model = optimizations_trained_model("baseline")
    heads = model.blks[0].attention.heads
    layers, kv_heads, head_dim = len(model.blks), heads.num_kv_heads, heads.head_dim
    requests, generated = beyond_workload(), beyond_batching()["continuous"]["tokens"]
    lengths = [len(r.prompt) + len(t) for r, t in zip(requests, generated, strict=True)]

    def contiguous(max_len: int) -> int:
        return KVCache(layers, 1, kv_heads, max_len, head_dim).nbytes

    paged = {}
    for block_size in PAGED_BLOCK_SIZES:
        num_blocks = sum(-(-n // block_size) for n in lengths)
        cache = PagedKVCache(num_blocks, block_size, layers, kv_heads, head_dim)
        for i, n in enumerate(lengths):
            cache.add_sequence(i)
            cache.append_slots(i, n)
        paged[block_size] = cache.blocks_in_use() * cache.block_nbytes
    return {
        "used": sum(contiguous(n) for n in lengths),
        "contiguous_request": sum(contiguous(len(r.prompt) + r.max_new_tokens) for r in requests),
        "contiguous_max_len": len(lengths) * contiguous(model.max_len),
        "paged": paged,
        "requests": len(lengths),
    }


@functools.cache
def beyond_parallel_sampling(num_samples: int = 4, max_new_tokens: int = 48) -> dict[str, Any]:
    """Blocks held by several samples of one prompt, with the prompt shared or copied.

    The longest prompt of `beyond_workload`, `num_samples` samples of `max_new_tokens` tokens
    from the trained GPT (float64), blocks of `BATCHING_BLOCK_SIZE` (`parallel_samples`).

    Returns:
        "prompt" (its length), "shared" and "copied" (most blocks in use), "same" (whether
        both drew the same samples) and "num_samples".
    """
    model = optimizations_trained_model("baseline").double()
    prompt = max((r.prompt for r in beyond_workload()), key=len)
    runs = {
        name: parallel_samples(
            model, prompt, num_samples, max_new_tokens, share, BATCHING_BLOCK_SIZE, seed=0
        )
        for name, share in (("shared", True), ("copied", False))
    }
    return {
        "prompt": len(prompt), "num_samples": num_samples, "max_new_tokens": max_new_tokens,
        "shared": runs["shared"]["peak_blocks"], "copied": runs["copied"]["peak_blocks"],
        "same": runs["shared"]["tokens"] == runs["copied"]["tokens"],
    }  # fmt: skip
