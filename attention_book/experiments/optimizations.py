"""The optimizations chapter's experiments: a small GPT and what each optimization costs.

A character-level GPT learns the French side of the built-in corpus (`builtin_pairs`). Every
variant gets the same data, the same batches, the same optimizer and the same number of steps;
each differs from the baseline (multi-head attention, rotary positions, softmax attention) in
one thing: grouped-query attention with 2 key/value heads, multi-query attention (1 head),
sinusoidal positions, ALiBi's distance bias instead of any position vector, or causal linear
attention. The baseline is trained again with two other seeds (`BASELINE_SEEDS`), which shows
how much runs of the same model differ. Each run is stored under the key it declares
(`optimizations_cache_key`), and `RUNS` declares them all for the probe test and the referee.

The measurements that do not train (the time per generated token with and without the
key/value cache, the time and memory of linear against softmax attention as the sequence
grows, the receptive field of stacked sliding windows, the offset-invariance error of rotary
embeddings, the cache sizes of published models) are in
`attention_book.experiments.optimizations_measurements`; their names can still be imported
from here.
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

from attention_book.data.corpus import builtin_pairs, corpus_digest
from attention_book.gpt import GPT
from attention_book.store import Run, cached, declared_key
from attention_book.timing import torch_threads
from attention_book.training.loop import fit, set_seed
from attention_book.training.metrics import num_parameters

__all__ = [
    "BASELINE_SEEDS",
    "OPTIMIZATIONS_CONFIG",
    "OPTIMIZATIONS_PROBE",
    "RUNS",
    "VARIANTS",
    "VERSION",
    "OptimizationsConfig",
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
    "alibi": {"positional": "alibi"},
}

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
        tolerance=0.002,
    )


#: The random seeds the baseline is trained with: the spread of its validation loss over them is
#: the yardstick the core page reads every variant's difference against.
BASELINE_SEEDS = (0, 1, 2, 3, 4)

#: The cached runs of this module: every variant, and the baseline with its other seeds. A
#: validation loss may move by 0.002 nats on a CPU with the recorded vector instructions and by
#: 0.005 on another (measured with unvectorized kernels: less than 0.0001 for every variant).
RUNS = (
    *(_declared(variant, 0) for variant in VARIANTS),
    *(_declared("baseline", seed) for seed in BASELINE_SEEDS[1:]),
)
