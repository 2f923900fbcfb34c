"""The optimizations chapter's measurements: what each optimization costs, without training.

The time per generated token of the trained GPT with and without the key/value cache; the time
and memory of causal linear against softmax attention as the sequence grows; the receptive
field of stacked sliding windows; how far rotary embeddings are from depending on the offset
only, in float32 and float64; and the key/value cache sizes of published models. Each runs when
a figure asks for it (seconds), on one thread, and is kept for the life of the process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_book.attention import DotProductAttention
from attention_book.experiments.optimizations import (
    optimizations_decode,
    optimizations_encode,
    optimizations_trained_model,
)
from attention_book.gpt import GPT
from attention_book.linear_attention import linear_attention
from attention_book.memory import measure_tensor_memory
from attention_book.rotary import apply_rotary
from attention_book.timing import median_seconds, torch_threads

__all__ = [
    "LINEAR_HEAD_DIM",
    "LINEAR_SEQ_LENS",
    "PUBLISHED_MODELS",
    "VERSION",
    "causal_attention_methods",
    "generation_timings",
    "kv_cache_bytes",
    "linear_attention_measurements",
    "receptive_fields",
    "rope_offset_errors",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 1

#: Published decoder shapes for the KV-cache table: layers, query heads, key/value heads,
#: head size and the context length the model was trained with. Sources (the chapter's
#: references): GPT-3 175B, Brown et al. (2020), Table 2.1 and section 2.1; PaLM 540B,
#: Chowdhery et al. (2022), Table 1 (head size 256), section 2 (multi-query attention) and
#: section 5 (sequence length 2048); Llama 2 7B and 70B, Touvron et al. (2023), Table 1
#: (context 4k; GQA for 34B and 70B), with layers and heads from Meta's released
#: configurations; Mistral 7B, Jiang et al. (2023), Table 1, whose sliding window of 4096
#: positions (``window``, Table 1 and section 2) lets a rolling buffer of that many positions
#: replace the cache of the whole context.
PUBLISHED_MODELS: dict[str, dict[str, int]] = {
    "GPT-3 175B": {"layers": 96, "heads": 96, "kv_heads": 96, "head_dim": 128, "context": 2048},
    "PaLM 540B": {"layers": 118, "heads": 48, "kv_heads": 1, "head_dim": 256, "context": 2048},
    "Llama 2 7B": {"layers": 32, "heads": 32, "kv_heads": 32, "head_dim": 128, "context": 4096},
    "Llama 2 70B": {"layers": 80, "heads": 64, "kv_heads": 8, "head_dim": 128, "context": 4096},
    "Mistral 7B": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "context": 8192,
                   "window": 4096},
}  # fmt: skip

#: Sequence lengths and head size of the linear-vs-softmax measurement.
LINEAR_SEQ_LENS = (64, 128, 256, 512, 1024, 2048, 4096)
LINEAR_HEAD_DIM = 64


# --8<-- [start:kv_cache_bytes]
def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, length: int, bytes_per_number: int = 2
) -> int:
    """Size of a decoder's key/value cache for one sequence.

    ``2 · layers · kv_heads · head_dim · length · bytes``: keys and values, in every layer, for
    every key/value head and every position.

    Args:
        layers: Number of layers.
        kv_heads: Key/value heads per layer.
        head_dim: Features per head.
        length: Number of cached positions.
        bytes_per_number: 2 for float16/bfloat16, 4 for float32.

    Returns:
        The size in bytes.
    """
    return 2 * layers * kv_heads * head_dim * length * bytes_per_number


# --8<-- [end:kv_cache_bytes]


@functools.cache
def generation_timings(max_new_tokens: int = 512, repeats: int = 3) -> dict[str, Any]:
    """Time of each generated token of the trained baseline, with and without the cache.

    Greedy generation from a one-character prompt, step by step as `GPT.generate` does it,
    on one thread, so that neither method gains from parallel work the other cannot use.
    Each step is timed by the CPU time of that thread (`time.thread_time`), which other
    processes of a shared machine do not inflate, in ``repeats`` separate generations; the
    fastest is kept.

    Args:
        max_new_tokens: Tokens to generate.
        repeats: Generations per method.

    Returns:
        "positions" (the length of the sequence before each step), per method ("cache",
        "no_cache") the seconds of each step, "same_tokens" (whether both methods generated
        the same tokens) and the generated "text".
    """
    model = optimizations_trained_model("baseline")
    prompt = optimizations_encode("L")[None, :]  # (1, 1)
    times: dict[str, list[list[float]]] = {"cache": [], "no_cache": []}
    outputs = {}
    with torch_threads(1), torch.no_grad():
        for _ in range(repeats):
            for method in times:
                tokens, step_times = prompt, []
                cache = model.new_cache(1, 1 + max_new_tokens) if method == "cache" else None
                step_input = tokens
                for _ in range(max_new_tokens):
                    start = time.thread_time()
                    logits = model(step_input, cache) if cache is not None else model(tokens)
                    next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (1, 1)
                    step_times.append(time.thread_time() - start)
                    tokens = torch.cat([tokens, next_token], dim=1)
                    step_input = next_token
                times[method].append(step_times)
                outputs[method] = tokens
    best = {m: [min(column) for column in zip(*runs, strict=True)] for m, runs in times.items()}
    return {
        "positions": list(range(1, max_new_tokens + 1)),
        **best,
        "same_tokens": bool(torch.equal(outputs["cache"], outputs["no_cache"])),
        "text": optimizations_decode(outputs["cache"][0]),
    }


def causal_attention_methods() -> dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]]:
    """The three ways of computing causal attention that `linear_attention_measurements` compares.

    Returns:
        "softmax": the book's explicit `DotProductAttention`, which forms the ``n x n`` weights;
        "softmax_fused": PyTorch's ``scaled_dot_product_attention``; "linear": `linear_attention`
        (elu + 1, chunks of 64). Each takes queries, keys and values and is causal.
    """
    explicit = DotProductAttention()
    return {
        "softmax": lambda q, k, v: explicit(q, k, v, is_causal=True),
        "softmax_fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=True),
    }


@functools.cache
def linear_attention_measurements() -> dict[str, Any]:
    """Time and peak memory of causal softmax and linear attention at each sequence length.

    One sequence, 4 heads of ``LINEAR_HEAD_DIM`` features, float32, forward pass without
    gradients, as many queries as keys, causal, one CPU thread, timed by its CPU time (as
    `generation_timings`). Softmax attention runs twice:
    the book's explicit `DotProductAttention`, which forms the ``n x n`` weights, and
    PyTorch's fused ``scaled_dot_product_attention`` (on the CPU a FlashAttention-style
    kernel that does not store them). Linear attention is `linear_attention` (elu + 1,
    chunks of 64). Memory is the exact peak of the tensors each returns or keeps alive
    between operators (`measure_tensor_memory`); scratch space inside one kernel is not seen.

    Returns:
        "seq_lens", and per method of `causal_attention_methods` ("softmax", "softmax_fused",
        "linear") the median "seconds" and the peak "bytes" at each length.
    """
    methods = causal_attention_methods()
    result: dict[str, Any] = {"seq_lens": list(LINEAR_SEQ_LENS)}
    result |= {name: {"seconds": [], "bytes": []} for name in methods}
    # One thread: less disturbed by the other work of a machine.
    with torch_threads(1), torch.no_grad():
        for n in LINEAR_SEQ_LENS:
            generator = torch.Generator().manual_seed(n)
            shape = (1, 4, n, LINEAR_HEAD_DIM)
            q, k, v = (torch.randn(shape, generator=generator) for _ in range(3))
            for name, method in methods.items():
                call = functools.partial(method, q, k, v)
                result[name]["seconds"].append(median_seconds(call, 3, time.thread_time))
                result[name]["bytes"].append(measure_tensor_memory(method, q, k, v)[1])
    return result


@functools.cache
def receptive_fields(
    window: int = 4, depths: tuple[int, ...] = (1, 2, 3, 4), n: int = 24
) -> dict[str, Any]:
    """Which input positions can change each output position of a stack of sliding windows.

    For a GPT with ``depth`` layers of causal sliding-window attention (random weights,
    float64), the Jacobian of the last layer's output at every position with respect to every
    input embedding, by autograd: position ``j`` is in the receptive field of output ``i`` when
    that block of the Jacobian is not zero.

    Args:
        window: The window of every layer (keys per query, itself included).
        depths: Numbers of layers.
        n: Sequence length.

    Returns:
        "window", "n", and "fields": per depth, a boolean ``(n, n)`` tensor, True where input
        ``j`` reaches output ``i``.
    """
    fields = {}
    for depth in depths:
        generator = torch.Generator().manual_seed(depth)
        with torch.random.fork_rng():  # seed the weights without touching the caller's RNG
            torch.manual_seed(depth)
            model = GPT(8, 16, 2, depth, window=window, positional="none").double().eval()
        X = torch.randn(1, n, 16, dtype=torch.float64, generator=generator, requires_grad=True)
        Y = X
        for blk in model.blks:
            Y = blk(Y)  # (1, n, 16)
        field = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            (grad,) = torch.autograd.grad(Y[0, i].sum(), X, retain_graph=True)  # (1, n, 16)
            field[i] = grad[0].abs().sum(dim=-1) > 0
        fields[depth] = field
    return {"window": window, "n": n, "fields": fields}


@functools.cache
def rope_offset_errors(
    head_dim: int = 64, max_position: int = 4096, trials: int = 200
) -> dict[str, Any]:
    """How far rotated scores are from depending on the offset only, in float32 and float64.

    For random queries ``q``, keys ``k``, positions ``p, r`` and shifts ``s`` (all below
    ``max_position``), compares ``rot(q, p) · rot(k, r)`` with ``rot(q, p + s) · rot(k, r + s)``.
    In exact arithmetic the two are equal.

    Args:
        head_dim: Features per head.
        max_position: Largest position or shift drawn.
        trials: Number of (q, k, p, r, s) drawn.

    Returns:
        "head_dim", "max_position", "trials", and per dtype ("float32", "float64") the
        largest "absolute" difference and the largest difference "relative" to ``|q| |k|``.
    """
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, trials, head_dim, dtype=torch.float64, generator=generator)
    p, r, s = torch.randint(0, max_position, (3, trials), generator=generator)
    result: dict[str, Any] = {"head_dim": head_dim, "max_position": max_position, "trials": trials}
    for dtype in (torch.float32, torch.float64):
        qd, kd = q.to(dtype), k.to(dtype)
        first = (apply_rotary(qd, p) * apply_rotary(kd, r)).sum(-1)  # (trials,)
        shifted = (apply_rotary(qd, p + s) * apply_rotary(kd, r + s)).sum(-1)
        difference = (first - shifted).abs().double()
        scale = q.norm(dim=-1) * k.norm(dim=-1)
        result[str(dtype).removeprefix("torch.")] = {
            "absolute": difference.max().item(),
            "relative": (difference / scale).max().item(),
        }
    return result
