"""The attention playground: a tiny GPT learns to reverse or sort digits, in PyTorch and in a page.

The chapter on self-attention lets a reader train a small model in the browser and watch the
attention maps of its heads form. The page's trainer is plain JavaScript
(``docs/assets/javascripts/live/train.js``); this module is its twin in PyTorch, and the book's
browser check trains both on the same batches from the same weights and compares them step for
step. Everything random here is drawn from `Mulberry32`, a 32-bit generator that JavaScript
computes with the same integer arithmetic, so both sides make the same numbers from a seed:

- the tasks (`playground_batch`): a sequence of digits, a separator, then the same digits
  reversed or sorted; the model reads the sequence left to right and is scored on the digits
  after the separator;
- the model (`playground_model`): the book's `attention_book.gpt.GPT`, pre-norm, with learned,
  sinusoidal or no positions, in float64;
- its initial weights (`init_parameters`): PyTorch's default distributions, drawn from the seed;
- the loss (`playground_loss`) and the optimizer, `torch.optim.Adam` with PyTorch's defaults
  but the learning rate.

`train_playground` trains a configuration and says after how many steps it solved the task
(`solved`); `attention_book.experiments.playground` measures that for the configurations the
page compares.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_book.gpt import GPT
from attention_book.positional import sinusoidal_table

__all__ = [
    "EVAL_EVERY",
    "EVAL_SEED",
    "EVAL_SIZE",
    "PLAYGROUND_POSITIONALS",
    "SEPARATOR",
    "SOLVED_ACCURACY",
    "TASKS",
    "VOCAB_SIZE",
    "Mulberry32",
    "PlaygroundConfig",
    "batches",
    "init_parameters",
    "playground_accuracy",
    "playground_batch",
    "playground_loss",
    "playground_model",
    "playground_optimizer",
    "solved",
    "train_playground",
]

#: The tasks: what follows the separator.
TASKS = ("reverse", "sort")
#: The positions a model may have (`attention_book.gpt.GPT`'s ``positional``).
PLAYGROUND_POSITIONALS = ("learned", "sinusoidal", "none")
#: Digits 0 to 9 are tokens 0 to 9; the separator is token 10.
SEPARATOR = 10
VOCAB_SIZE = 11


class Mulberry32:
    """A 32-bit pseudo-random generator (Tommy Ettinger's Mulberry32), equal in Python and JS.

    Every operation is on unsigned 32-bit integers (JavaScript's ``Math.imul`` and ``>>> 0``),
    so ``train.js`` draws the same numbers from the same seed.

    Args:
        seed: Any integer; its lowest 32 bits are the state.
    """

    def __init__(self, seed: int):
        self.state = seed & 0xFFFFFFFF

    def next_uint32(self) -> int:
        """The next number, an integer in ``[0, 2**32)``."""
        self.state = (self.state + 0x6D2B79F5) & 0xFFFFFFFF
        t = self.state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return (t ^ (t >> 14)) & 0xFFFFFFFF

    def uniform(self) -> float:
        """A float in ``[0, 1)``: the next number divided by ``2**32``."""
        return self.next_uint32() / 4294967296.0

    def normal(self) -> float:
        """A standard normal number, by the Box-Muller transform of two uniforms."""
        u1 = 1.0 - self.uniform()  # in (0, 1]: log(u1) is finite
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@dataclass(frozen=True)
class PlaygroundConfig:
    """One model and its training, as the page's pickers set them.

    Attributes:
        task: ``"reverse"`` or ``"sort"``.
        num_blks: Layers (blocks).
        num_heads: Attention heads per layer.
        positional: ``"learned"``, ``"sinusoidal"`` or ``"none"``.
        num_digits: Digits before the separator (the model reads ``2 * num_digits`` tokens).
        num_hiddens: Width of the model.
        ffn_num_hiddens: Hidden width of each feed-forward network.
        batch_size: Sequences per step.
        lr: Adam's learning rate.
        seed: Seeds the weights; the batches use ``seed + 1``.
    """

    task: str = "reverse"
    num_blks: int = 2
    num_heads: int = 2
    positional: str = "learned"
    num_digits: int = 5
    num_hiddens: int = 32
    ffn_num_hiddens: int = 64
    batch_size: int = 16
    lr: float = 0.003
    seed: int = 0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.positional not in PLAYGROUND_POSITIONALS:
            raise ValueError(
                f"positional must be one of {PLAYGROUND_POSITIONALS}, got {self.positional!r}"
            )
        if self.num_digits < 1 or self.num_blks < 1 or self.batch_size < 1:
            raise ValueError(
                "num_digits, num_blks and batch_size must be at least 1, got "
                f"{self.num_digits}, {self.num_blks} and {self.batch_size}"
            )


# --8<-- [start:playground_batch]
def playground_batch(
    task: str, rng: Mulberry32, batch_size: int, num_digits: int
) -> tuple[Tensor, Tensor]:
    """Sequences ``digits, separator, answer`` for next-token training.

    Args:
        task: ``"reverse"`` (the answer is the digits backwards) or ``"sort"`` (in order).
        rng: The generator the digits are drawn from.
        batch_size: Number of sequences.
        num_digits: Digits before the separator.

    Returns:
        ``(tokens, answers)``: the model reads ``tokens``, the digits, the separator and all
        of the answer but its last digit; at the separator and after it, it should predict
        ``answers``.

    Shapes:
        - tokens: ``(batch_size, 2 * num_digits)``
        - answers: ``(batch_size, num_digits)``
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    rows = []
    for _ in range(batch_size):
        digits = [rng.next_uint32() % 10 for _ in range(num_digits)]
        answer = digits[::-1] if task == "reverse" else sorted(digits)
        rows.append([*digits, SEPARATOR, *answer])
    sequences = torch.tensor(rows)  # (batch, 2 * num_digits + 1)
    return sequences[:, :-1], sequences[:, num_digits + 1 :]


# --8<-- [end:playground_batch]


def playground_model(config: PlaygroundConfig) -> GPT:
    """The configuration's GPT, in float64, its weights drawn by `init_parameters`.

    Args:
        config: The model's sizes and seed.

    Returns:
        The model.
    """
    model = GPT(
        VOCAB_SIZE,
        config.num_hiddens,
        config.num_heads,
        config.num_blks,
        ffn_num_hiddens=config.ffn_num_hiddens,
        max_len=2 * config.num_digits,
        positional=config.positional,
    ).double()
    if config.positional == "sinusoidal":  # the table in float64, not float32 cast up
        table = sinusoidal_table(2 * config.num_digits, config.num_hiddens, torch.float64)
        model.position.P = table.unsqueeze(0)
    init_parameters(model, Mulberry32(config.seed))
    return model


def init_parameters(model: nn.Module, rng: Mulberry32) -> None:
    """Draw every parameter from `rng`, in ``named_parameters`` order, as PyTorch would.

    PyTorch's default distributions: a linear layer's weight and bias uniform in
    ``±1/sqrt(fan_in)``, a token embedding standard normal, learned positions normal with
    standard deviation 0.02, layer norms' weights one and biases zero. Each tensor is filled
    in row-major order.

    Args:
        model: A `playground_model`.
        rng: The generator.
    """
    linears = {name for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    norms = {name for name, module in model.named_modules() if isinstance(module, nn.LayerNorm)}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            owner, _, kind = name.rpartition(".")
            if owner in norms:
                parameter.fill_(1.0 if kind == "weight" else 0.0)
                continue
            if owner in linears:
                bound = 1.0 / math.sqrt(model.get_submodule(owner).in_features)
                draw = [(2.0 * rng.uniform() - 1.0) * bound for _ in range(parameter.numel())]
            elif name == "position.P":
                draw = [0.02 * rng.normal() for _ in range(parameter.numel())]
            else:  # the token embedding
                draw = [rng.normal() for _ in range(parameter.numel())]
            parameter.copy_(torch.tensor(draw, dtype=parameter.dtype).reshape(parameter.shape))


# --8<-- [start:playground_loss]
def playground_loss(model: nn.Module, tokens: Tensor, answers: Tensor) -> Tensor:
    """Cross-entropy of the answer's digits, predicted from the separator on.

    Args:
        model: A GPT.
        tokens: What it reads.
        answers: What it should write after the separator.

    Returns:
        The mean over every answer digit of the batch.
    """
    num_digits = answers.shape[1]
    logits = model(tokens)[:, num_digits:]  # at the separator and after it
    return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), answers.reshape(-1))


# --8<-- [end:playground_loss]


def playground_optimizer(model: nn.Module, lr: float) -> torch.optim.Adam:
    """Adam with PyTorch's defaults but the learning rate, one tensor at a time (as the page)."""
    return torch.optim.Adam(model.parameters(), lr=lr, foreach=False)


def playground_accuracy(model: nn.Module, tokens: Tensor, answers: Tensor) -> float:
    """Share of answer digits whose most probable token is right (reading the true prefix)."""
    with torch.no_grad():
        logits = model(tokens)[:, answers.shape[1] :]
    return (logits.argmax(dim=-1) == answers).double().mean().item()


#: Solved: this share of the answer digits of `EVAL_SIZE` fresh sequences is right.
SOLVED_ACCURACY = 0.99
EVAL_SIZE = 256
#: The seed of the sequences the accuracy is measured on.
EVAL_SEED = 12345
#: Steps between two measurements of the accuracy.
EVAL_EVERY = 25


def solved(accuracy: float) -> bool:
    """Whether an accuracy counts as the task solved (`SOLVED_ACCURACY`)."""
    return accuracy >= SOLVED_ACCURACY


def batches(config: PlaygroundConfig) -> Iterator[tuple[Tensor, Tensor]]:
    """The training batches of a configuration, drawn from ``seed + 1``, without end."""
    rng = Mulberry32(config.seed + 1)
    while True:
        yield playground_batch(config.task, rng, config.batch_size, config.num_digits)


def train_playground(
    config: PlaygroundConfig,
    num_steps: int,
    eval_every: int = EVAL_EVERY,
    stop_when_solved: bool = True,
) -> dict:
    """Train a configuration and record its loss at every step and its accuracy as it goes.

    Args:
        config: The model and its training.
        num_steps: Most steps.
        eval_every: Steps between two measurements of the accuracy.
        stop_when_solved: Stop at the first measurement that counts as solved.

    Returns:
        ``"losses"`` (one per step), ``"accuracies"`` (``[step, accuracy]`` pairs) and
        ``"solved_at"`` (the first step measured as solved, or None), and ``"model"``.
    """
    model = playground_model(config)
    optimizer = playground_optimizer(model, config.lr)
    evaluation = playground_batch(config.task, Mulberry32(EVAL_SEED), EVAL_SIZE, config.num_digits)
    losses, accuracies, solved_at = [], [], None
    stream = batches(config)
    for step in range(1, num_steps + 1):
        loss = playground_loss(model, *next(stream))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % eval_every == 0:
            accuracy = playground_accuracy(model, *evaluation)
            accuracies.append([step, accuracy])
            if solved(accuracy):
                solved_at = step if solved_at is None else solved_at  # the first time
                if stop_when_solved:
                    break
    return {"losses": losses, "accuracies": accuracies, "solved_at": solved_at, "model": model}
