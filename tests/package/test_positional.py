import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)


def formula(pos, j, num_hiddens):
    """Vaswani et al. (2017), section 3.5, one entry at a time with Python's math module."""
    i = j // 2
    angle = pos / 10000 ** (2 * i / num_hiddens)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("num_hiddens", [1, 2, 7, 32])
def test_table_matches_formula(num_hiddens):
    table = sinusoidal_table(1000, num_hiddens, dtype=torch.float64)
    assert table.shape == (1000, num_hiddens)
    for pos in [0, 1, 2, 17, 500, 999]:
        for j in range(num_hiddens):
            assert table[pos, j].item() == pytest.approx(formula(pos, j, num_hiddens), abs=1e-12)


def test_known_values():
    table = sinusoidal_table(3, 4, dtype=torch.float64)
    # Position 0: sin 0 = 0 and cos 0 = 1 in every pair.
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # Position 1, first pair: one radian; second pair: 1 / 10000^(2/4) = 0.01 radian.
    expected = [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]
    torch.testing.assert_close(table[1], torch.tensor(expected, dtype=torch.float64))


def test_float32_table_is_accurate_at_late_positions():
    table = sinusoidal_table(1000, 16)
    assert table.dtype == torch.float32
    exact = sinusoidal_table(1000, 16, dtype=torch.float64)
    assert (table.double() - exact).abs().max() < 1e-6


@settings(max_examples=30, deadline=None)
@given(pos=st.integers(0, 400), k=st.integers(0, 400), i=st.integers(0, 7))
def test_shift_by_k_is_a_rotation(pos, k, i):
    # The encoding of pos + k is a fixed linear map (a rotation by k * w_i) of that of pos.
    table = sinusoidal_table(801, 16, dtype=torch.float64)
    w = 1 / 10000 ** (2 * i / 16)
    rotation = torch.tensor(
        [[math.cos(k * w), math.sin(k * w)], [-math.sin(k * w), math.cos(k * w)]],
        dtype=torch.float64,
    )
    pair = table[pos, 2 * i : 2 * i + 2]
    torch.testing.assert_close(table[pos + k, 2 * i : 2 * i + 2], rotation @ pair)


def test_positional_encoding_adds_table():
    encoding = PositionalEncoding(num_hiddens=6, dropout=0.0, max_len=50)
    assert encoding.P.shape == (1, 50, 6)
    X = torch.randn(3, 10, 6)
    torch.testing.assert_close(encoding(X), X + sinusoidal_table(10, 6))
    torch.testing.assert_close(encoding(X, offset=40), X + sinusoidal_table(50, 6)[40:])
    assert "P" not in encoding.state_dict()  # a function of its arguments, not a weight


def test_positional_encoding_dropout_and_dtype():
    encoding = PositionalEncoding(8, dropout=0.5)
    X = torch.zeros(2, 5, 8)
    encoding.eval()
    torch.testing.assert_close(encoding(X), sinusoidal_table(5, 8).expand(2, 5, 8))
    encoding.train()
    torch.manual_seed(0)
    output = encoding(torch.ones(2, 5, 8))
    assert set(output.flatten().tolist()) - {0.0} and (output == 0).any()
    assert encoding.eval()(X.half()).dtype == torch.float16


def test_learned_embedding_shapes_and_gradient():
    torch.manual_seed(0)
    embedding = LearnedPositionalEmbedding(num_hiddens=8, dropout=0.0, max_len=20)
    assert isinstance(embedding.P, torch.nn.Parameter) and embedding.P.shape == (1, 20, 8)
    assert "P" in embedding.state_dict()
    assert embedding.P.std().item() == pytest.approx(0.02, rel=0.3)
    X = torch.randn(4, 7, 8)
    output = embedding(X)
    assert output.shape == (4, 7, 8)
    torch.testing.assert_close(output, X + embedding.P[:, :7])
    output.sum().backward()
    assert torch.all(embedding.P.grad[0, :7] == 4) and torch.all(embedding.P.grad[0, 7:] == 0)
    torch.testing.assert_close(embedding(X, offset=13), X + embedding.P[:, 13:])


@pytest.mark.parametrize("module", [PositionalEncoding, LearnedPositionalEmbedding])
def test_bad_inputs(module):
    layer = module(8, 0.0, max_len=10)
    with pytest.raises(ValueError, match=r"exceed max_len=10"):
        layer(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"offset=5, num_steps=6.*exceed max_len=10"):
        layer(torch.zeros(1, 6, 8), offset=5)
    with pytest.raises(ValueError, match=r"X must have shape \(batch, num_steps, num_hiddens=8\)"):
        layer(torch.zeros(1, 5, 7))
    with pytest.raises(ValueError, match=r"X must have shape.*got \(5, 8\)"):
        layer(torch.zeros(5, 8))


def test_dot_products_depend_only_on_the_offset():
    # p_i . p_(i + delta) = sum_j cos(delta * w_j), whatever i (the self-attention chapter).
    num_hiddens = 16
    table = sinusoidal_table(300, num_hiddens, dtype=torch.float64)
    w = 1 / 10000 ** (torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)
    for delta in (0, 1, 9, 150):
        dots = (table[: 300 - delta] * table[delta:]).sum(-1)  # one per position i
        expected = torch.cos(delta * w).sum().expand_as(dots)
        torch.testing.assert_close(dots, expected, rtol=0, atol=1e-12)
