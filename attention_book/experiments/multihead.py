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
finds this, over several seeds, and caches the result under `experiment_key`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attention_book.multihead import MultiHeadAttention
from attention_book.positional import LearnedPositionalEmbedding
from attention_book.training import cached, experiment_key, fit, set_seed

__all__ = [
    "MULTIHEAD_CONFIG",
    "NeighborReader",
    "multihead_experiment",
    "multihead_neighbor_batch",
    "multihead_trained_model",
]

#: The experiment's settings. Changing any value trains again (new cache entry).
MULTIHEAD_CONFIG: dict[str, Any] = {
    "vocab_size": 16,
    "num_steps": 16,
    "num_hiddens": 32,
    "head_counts": [1, 2, 4],
    "seeds": [0, 1, 2],
    "batch_size": 128,
    "batches_per_epoch": 50,
    "num_epochs": 10,
    "lr": 0.003,
    "test_size": 1000,
}


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


# --8<-- [start:NeighborReader]
class NeighborReader(nn.Module):
    """Embeddings, one multi-head self-attention layer, and a linear read-out of two answers.

    Args:
        vocab_size: Number of distinct tokens.
        num_steps: Sequence length (number of learned positions).
        num_hiddens: Width of the embeddings and of the attention layer (all heads together).
        num_heads: Number of heads; each has ``num_hiddens // num_heads`` features.

    Shapes:
        - tokens: ``(batch, num_steps)``
        - output: ``(batch, num_steps, 2, vocab_size)``, logits of the two answers
    """

    def __init__(self, vocab_size: int, num_steps: int, num_hiddens: int, num_heads: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        # Unit-scale initial positions, so the heads can tell positions apart from the start.
        self.positions = LearnedPositionalEmbedding(num_hiddens, max_len=num_steps, init_std=1.0)
        self.attention = MultiHeadAttention(num_hiddens, num_heads)
        self.read_out = nn.Linear(num_hiddens, 2 * vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        """Return the logits of the left and the right neighbour of every position."""
        X = self.positions(self.embedding(tokens))  # (batch, num_steps, num_hiddens)
        Y = self.attention(X, X, X)  # self-attention: (batch, num_steps, num_hiddens)
        logits = self.read_out(Y)  # (batch, num_steps, 2 * vocab_size)
        return logits.unflatten(-1, (2, self.vocab_size))  # (batch, num_steps, 2, vocab)


# --8<-- [end:NeighborReader]


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


def _train_all(config: dict[str, Any]) -> dict[str, Any]:
    """Train one model per (number of heads, seed) and measure it on the same test set."""
    sizes = config["num_steps"], config["vocab_size"]
    test = multihead_neighbor_batch(config["test_size"], *sizes, torch.Generator().manual_seed(999))
    result: dict[str, Any] = {"runs": [], "state_dict": {}}
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these tiny matrices gain nothing from more threads
    try:
        for num_heads in config["head_counts"]:
            for seed in config["seeds"]:
                set_seed(seed)
                model = NeighborReader(
                    config["vocab_size"], config["num_steps"], config["num_hiddens"], num_heads
                )
                generator = torch.Generator().manual_seed(1000 + seed)
                num_batches = config["batches_per_epoch"]
                loader = [
                    multihead_neighbor_batch(config["batch_size"], *sizes, generator)
                    for _ in range(num_batches)
                ]  # a fresh sample of the task for every epoch would change nothing here
                start = time.perf_counter()
                history = fit(
                    model, loader, _loss, config["num_epochs"], lr=config["lr"], device="cpu"
                )
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
                        "num_parameters": sum(p.numel() for p in model.parameters()),
                    }
                )
                if seed == config["seeds"][0]:
                    result["state_dict"][str(num_heads)] = model.state_dict()
    finally:
        torch.set_num_threads(num_threads)
    return result


# --8<-- [start:experiment]
def multihead_experiment() -> dict[str, Any]:
    """Train (or load from the cache) every model of the experiment.

    The first call trains ``len(head_counts) * len(seeds)`` small models (a few seconds each
    on one CPU core); later calls with the same configuration and code load the result.

    Returns:
        ``"runs"``: one dict per model with "num_heads", "seed", "accuracy_before",
        "accuracy_after" (test accuracy on each answer), "train_loss" (per epoch),
        "train_seconds" and "num_parameters"; ``"state_dict"``: the weights of the first
        seed's model for each number of heads (keys ``"1"``, ``"2"``, ...).
    """
    key = experiment_key(MULTIHEAD_CONFIG, __name__)
    return cached("multihead", key, lambda: _train_all(MULTIHEAD_CONFIG))


# --8<-- [end:experiment]


def multihead_trained_model(num_heads: int) -> NeighborReader:
    """The trained model of the first seed with `num_heads` heads (from the cache).

    Args:
        num_heads: One of ``MULTIHEAD_CONFIG["head_counts"]``.

    Returns:
        The model, in eval mode.

    Raises:
        ValueError: If the experiment trained no model with `num_heads` heads.
    """
    config = MULTIHEAD_CONFIG
    if num_heads not in config["head_counts"]:
        raise ValueError(f"num_heads must be one of {config['head_counts']}, got {num_heads}")
    model = NeighborReader(
        config["vocab_size"], config["num_steps"], config["num_hiddens"], num_heads
    )
    model.load_state_dict(multihead_experiment()["state_dict"][str(num_heads)])
    return model.eval()
