"""The playground's PyTorch side: the generator, the tasks, the model's weights, the training.

The page's JavaScript (``docs/assets/javascripts/live/train.js``) must compute the same, so
these tests pin what each function computes: the generator's numbers (taken from train.js,
run in Node), the batches' layout, where each weight comes from, and that a training is a
pure function of its configuration.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.playground import (
    EVAL_SIZE,
    SEPARATOR,
    SOLVED_ACCURACY,
    VOCAB_SIZE,
    Mulberry32,
    PlaygroundConfig,
    playground_accuracy,
    playground_batch,
    playground_loss,
    playground_model,
    playground_optimizer,
    solved,
    train_playground,
)
from attention_book.positional import sinusoidal_table

SMALL = PlaygroundConfig(num_hiddens=8, ffn_num_hiddens=16, batch_size=4, num_digits=3)


def test_the_generator_draws_what_train_js_draws():
    # `new Mulberry32(0)` in train.js, run in Node: its first three next_uint32().
    rng = Mulberry32(0)
    assert [rng.next_uint32() for _ in range(3)] == [1144304738, 1416247, 958946056]
    # `new Mulberry32(42).uniform()` in Node, to the last bit.
    assert Mulberry32(42).uniform() == 0.6011037519201636


def test_the_generator_keeps_32_bits_and_its_draws_in_range():
    assert Mulberry32(2**32 + 5).state == 5
    assert Mulberry32(-1).state == 2**32 - 1
    rng = Mulberry32(7)
    draws = [rng.uniform() for _ in range(2000)]
    assert min(draws) >= 0.0 and max(draws) < 1.0
    assert abs(sum(draws) / len(draws) - 0.5) < 0.03
    normals = [rng.normal() for _ in range(4000)]
    assert all(math.isfinite(x) for x in normals)
    mean = sum(normals) / len(normals)
    variance = sum((x - mean) ** 2 for x in normals) / len(normals)
    assert abs(mean) < 0.06 and abs(variance - 1) < 0.08


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"task": "add"}, "task"),
        ({"positional": "rope"}, "positional"),
        ({"num_digits": 0}, "num_digits"),
        ({"num_blks": 0}, "num_blks"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_a_bad_configuration_fails_naming_its_setting(settings, named):
    with pytest.raises(ValueError, match=named):
        PlaygroundConfig(**settings)


@pytest.mark.parametrize("task", ["reverse", "sort"])
def test_a_batch_is_digits_separator_answer(task):
    tokens, answers = playground_batch(task, Mulberry32(3), 6, 5)
    assert tokens.shape == (6, 10) and answers.shape == (6, 5)
    digits = tokens[:, :5]
    assert (tokens[:, 5] == SEPARATOR).all()
    assert digits.min() >= 0 and digits.max() <= 9
    want = digits.flip(1) if task == "reverse" else digits.sort(dim=1).values
    assert torch.equal(answers, want)
    # Teacher forcing: after the separator the model reads the answer but its last digit.
    assert torch.equal(tokens[:, 6:], answers[:, :-1])


def test_batches_come_from_the_generator_and_nothing_else():
    first = playground_batch("sort", Mulberry32(9), 3, 4)
    second = playground_batch("sort", Mulberry32(9), 3, 4)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    rng = Mulberry32(9)
    digits = [rng.next_uint32() % 10 for _ in range(4)]  # the first sequence, drawn by hand
    assert first[0][0, :4].tolist() == digits
    with pytest.raises(ValueError, match="task"):
        playground_batch("copy", Mulberry32(0), 1, 3)


def test_the_model_is_float64_and_its_weights_come_from_the_seed():
    model = playground_model(SMALL)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    again = playground_model(SMALL)
    other = playground_model(PlaygroundConfig(**{**SMALL.__dict__, "seed": 1}))
    for (name, a), b, c in zip(
        model.named_parameters(), again.parameters(), other.parameters(), strict=True
    ):
        assert torch.equal(a, b), name
        if "ln" not in name:  # layer norms start at one and zero, whatever the seed
            assert not torch.equal(a, c), name


def test_the_initial_weights_follow_pytorchs_default_distributions():
    model = playground_model(PlaygroundConfig(num_hiddens=32, ffn_num_hiddens=64))
    for name, module in model.named_modules():
        if isinstance(module, nn.LayerNorm):
            assert (module.weight == 1).all() and (module.bias == 0).all(), name
        elif isinstance(module, nn.Linear):
            bound = 1 / math.sqrt(module.in_features)
            assert module.weight.abs().max() <= bound, name
            assert module.weight.abs().max() > 0.9 * bound, name  # spread over the range
    assert abs(model.embedding.weight.std().item() - 1) < 0.15
    assert abs(model.position.P.std().item() - 0.02) < 0.004


def test_the_first_weight_is_the_generators_first_draw():
    model = playground_model(SMALL)
    name, first = next(iter(model.named_parameters()))
    assert name == "embedding.weight"
    assert first.flatten()[0].item() == Mulberry32(SMALL.seed).normal()


def test_sinusoidal_positions_are_the_float64_table():
    model = playground_model(PlaygroundConfig(positional="sinusoidal"))
    table = sinusoidal_table(10, 32, torch.float64)
    assert model.position.P.dtype == torch.float64
    assert torch.equal(model.position.P[0], table)
    assert model.position.P.requires_grad is False
    assert playground_model(PlaygroundConfig(positional="none")).position is None


def test_the_loss_is_the_cross_entropy_of_the_answer_digits():
    model = playground_model(SMALL)
    tokens, answers = playground_batch("reverse", Mulberry32(1), 4, 3)
    logits = model(tokens)[:, 3:]  # at the separator and after it
    want = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), answers.reshape(-1))
    assert playground_loss(model, tokens, answers).item() == pytest.approx(want.item(), abs=0)
    # Untrained, the model is close to a guess among the 11 tokens.
    assert abs(want.item() - math.log(VOCAB_SIZE)) < 1.5


class Oracle(nn.Module):
    """Logits that put every position's most weight on the right answer digit (or a wrong one)."""

    def __init__(self, answers: torch.Tensor, wrong: int = 0):
        super().__init__()
        self.answers, self.wrong = answers, wrong

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        num_digits = self.answers.shape[1]
        logits = torch.zeros(*tokens.shape, VOCAB_SIZE, dtype=torch.float64)
        right = self.answers.clone()
        right[: self.wrong, 0] = (right[: self.wrong, 0] + 1) % 10  # some first digits wrong
        logits[:, num_digits:].scatter_(-1, right[..., None], 1.0)
        return logits


def test_the_accuracy_counts_the_answer_digits_right():
    tokens, answers = playground_batch("sort", Mulberry32(5), 8, 5)
    assert playground_accuracy(Oracle(answers), tokens, answers) == 1.0
    assert playground_accuracy(Oracle(answers, wrong=4), tokens, answers) == 1 - 4 / 40


def test_solved_means_at_least_the_threshold():
    assert solved(SOLVED_ACCURACY) and solved(1.0)
    assert not solved(SOLVED_ACCURACY - 1e-9)
    assert EVAL_SIZE == 256


def test_adam_updates_one_tensor_at_a_time_with_the_configured_rate():
    optimizer = playground_optimizer(playground_model(SMALL), 0.01)
    group = optimizer.param_groups[0]
    assert group["lr"] == 0.01 and group["foreach"] is False
    assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8


def test_a_training_records_every_step_and_measures_every_eval_every_steps():
    result = train_playground(SMALL, 10, eval_every=4)
    assert len(result["losses"]) == 10
    assert [step for step, _ in result["accuracies"]] == [4, 8]
    assert result["solved_at"] is None
    assert all(0 <= accuracy <= 1 for _, accuracy in result["accuracies"])


def test_a_training_is_a_function_of_its_configuration():
    first = train_playground(SMALL, 6, eval_every=3)
    second = train_playground(SMALL, 6, eval_every=3)
    assert first["losses"] == second["losses"]
    assert first["accuracies"] == second["accuracies"]
    for a, b in zip(first["model"].parameters(), second["model"].parameters(), strict=True):
        assert torch.equal(a, b)
    other = train_playground(PlaygroundConfig(**{**SMALL.__dict__, "seed": 1}), 6, eval_every=3)
    assert other["losses"] != first["losses"]


def test_the_default_model_learns_to_reverse():
    # 150 steps of the page's default model (a second or so): the loss falls well below a
    # guess among the ten digits, though the task is not yet solved.
    result = train_playground(PlaygroundConfig(), 150, eval_every=50, stop_when_solved=False)
    assert len(result["losses"]) == 150
    assert sum(result["losses"][-10:]) / 10 < 0.6 * math.log(10)


def test_a_training_stops_at_its_first_solved_measurement(monkeypatch):
    import attention_book.playground as playground

    monkeypatch.setattr(playground, "playground_accuracy", lambda *args: 1.0)
    result = train_playground(SMALL, 20, eval_every=5)
    assert result["solved_at"] == 5 and len(result["losses"]) == 5
    assert result["accuracies"] == [[5, 1.0]]
    result = train_playground(SMALL, 20, eval_every=5, stop_when_solved=False)
    assert result["solved_at"] == 5 and len(result["losses"]) == 20  # the first, not the last
