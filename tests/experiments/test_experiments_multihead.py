import pytest
import torch

from attention_book.experiments.multihead import (
    MULTIHEAD_CONFIG,
    multihead_answer_ranks,
    multihead_neighbor_batch,
    multihead_trained_model,
)
from attention_book.multihead import NeighborReader


def test_neighbor_batch_targets_are_the_ring_neighbours():
    tokens, targets = multihead_neighbor_batch(3, 6, 10, torch.Generator().manual_seed(0))
    assert tokens.shape == (3, 6) and targets.shape == (3, 6, 2)
    for b in range(3):
        for i in range(6):
            assert targets[b, i, 0] == tokens[b, (i - 1) % 6]
            assert targets[b, i, 1] == tokens[b, (i + 1) % 6]


def test_neighbor_batch_is_seeded():
    first = multihead_neighbor_batch(2, 5, 7, torch.Generator().manual_seed(3))
    second = multihead_neighbor_batch(2, 5, 7, torch.Generator().manual_seed(3))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_models_differ_only_in_heads(num_heads):
    model = NeighborReader(16, 16, 32, num_heads)
    assert model.attention.num_heads == num_heads
    assert model.attention.head_dim * num_heads == 32
    one_head = NeighborReader(16, 16, 32, 1)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in one_head.parameters())
    logits = model(torch.randint(16, (3, 16)))
    assert logits.shape == (3, 16, 2, 16)
    assert model.attention.attention_weights.shape == (3, num_heads, 16, 16)


def test_a_hand_built_two_head_model_solves_the_task():
    # The task is solvable by two heads: one that attends to i - 1 and one to i + 1. Build it
    # by hand (one-hot positions and tokens) to show the experiment asks something possible.
    vocab, n = 4, 6
    model = NeighborReader(vocab, n, 2 * (n + vocab), 2).double()
    half = n + vocab  # each head: n position features, then vocab token features
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embedding.weight[:, n : n + vocab] = torch.eye(vocab)
        model.embedding.weight[:, half + n :] = torch.eye(vocab)
        model.positions.P[0, :, :n] = torch.eye(n)
        model.positions.P[0, :, half : half + n] = torch.eye(n)
        shift = torch.eye(n).roll(-1, dims=0)  # column i has its 1 in row i - 1
        scale = 50.0
        model.attention.W_q.weight[:n, :n] = scale * shift
        model.attention.W_q.weight[half : half + n, half : half + n] = scale * shift.T
        model.attention.W_k.weight[:n, :n] = torch.eye(n)
        model.attention.W_k.weight[half : half + n, half : half + n] = torch.eye(n)
        model.attention.W_v.weight[:] = torch.eye(2 * half)
        model.attention.W_o.weight[:] = torch.eye(2 * half)
        model.read_out.weight[:vocab, n:half] = torch.eye(vocab)
        model.read_out.weight[vocab:, half + n :] = torch.eye(vocab)
    tokens, targets = multihead_neighbor_batch(50, n, vocab, torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(tokens).argmax(-1), targets)


def test_trained_model_rejects_an_untrained_head_count():
    missing = max(MULTIHEAD_CONFIG.head_counts) * 2
    with pytest.raises(ValueError, match=f"num_heads must be one of .* got {missing}"):
        multihead_trained_model(missing)


def test_answer_ranks_see_a_model_that_mixes_up_the_two_sides():
    # A read-out that knows both neighbours but not their sides: both answers give 0.6 to the
    # token before and 0.4 to the token after. The "after" answer is then wrong at first
    # guess (unless the tokens are equal), right in the top two, and all its mass is on them.
    _, targets = multihead_neighbor_batch(40, 8, 5, torch.Generator().manual_seed(1))
    probabilities = torch.zeros(40, 8, 2, 5)
    before, after = targets[..., 0], targets[..., 1]
    for answer in (0, 1):
        probabilities[..., answer, :].scatter_add_(
            -1, before[..., None], torch.full((40, 8, 1), 0.6)
        )
        probabilities[..., answer, :].scatter_add_(
            -1, after[..., None], torch.full((40, 8, 1), 0.4)
        )
    logits = (probabilities + 1e-9).log()
    ranks = multihead_answer_ranks(logits, targets)
    same = (before == after).float().mean().item()
    assert ranks["top1"] == pytest.approx([1.0, same])
    assert ranks["top2"] == pytest.approx([1.0, 1.0])
    assert ranks["neighbour_mass"] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert ranks["wrong_is_other"] == pytest.approx([0.0, 1.0])


def test_answer_ranks_count_mass_away_from_the_neighbours():
    _, targets = multihead_neighbor_batch(10, 6, 4, torch.Generator().manual_seed(2))
    uniform = torch.zeros(10, 6, 2, 4)  # equal logits: 1/4 on every token
    ranks = multihead_answer_ranks(uniform, targets)
    distinct = (targets[..., 0] != targets[..., 1]).float().mean().item()
    expected = 0.25 * (1 + distinct)  # one or two tokens out of four
    assert ranks["neighbour_mass"] == pytest.approx([expected, expected])


def test_answer_ranks_reject_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits must be .* got \(2, 3, 2, 5\) and \(2, 4, 2\)"):
        multihead_answer_ranks(torch.zeros(2, 3, 2, 5), torch.zeros(2, 4, 2, dtype=torch.long))
