"""The optimizations chapter's experiments: a small GPT and what each optimization costs.

A character-level GPT learns the French side of the built-in corpus (`builtin_pairs`). Every
variant gets the same data, the same batches, the same optimizer and the same number of steps;
each differs from the baseline (multi-head attention, rotary positions, softmax attention) in
one thing: grouped-query attention with 2 key/value heads, multi-query attention (1 head),
sinusoidal positions, or causal linear attention. The baseline is trained a second time with
another seed, which shows how much two runs of the same model differ. Each run is stored under
the key it declares (`optimizations_cache_key`), and `RUNS` declares them all for the probe
test and the referee.

The measurements that do not train run when a figure asks for them: the time per generated
token with and without the key/value cache, the time and memory of linear against softmax
attention as the sequence grows, the receptive field of stacked sliding windows, and the
offset-invariance error of rotary embeddings.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from attention_book.attention import DotProductAttention
from attention_book.data.corpus import builtin_pairs, corpus_digest
from attention_book.gpt import GPT
from attention_book.linear_attention import linear_attention
from attention_book.memory import measure_tensor_memory
from attention_book.rotary import apply_rotary
from attention_book.store import Run, cached, declared_key
from attention_book.timing import median_seconds, torch_threads
from attention_book.training.loop import fit, set_seed
from attention_book.training.metrics import num_parameters

__all__ = [
    "LINEAR_HEAD_DIM",
    "LINEAR_SEQ_LENS",
    "OPTIMIZATIONS_CONFIG",
    "OPTIMIZATIONS_PROBE",
    "PUBLISHED_MODELS",
    "RUNS",
    "VARIANTS",
    "VERSION",
    "OptimizationsConfig",
    "generation_timings",
    "kv_cache_bytes",
    "linear_attention_measurements",
    "optimizations_cache_key",
    "optimizations_decode",
    "optimizations_encode",
    "optimizations_experiment",
    "optimizations_headline",
    "optimizations_make_model",
    "optimizations_run",
    "optimizations_text",
    "optimizations_trained_model",
    "optimizations_vocab",
    "receptive_fields",
    "rope_offset_errors",
]

#: Bump when what `optimizations_run` computes changes for the same configuration (the GPT,
#: its training, the validation loss); not for a refactor, a docstring or a moved helper.
VERSION = 1


@dataclass(frozen=True)
class OptimizationsConfig:
    """The settings of one run of the experiment: changing any of them trains again.

    Attributes:
        context: Characters per training window.
        num_hiddens: Width of the GPT.
        num_heads: Query heads per layer.
        num_blks: Transformer blocks.
        batch_size: Windows per batch.
        num_steps: Optimizer steps (one pass over fresh windows).
        lr: Adam's learning rate.
        grad_clip: Largest global norm of the gradients.
        seed: Seed of the initialization and of the training windows.
        valid_windows: Validation windows, each ``2 * context`` characters long.
        variant: Which variant of `VARIANTS` is trained.
    """

    context: int = 128
    num_hiddens: int = 64
    num_heads: int = 4
    num_blks: int = 2
    batch_size: int = 16
    num_steps: int = 500
    lr: float = 3e-3
    grad_clip: float = 1.0
    seed: int = 0
    valid_windows: int = 200
    variant: str = "baseline"


#: The experiment of the chapter (the baseline; every variant changes only `variant`).
OPTIMIZATIONS_CONFIG = OptimizationsConfig()
#: Its probe: three steps on short windows, run for every variant.
OPTIMIZATIONS_PROBE = OptimizationsConfig(context=32, batch_size=4, num_steps=3, valid_windows=4)

#: What each variant changes in the baseline GPT (keyword arguments of `GPT`).
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "sinusoidal": {"positional": "sinusoidal"},
    "linear": {"attention": "linear"},
}

#: Published decoder shapes for the KV-cache table: layers, query heads, key/value heads,
#: head size and the context length the model was trained with. Sources (the chapter's
#: references): GPT-3 175B, Brown et al. (2020), Table 2.1 and section 2.1; PaLM 540B,
#: Chowdhery et al. (2022), Table 1 (head size 256), section 2 (multi-query attention) and
#: section 5 (sequence length 2048); Llama 2 7B and 70B, Touvron et al. (2023), Table 1
#: (context 4k; GQA for 34B and 70B), with layers and heads from Meta's released
#: configurations; Mistral 7B, Jiang et al. (2023), Table 1.
PUBLISHED_MODELS: dict[str, dict[str, int]] = {
    "GPT-3 175B": {"layers": 96, "heads": 96, "kv_heads": 96, "head_dim": 128, "context": 2048},
    "PaLM 540B": {"layers": 118, "heads": 48, "kv_heads": 1, "head_dim": 256, "context": 2048},
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
    """Token indices of a text.

    Args:
        text: The text; every character must be in `optimizations_vocab`.

    Returns:
        A 1-D integer tensor, one index per character.

    Raises:
        ValueError: If a character is not in the vocabulary.
    """
    index = {char: i for i, char in enumerate(optimizations_vocab())}
    unknown = sorted(set(text) - index.keys())
    if unknown:
        raise ValueError(f"text holds characters outside the vocabulary: {unknown}")
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
    variant: str = "baseline", config: OptimizationsConfig = OPTIMIZATIONS_CONFIG
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
        config.num_hiddens,
        config.num_heads,
        config.num_blks,
        max_len=4 * config.context,
        **VARIANTS[variant],
    )


# --8<-- [end:make_model]


@torch.no_grad()
def _loss_by_position(model: GPT, windows: torch.Tensor) -> list[float]:
    """Mean cross-entropy (nats per character) at each position of the windows."""
    losses = []
    for batch in windows.split(50):
        logits = model(batch[:, :-1])  # (batch, length, vocab)
        loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")
        losses.append(loss)  # (batch, length)
    return torch.cat(losses).mean(dim=0).tolist()


def optimizations_run(config: OptimizationsConfig = OPTIMIZATIONS_CONFIG) -> dict[str, Any]:
    """Train one variant on the same batches as every other, and measure its validation loss.

    The full results (`optimizations_experiment`) and the probes (`OPTIMIZATIONS_PROBE`) all
    come from here. Training runs on one thread: small matrices gain little from a second,
    and on a loaded machine threads that wait for each other lose much more.

    Args:
        config: The run's settings; ``config.variant`` is the variant trained.

    Returns:
        See `optimizations_experiment`.

    Raises:
        ValueError: If ``config.variant`` is not a key of `VARIANTS`.
    """
    steps, batch_size, context = config.num_steps, config.batch_size, config.context
    seed = config.seed
    train = _windows(optimizations_text("train"), steps * batch_size, context, seed)
    # Windows twice as long as in training: positions past `context` were never trained.
    valid = _windows(optimizations_text("valid"), config.valid_windows, 2 * context, 1)
    set_seed(seed)
    model = optimizations_make_model(config.variant, config)
    loader = DataLoader(TensorDataset(train), batch_size=batch_size)
    with torch_threads(1):
        start, cpu_start = time.perf_counter(), time.process_time()
        history = fit(
            model, loader, _next_token_loss, num_epochs=1, lr=config.lr,
            grad_clip=config.grad_clip, device="cpu",
        )  # fmt: skip
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        by_position = _loss_by_position(model.eval(), valid)
    return {
        "state_dict": model.state_dict(),
        "train_loss": history.train_loss[-1],
        "valid_loss": statistics.fmean(by_position[:context]),
        "loss_by_position": by_position,
        "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds,
        "num_parameters": num_parameters(model),
    }


def _config(variant: str, seed: int | None) -> OptimizationsConfig:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    return replace(OPTIMIZATIONS_CONFIG, variant=variant, seed=0 if seed is None else seed)


# --8<-- [start:experiment]
def optimizations_cache_key(variant: str = "baseline", seed: int | None = None) -> dict[str, Any]:
    """One variant's key in the store: what its result depends on, as it declares it.

    The configuration (with the variant and the seed), this module's `VERSION`, what the
    variant changes in the GPT, a digest of the corpus whose French side it reads, and the
    library versions (`declared_key`).

    Args:
        variant: A key of `VARIANTS`.
        seed: As in `optimizations_experiment`.

    Returns:
        A dict of JSON values, for `cached`.

    Raises:
        ValueError: If `variant` is not a key of `VARIANTS`.
    """
    config = _config(variant, seed)
    return declared_key(config, VERSION, changes=VARIANTS[variant], corpus=corpus_digest())


def optimizations_experiment(variant: str = "baseline", seed: int | None = None) -> dict[str, Any]:
    """Train (or load from the cache) one variant of the chapter's GPT.

    The first call trains (about a quarter of a minute per variant on one CPU core); later
    calls with the same `optimizations_cache_key` load.

    Args:
        variant: A key of `VARIANTS`.
        seed: Seed of the initialization and of the batches (default: the config's).

    Returns:
        "state_dict", the last "train_loss", the "valid_loss" (mean cross-entropy per
        character over the first ``context`` positions of validation windows, in nats),
        "loss_by_position" (over windows of ``2 * context``), "train_seconds" (wall clock),
        "train_cpu_seconds" (CPU time of the process, which a loaded machine does not
        inflate) and "num_parameters".

    Raises:
        ValueError: If `variant` is not a key of `VARIANTS`.
    """
    config = _config(variant, seed)
    name = f"optimizations-{variant}-seed{config.seed}"
    return cached(name, optimizations_cache_key(variant, seed), lambda: optimizations_run(config))


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
        "seq_lens", and per method ("softmax", "softmax_fused", "linear") the median
        "seconds" and the peak "bytes" at each length.
    """
    explicit = DotProductAttention()
    methods = {
        "softmax": lambda q, k, v: explicit(q, k, v, is_causal=True),
        "softmax_fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=True),
    }
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


def optimizations_headline(result: dict[str, Any]) -> dict[str, float]:
    """The number the chapter compares the variants by: the validation loss.

    Args:
        result: `optimizations_experiment`'s result for one variant.

    Returns:
        ``{"validation loss, nats per character": ...}`` over the trained positions.
    """
    return {"validation loss, nats per character": result["valid_loss"]}


def _declared(variant: str, seed: int) -> Run:
    return Run(
        f"optimizations-{variant}-seed{seed}",
        VERSION,
        probe=lambda: optimizations_run(replace(OPTIMIZATIONS_PROBE, variant=variant, seed=seed)),
        result=lambda: optimizations_experiment(variant, seed),
        key=lambda: optimizations_cache_key(variant, seed),
        headline=optimizations_headline,
        tolerance=0.02,
    )


#: The cached runs of this module: every variant, and the baseline with a second seed. A
#: validation loss may move by 0.02 nats: the same training on another CPU rounds differently.
RUNS = (*(_declared(variant, 0) for variant in VARIANTS), _declared("baseline", 1))
