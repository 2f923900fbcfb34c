"""Learning-rate schedules with warmup, stepped once per optimizer step.

The Transformer paper raises the learning rate linearly for ``warmup_steps`` steps, then lets
it fall with the inverse square root of the step number (Vaswani et al., 2017, eq. 3):

    lr(step) = num_hiddens ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)

`warmup_inverse_sqrt` is the same curve divided by its peak (the value at ``warmup_steps``),
so any peak learning rate can be chosen; `transformer_lr` is the paper's formula itself.
`warmup_cosine` warms up the same way, then decays along a half cosine to zero, as the Vision
Transformer chapter trains.
`schedule_per_step` attaches a schedule to an optimizer so that it advances after every
``optimizer.step()``: a training loop that knows nothing about schedules (like `fit`) then
trains with one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["schedule_per_step", "transformer_lr", "warmup_cosine", "warmup_inverse_sqrt"]


def _check_warmup(warmup_steps: int) -> None:
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}")


# --8<-- [start:warmup_inverse_sqrt]
def warmup_inverse_sqrt(step: int, warmup_steps: int) -> float:
    """Linear warmup to 1, then decay with the inverse square root of the step number.

    Counting steps from 1 (``n = step + 1``): ``n / warmup_steps`` while ``n <= warmup_steps``,
    then ``sqrt(warmup_steps / n)``. Multiply by the peak learning rate.

    Args:
        step: Number of optimizer steps already taken (0 for the first step).
        warmup_steps: Steps until the peak.

    Returns:
        The factor, in (0, 1].

    Raises:
        ValueError: If ``step`` < 0 or ``warmup_steps`` < 1.
    """
    _check_warmup(warmup_steps)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    n = step + 1
    return min(n / warmup_steps, math.sqrt(warmup_steps / n))


# --8<-- [end:warmup_inverse_sqrt]


def transformer_lr(step: int, num_hiddens: int, warmup_steps: int = 4000) -> float:
    """The learning rate of the Transformer paper (eq. 3), steps counted from 0.

    ``num_hiddens ** -0.5 * min(n ** -0.5, n * warmup_steps ** -1.5)`` with ``n = step + 1``;
    it equals ``(num_hiddens * warmup_steps) ** -0.5 * warmup_inverse_sqrt(step, warmup_steps)``.

    Args:
        step: Number of optimizer steps already taken (0 for the first step).
        num_hiddens: Model width (``d_model`` in the paper).
        warmup_steps: Steps of linear warmup (4000 in the paper).

    Returns:
        The learning rate.

    Raises:
        ValueError: If ``step`` < 0, ``num_hiddens`` < 1 or ``warmup_steps`` < 1.
    """
    _check_warmup(warmup_steps)
    if step < 0 or num_hiddens < 1:
        raise ValueError(f"need step >= 0 and num_hiddens >= 1, got {step} and {num_hiddens}")
    n = step + 1
    return num_hiddens**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)


# --8<-- [start:warmup_cosine]
def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate factor: linear warm-up to 1, then a cosine decay to 0.

    Args:
        step: Optimizer steps already taken (0 for the first step).
        warmup_steps: Steps of the warm-up.
        total_steps: Steps of the whole training.

    Returns:
        ``(step + 1) / warmup_steps`` during the warm-up, then
        ``(1 + cos(pi * progress)) / 2`` with progress going from 0 to 1.

    Raises:
        ValueError: If ``warmup_steps`` is not between 1 and ``total_steps - 1``.
    """
    if not 1 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps must be in [1, total_steps - 1] = [1, {total_steps - 1}], "
            f"got {warmup_steps}"
        )
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


# --8<-- [end:warmup_cosine]


# --8<-- [start:schedule_per_step]
def schedule_per_step(
    optimizer: torch.optim.Optimizer, factor: Callable[[int], float]
) -> torch.optim.lr_scheduler.LambdaLR:
    """Make ``optimizer``'s learning rate follow ``lr * factor(step)``, advanced every step.

    The rate of step ``s`` (counted from 0) is the optimizer's initial ``lr`` times
    ``factor(s)``. The scheduler advances itself after every ``optimizer.step()`` (through a
    step hook), so the training loop needs no change.

    Args:
        optimizer: The optimizer; its ``lr`` is the peak (or base) learning rate.
        factor: Maps the number of steps taken to a multiplier, e.g.
            ``lambda s: warmup_inverse_sqrt(s, 100)``.

    Returns:
        The scheduler (``get_last_lr()`` gives the rate the next step will use).
    """
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    optimizer.register_step_post_hook(lambda *_: scheduler.step())
    return scheduler


# --8<-- [end:schedule_per_step]
