"""The multi-head chapter's experiment: one wide head against several narrow heads.

The task asks every position of a sequence of random tokens for two things at once: the token
just before it and the token just after it (the sequence is read as a ring, so every position
has both neighbours). Each model is one attention layer, `MultiHeadAttention` of the same total
width ``num_hiddens`` with 1, 2 or 4 heads, between token and position embeddings and a linear
read-out of the two answers. Only the number of heads differs; parameter counts are equal.

A softmax head returns one weighted average of the values. To answer both questions, one head
must spread its weight over both neighbours, and a linear read-out cannot tell which of the two
mixed tokens came from the left and which from the right. Two heads can each take one
neighbour and keep them apart in separate features. The experiment measures whether training
finds this, over several seeds, and stores the result under the key it declares
(`multihead_cache_key`). The model, `attention_book.multihead.NeighborReader`, lives with the
layer it is built from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attention_book.multihead import NeighborReader
from attention_book.store import Run, cached, declared_key
from attention_book.timing import torch_threads
from attention_book.training.loop import fit, set_seed
from attention_book.training.metrics import num_parameters

__all__ = [
    "MULTIHEAD_CONFIG",
    "MULTIHEAD_PROBE",
    "RUNS",
    "VERSION",
    "MultiheadConfig",
    "multihead_answer_ranks",
    "multihead_binding",
    "multihead_cache_key",
    "multihead_experiment",
    "multihead_headline",
    "multihead_neighbor_batch",
    "multihead_run",
    "multihead_trained_model",
]

#: Bump when what `multihead_run` computes changes for the same configuration; not for a
#: refactor, a docstring or a moved helper.
VERSION = 1


@dataclass(frozen=True)
class MultiheadConfig:
    """The settings of the experiment: changing any of them trains again.

    Attributes:
        vocab_size: Number of distinct tokens.
        num_steps: Length of every sequence.
        num_hiddens: Width of the embeddings and of the attention layer, all heads together.
        head_counts: The numbers of heads compared.
        seeds: One model per number of heads and seed.
        batch_size: Sequences per batch.
        batches_per_epoch: Batches drawn once and seen in every epoch.
        num_epochs: Passes over them.
        lr: Adam's learning rate.
        test_size: Fresh sequences the accuracy is measured on.
    """

    vocab_size: int = 16
    num_steps: int = 16
    num_hiddens: int = 32
    head_counts: tuple[int, ...] = (1, 2, 4)
    seeds: tuple[int, ...] = (0, 1, 2)
    batch_size: int = 128
    batches_per_epoch: int = 50
    num_epochs: int = 10
    lr: float = 0.003
    test_size: int = 1000


#: The experiment of the chapter.
MULTIHEAD_CONFIG = MultiheadConfig()
#: Its probe: every number of heads, one seed, two batches, two epochs.
MULTIHEAD_PROBE = MultiheadConfig(seeds=(0,), batches_per_epoch=2, num_epochs=2, test_size=64)


# --8<-- [start:neighbor_batch]
def multihead_neighbor_batch(
    batch_size: int, num_steps: int, vocab_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Random token sequences and, for every position, its left and right neighbour.

    Args:
        batch_size: Number of sequences.
        num_steps: Length of each sequence (read as a ring: position 0 follows the last).
        vocab_size: Number of distinct tokens.
        generator: Source of randomness.

    Returns:
        (tokens, targets): ``targets[..., 0]`` is the token before each position and
        ``targets[..., 1]`` the token after it.

    Shapes:
        - tokens: ``(batch_size, num_steps)``
        - targets: ``(batch_size, num_steps, 2)``
    """
    tokens = torch.randint(vocab_size, (batch_size, num_steps), generator=generator)
    before, after = tokens.roll(1, dims=1), tokens.roll(-1, dims=1)  # ring neighbours
    return tokens, torch.stack([before, after], dim=-1)  # (batch, num_steps, 2)


# --8<-- [end:neighbor_batch]


def _loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """`fit`'s loss: cross-entropy of both answers at every position."""
    tokens, targets = batch
    logits = model(tokens)  # (batch, num_steps, 2, vocab_size)
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def _accuracy(model: nn.Module, tokens: Tensor, targets: Tensor) -> list[float]:
    """Share of right answers for the left and for the right neighbour."""
    with torch.no_grad():
        right = model(tokens).argmax(dim=-1) == targets  # (batch, num_steps, 2)
    return right.float().mean(dim=(0, 1)).tolist()


def multihead_run(config: MultiheadConfig = MULTIHEAD_CONFIG) -> dict[str, Any]:
    """Train one model per (number of heads, seed) and measure it on the same test set.

    The full result (`multihead_experiment`) and the probe (`MULTIHEAD_PROBE`) both come from
    here. Training runs on one thread: these tiny matrices gain nothing from more.

    Args:
        config: The experiment's settings.

    Returns:
        See `multihead_experiment`.
    """
    sizes = config.num_steps, config.vocab_size
    test = multihead_neighbor_batch(config.test_size, *sizes, torch.Generator().manual_seed(999))
    result: dict[str, Any] = {"runs": [], "state_dict": {}}
    with torch_threads(1):
        for num_heads in config.head_counts:
            for seed in config.seeds:
                set_seed(seed)
                model = NeighborReader(
                    config.vocab_size, config.num_steps, config.num_hiddens, num_heads
                )
                generator = torch.Generator().manual_seed(1000 + seed)
                loader = [
                    multihead_neighbor_batch(config.batch_size, *sizes, generator)
                    for _ in range(config.batches_per_epoch)
                ]  # a fresh sample of the task for every epoch would change nothing here
                start = time.perf_counter()
                history = fit(model, loader, _loss, config.num_epochs, lr=config.lr, device="cpu")
                seconds = time.perf_counter() - start
                before, after = _accuracy(model, *test)
                result["runs"].append(
                    {
                        "num_heads": num_heads,
                        "seed": seed,
                        "accuracy_before": before,
                        "accuracy_after": after,
                        "train_loss": history.train_loss,
                        "train_seconds": seconds,
                        "num_parameters": num_parameters(model),
                    }
                )
                if seed == config.seeds[0]:
                    result["state_dict"][str(num_heads)] = model.state_dict()
    return result


# --8<-- [start:experiment]
def multihead_cache_key() -> dict[str, Any]:
    """The experiment's key in the store: its configuration, `VERSION` and library versions.

    The task's sequences are drawn from seeds of the configuration, so no data digest is
    needed.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(MULTIHEAD_CONFIG, VERSION)


def multihead_experiment() -> dict[str, Any]:
    """Train (or load from the cache) every model of the experiment.

    The first call trains ``len(head_counts) * len(seeds)`` small models (a few seconds each
    on one CPU core); later calls with the same `multihead_cache_key` load the result.

    Returns:
        ``"runs"``: one dict per model with "num_heads", "seed", "accuracy_before",
        "accuracy_after" (test accuracy on each answer), "train_loss" (per epoch),
        "train_seconds" and "num_parameters"; ``"state_dict"``: the weights of the first
        seed's model for each number of heads (keys ``"1"``, ``"2"``, ...).
    """
    return cached("multihead", multihead_cache_key(), lambda: multihead_run(MULTIHEAD_CONFIG))


# --8<-- [end:experiment]


def multihead_trained_model(num_heads: int) -> NeighborReader:
    """The trained model of the first seed with `num_heads` heads (from the cache).

    Args:
        num_heads: One of ``MULTIHEAD_CONFIG.head_counts``.

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: If the experiment trained no model with `num_heads` heads.
    """
    config = MULTIHEAD_CONFIG
    if num_heads not in config.head_counts:
        raise ValueError(f"num_heads must be one of {list(config.head_counts)}, got {num_heads}")
    model = NeighborReader(config.vocab_size, config.num_steps, config.num_hiddens, num_heads)
    model.load_state_dict(multihead_experiment()["state_dict"][str(num_heads)])
    return model.eval()


def multihead_answer_ranks(logits: Tensor, targets: Tensor) -> dict[str, list[float]]:
    """How the read-out ranks the two neighbours: what a binding failure looks like.

    A model that knows which two tokens surround a position but not which stands on which
    side puts its probability on both tokens for both answers: its first guess is often the
    other neighbour, its two most probable tokens hold the right one.

    Args:
        logits: The model's logits for both answers at every position.
        targets: The right tokens, as `multihead_neighbor_batch` returns them.

    Returns:
        One value per answer (before, after), each a share between 0 and 1:
        ``"top1"`` (the most probable token is right), ``"top2"`` (the right token is one of
        the two most probable), ``"neighbour_mass"`` (the probability on the two neighbours'
        tokens together, counted once where both are the same token), and
        ``"wrong_is_other"`` (of the wrong first guesses, those that name the other
        neighbour's token; 0 when there is none).

    Shapes:
        - logits: ``(batch, num_steps, 2, vocab_size)``
        - targets: ``(batch, num_steps, 2)``

    Raises:
        ValueError: If the shapes do not fit together.
    """
    if logits.dim() != 4 or logits.shape[:3] != targets.shape or targets.shape[-1] != 2:
        raise ValueError(
            "logits must be (batch, num_steps, 2, vocab_size) and targets (batch, num_steps, "
            f"2), got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    probabilities = logits.softmax(dim=-1)  # (batch, num_steps, 2, vocab_size)
    other = targets.flip(-1)  # the other neighbour's token, for each answer
    first = probabilities.argmax(dim=-1)  # (batch, num_steps, 2)
    top2 = probabilities.topk(2, dim=-1).indices  # (batch, num_steps, 2, 2)
    right_mass = probabilities.gather(-1, targets[..., None])[..., 0]
    other_mass = probabilities.gather(-1, other[..., None])[..., 0]
    same = targets[..., 0:1] == targets[..., 1:2]  # both neighbours are one token
    wrong = first != targets
    named_other = (wrong & (first == other)).float().sum(dim=(0, 1))
    return {
        "top1": (~wrong).float().mean(dim=(0, 1)).tolist(),
        "top2": (top2 == targets[..., None]).any(dim=-1).float().mean(dim=(0, 1)).tolist(),
        "neighbour_mass": torch.where(same, right_mass, right_mass + other_mass)
        .mean(dim=(0, 1))
        .tolist(),
        "wrong_is_other": (named_other / wrong.float().sum(dim=(0, 1)).clamp(min=1)).tolist(),
    }


def multihead_binding(num_heads: int) -> dict[str, list[float]]:
    """`multihead_answer_ranks` of the first seed's trained model, on the experiment's test set.

    Loads the cached model (`multihead_trained_model`); trains nothing once the experiment
    is in the store.

    Args:
        num_heads: One of ``MULTIHEAD_CONFIG.head_counts``.

    Returns:
        See `multihead_answer_ranks`.
    """
    config = MULTIHEAD_CONFIG
    sizes = config.num_steps, config.vocab_size
    tokens, targets = multihead_neighbor_batch(
        config.test_size, *sizes, torch.Generator().manual_seed(999)
    )  # the test set of `multihead_run`
    model = multihead_trained_model(num_heads)
    with torch.no_grad():
        return multihead_answer_ranks(model(tokens), targets)


def multihead_headline(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the chapter's conclusion rests on: mean test accuracy per number of heads.

    Args:
        result: `multihead_experiment`'s result.

    Returns:
        ``{"accuracy %, 1 head": ..., ...}``: both answers and all seeds averaged, in percent.
    """
    numbers = {}
    for num_heads in sorted({run["num_heads"] for run in result["runs"]}):
        runs = [run for run in result["runs"] if run["num_heads"] == num_heads]
        mean = sum(run["accuracy_before"] + run["accuracy_after"] for run in runs) / len(runs)
        numbers[f"accuracy %, {num_heads} head{'s' if num_heads > 1 else ''}"] = 50 * mean
    return numbers


#: The cached run of this module. On a CPU with the recorded vector instructions an accuracy
#: may move by 0.5 points; on another, by 3 (measured with unvectorized kernels: -1.1 for one
#: head, none for two and four).
RUNS = (
    Run(
        "multihead",
        VERSION,
        probe=lambda: multihead_run(MULTIHEAD_PROBE),
        result=multihead_experiment,
        key=multihead_cache_key,
        headline=multihead_headline,
        tolerance=0.5,
    ),
)
