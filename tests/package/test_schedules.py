import itertools
import math

import pytest
import torch

from attention_book.training.schedules import (
    schedule_per_step,
    transformer_lr,
    warmup_cosine,
    warmup_inverse_sqrt,
)


def test_warmup_inverse_sqrt_rises_linearly_then_decays():
    warmup = 10
    factors = [warmup_inverse_sqrt(s, warmup) for s in range(40)]
    assert factors[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert max(factors) == factors[9] == 1.0
    assert factors[39] == pytest.approx(math.sqrt(10 / 40))
    assert all(a > b for a, b in itertools.pairwise(factors[9:]))


def test_transformer_lr_is_the_papers_formula_and_a_scaled_factor():
    assert transformer_lr(3999, 512) == pytest.approx(512**-0.5 * 4000**-0.5)
    for step in (0, 10, 3999, 4000, 20_000):
        n = step + 1
        expected = 512**-0.5 * min(n**-0.5, n * 4000**-1.5)
        assert transformer_lr(step, 512) == pytest.approx(expected)
        scaled = (512 * 4000) ** -0.5 * warmup_inverse_sqrt(step, 4000)
        assert transformer_lr(step, 512) == pytest.approx(scaled)


@pytest.mark.parametrize("bad", [{"step": -1}, {"warmup_steps": 0}])
def test_schedules_reject_bad_arguments(bad):
    args = {"step": 0, "warmup_steps": 4} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        warmup_inverse_sqrt(**args)
    with pytest.raises(ValueError):
        transformer_lr(args["step"], 8, args["warmup_steps"])


def test_schedule_per_step_sets_the_rate_of_every_optimizer_step():
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    schedule_per_step(optimizer, lambda s: warmup_inverse_sqrt(s, 4))
    used = []
    for _ in range(8):
        used.append(optimizer.param_groups[0]["lr"])
        weight.grad = torch.ones(1)
        optimizer.step()
    assert used == pytest.approx([0.5 * warmup_inverse_sqrt(s, 4) for s in range(8)])
    # Plain SGD on a gradient of 1: the weight moved by the sum of the rates.
    assert weight.item() == pytest.approx(-sum(used))


def test_warmup_cosine_rises_then_falls_to_zero():
    factors = [warmup_cosine(step, 4, 20) for step in range(20)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0  # the decay starts from the peak
    assert all(b < a for a, b in itertools.pairwise(factors[4:]))
    assert warmup_cosine(20, 4, 20) == pytest.approx(0.0)
    assert warmup_cosine(12, 4, 20) == pytest.approx(0.5)  # half-way through the decay
    with pytest.raises(ValueError, match=r"warmup_steps must be in \[1, total_steps - 1\]"):
        warmup_cosine(0, 20, 20)
