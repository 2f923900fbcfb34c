"""The optimizations chapter's experiments: a small GPT and what each optimization costs.

A character-level GPT learns the French side of the built-in corpus (`builtin_pairs`). Five
variants get the same data, the same batches, the same optimizer and the same number of steps;
each differs from the baseline (multi-head attention, rotary positions, softmax attention) in
one thing: grouped-query attention with 2 key/value heads, multi-query attention (1 head),
sinusoidal positions instead of rotary ones, or causal linear attention. Each variant is cached
under its own `experiment_key`.

The measurements that do not train run when a figure asks for them: the time per generated
token with and without the key/value cache, the cache sizes, and the time and memory of linear
against softmax attention as the sequence grows.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from attention_book.attention import DotProductAttention
from attention_book.data import builtin_pairs
from attention_book.gpt import GPT
from attention_book.linear_attention import linear_attention
from attention_book.memory import measure_tensor_memory
from attention_book.training import cached, evaluate_loss, experiment_key, fit, set_seed

__all__ = [
    "LINEAR_HEAD_DIM",
    "LINEAR_SEQ_LENS",
    "OPTIMIZATIONS_CONFIG",
    "PUBLISHED_MODELS",
    "VARIANTS",
    "generation_timings",
    "kv_cache_bytes",
    "linear_attention_measurements",
    "optimizations_decode",
    "optimizations_encode",
    "optimizations_experiment",
    "optimizations_make_model",
    "optimizations_text",
    "optimizations_trained_model",
    "optimizations_vocab",
]

#: The experiment's settings. Changing any value trains again (new cache entries).
OPTIMIZATIONS_CONFIG: dict[str, Any] = {
    "context": 128,  # characters per training window
    "num_hiddens": 64,
    "num_heads": 4,
    "num_blks": 2,
    "batch_size": 32,
    "num_steps": 250,
    "lr": 3e-3,
    "grad_clip": 1.0,
    "seed": 0,
    "valid_windows": 256,  # validation windows of `context` characters
}

#: What each variant changes in the baseline GPT (keyword arguments of `GPT`).
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "sinusoidal": {"positional": "sinusoidal"},
    "linear": {"attention": "linear"},
}

#: Published decoder shapes for the KV-cache table: layers, query heads, key/value heads,
#: head size and the context length the model was trained for. Sources are given in the
#: chapter's references: GPT-3 175B (Brown et al., 2020, Table 2.1), Llama 2 7B and 70B
#: (Touvron et al., 2023, section 2 and Table 1), Mistral 7B (Jiang et al., 2023, Table 1).
PUBLISHED_MODELS: dict[str, dict[str, int]] = {
    "GPT-3 175B": {"layers": 96, "heads": 96, "kv_heads": 96, "head_dim": 128, "context": 2048},
    "Llama 2 7B": {"layers": 32, "heads": 32, "kv_heads": 32, "head_dim": 128, "context": 4096},
    "Llama 2 70B": {"layers": 80, "heads": 64, "kv_heads": 8, "head_dim": 128, "context": 4096},
    "Mistral 7B": {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "context": 8192},
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


# ---------------------------------------------------------------------------------------------
# Data: the French side of the built-in corpus, one character per token


def optimizations_text(split: str = "train") -> str:
    """The French sentences of a split of the built-in corpus, one per line.

    Args:
        split: "train", "valid" or "test".

    Returns:
        The text.
    """
    return "\n".join(french for _, french in builtin_pairs(split)) + "\n"


@functools.cache
def optimizations_vocab() -> tuple[str, ...]:
    """The characters of the French text of all three splits, sorted.

    Returns:
        One character per token index.
    """
    return tuple(sorted(set("".join(optimizations_text(s) for s in ("train", "valid", "test")))))


def optimizations_encode(text: str) -> torch.Tensor:
    """Token indices of a text (every character must be in `optimizations_vocab`).

    Args:
        text: The text.

    Returns:
        A 1-D integer tensor, one index per character.
    """
    index = {char: i for i, char in enumerate(optimizations_vocab())}
    return torch.tensor([index[char] for char in text], dtype=torch.long)


def optimizations_decode(tokens: torch.Tensor) -> str:
    """The text of a 1-D tensor of token indices.

    Args:
        tokens: Token indices.

    Returns:
        The characters they stand for.
    """
    vocab = optimizations_vocab()
    return "".join(vocab[i] for i in tokens.tolist())


def _windows(text: str, count: int, length: int, seed: int) -> torch.Tensor:
    """`count` random windows of `length` + 1 characters (input and shifted target)."""
    tokens = optimizations_encode(text)
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - length - 1, (count,), generator=generator)
    return torch.stack([tokens[s : s + length + 1] for s in starts.tolist()])


# --8<-- [start:loss_fn]
def _next_token_loss(model: GPT, batch: tuple[torch.Tensor]) -> torch.Tensor:
    """`fit`'s loss: cross-entropy of every next character of the windows."""
    (windows,) = batch  # (batch, context + 1)
    logits = model(windows[:, :-1])  # (batch, context, vocab)
    return F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())


# --8<-- [end:loss_fn]


# --8<-- [start:make_model]
def optimizations_make_model(
    variant: str = "baseline", config: dict[str, Any] = OPTIMIZATIONS_CONFIG
) -> GPT:
    """The GPT of one variant of the experiment (untrained).

    Args:
        variant: A key of `VARIANTS`.
        config: Sizes (num_hiddens, num_heads, num_blks, context).

    Returns:
        The model.

    Raises:
        ValueError: If `variant` is not a key of `VARIANTS`.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    return GPT(
        len(optimizations_vocab()),
        config["num_hiddens"],
        config["num_heads"],
        config["num_blks"],
        max_len=4 * config["context"],
        **VARIANTS[variant],
    )


# --8<-- [end:make_model]


def _train(variant: str, config: dict[str, Any]) -> dict[str, Any]:
    """Train one variant on the same batches as every other, and measure its validation loss."""
    steps, batch_size, context = config["num_steps"], config["batch_size"], config["context"]
    train = _windows(optimizations_text("train"), steps * batch_size, context, config["seed"])
    valid = _windows(optimizations_text("valid"), config["valid_windows"], context, 1)
    set_seed(config["seed"])
    model = optimizations_make_model(variant, config)
    loader = DataLoader(TensorDataset(train), batch_size=batch_size)
    start = time.perf_counter()
    history = fit(
        model, loader, _next_token_loss, num_epochs=1, lr=config["lr"],
        grad_clip=config["grad_clip"], device="cpu",
    )  # fmt: skip
    seconds = time.perf_counter() - start
    valid_loader = DataLoader(TensorDataset(valid), batch_size=64)
    return {
        "state_dict": model.state_dict(),
        "train_loss": history.train_loss[-1],
        "valid_loss": evaluate_loss(model, valid_loader, _next_token_loss),
        "train_seconds": seconds,
        "num_parameters": sum(p.numel() for p in model.parameters()),
    }


# --8<-- [start:experiment]
def optimizations_experiment(variant: str = "baseline") -> dict[str, Any]:
    """Train (or load from the cache) one variant of the chapter's GPT.

    The first call trains (about half a minute per variant on two CPU cores); later calls with
    the same code and configuration load.

    Args:
        variant: A key of `VARIANTS`.

    Returns:
        "state_dict", the last "train_loss", the "valid_loss" (mean cross-entropy per
        character, in nats), "train_seconds" and "num_parameters".
    """
    config = {**OPTIMIZATIONS_CONFIG, "variant": variant, "changes": VARIANTS[variant]}
    key = experiment_key(config, __name__)
    return cached(f"optimizations-{variant}", key, lambda: _train(variant, OPTIMIZATIONS_CONFIG))


# --8<-- [end:experiment]


def optimizations_trained_model(variant: str = "baseline") -> GPT:
    """One trained variant (from the cache), in eval mode.

    Args:
        variant: A key of `VARIANTS`.

    Returns:
        The trained GPT.
    """
    model = optimizations_make_model(variant)
    model.load_state_dict(optimizations_experiment(variant)["state_dict"])
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Measurements


@functools.cache
def generation_timings(max_new_tokens: int = 384, repeats: int = 3) -> dict[str, Any]:
    """Time of each generated token of the trained baseline, with and without the cache.

    Greedy generation from a one-character prompt, step by step as `GPT.generate` does it;
    each step is timed ``repeats`` times (three separate generations) and the fastest kept,
    which removes most of the noise of a shared machine.

    Args:
        max_new_tokens: Tokens to generate.
        repeats: Generations per method.

    Returns:
        "positions" (the length of the sequence before each step), per method ("cache",
        "no_cache") the seconds of each step, and "same_tokens": whether both methods
        generated the same tokens.
    """
    model = optimizations_trained_model("baseline")
    prompt = optimizations_encode("L")[None, :]  # (1, 1)
    times: dict[str, list[list[float]]] = {"cache": [], "no_cache": []}
    outputs = {}
    with torch.no_grad():
        for _ in range(repeats):
            for method in times:
                tokens, step_times = prompt, []
                cache = model.new_cache(1, 1 + max_new_tokens) if method == "cache" else None
                step_input = tokens
                for _ in range(max_new_tokens):
                    start = time.perf_counter()
                    logits = model(step_input, cache) if cache is not None else model(tokens)
                    next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (1, 1)
                    step_times.append(time.perf_counter() - start)
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


def _median_seconds(function, *args, repeats: int = 5, **kwargs) -> float:
    """Median wall-clock time of `repeats` calls, after one warm-up call."""
    function(*args, **kwargs)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(*args, **kwargs)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


@functools.cache
def linear_attention_measurements() -> dict[str, Any]:
    """Time and peak memory of softmax and linear attention, for each sequence length.

    One sequence, 4 heads of ``LINEAR_HEAD_DIM`` features, float32, forward pass without
    gradients, as many queries as keys. Softmax attention is the book's
    `DotProductAttention` (explicit path: the ``n x n`` weights are formed); linear attention
    runs non-causal and causal. Memory is the exact peak of tensor memory
    (`measure_tensor_memory`) on the ``meta`` device.

    Returns:
        "seq_lens", and per method ("softmax", "linear", "linear_causal") the median
        "seconds" and the peak "bytes" at each length.
    """
    softmax = DotProductAttention()
    methods = {
        "softmax": lambda q, k, v: softmax(q, k, v),
        "softmax_causal": lambda q, k, v: softmax(q, k, v, is_causal=True),
        "linear": lambda q, k, v: linear_attention(q, k, v),
        "linear_causal": lambda q, k, v: linear_attention(q, k, v, causal=True),
    }
    result: dict[str, Any] = {"seq_lens": list(LINEAR_SEQ_LENS)}
    result |= {name: {"seconds": [], "bytes": []} for name in methods}
    for n in LINEAR_SEQ_LENS:
        generator = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 4, n, LINEAR_HEAD_DIM, generator=generator) for _ in range(3))
        meta = [x.to("meta") for x in (q, k, v)]
        with torch.no_grad():
            for name, method in methods.items():
                result[name]["seconds"].append(_median_seconds(method, q, k, v))
                result[name]["bytes"].append(measure_tensor_memory(method, *meta)[1])
    return result
