import math

import pytest
import torch

from attention_book.alibi import alibi_bias, alibi_slopes
from attention_book.gpt import CausalSelfAttention

F64 = torch.float64


def test_slopes_are_the_papers_geometric_sequence():
    # Press et al. (2022), section 3: for 8 heads, 1/2^1, ..., 1/2^8.
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    # For h heads: starts at 2^(-8/h), ratio 2^(-8/h), ends at 2^-8.
    for h in (1, 2, 4, 16, 32):
        slopes = alibi_slopes(h)
        assert slopes.shape == (h,) and slopes.dtype == F64
        torch.testing.assert_close(slopes[0], torch.tensor(2.0 ** (-8 / h), dtype=F64))
        torch.testing.assert_close(
            slopes[1:] / slopes[:-1], torch.full((h - 1,), 2 ** (-8 / h), dtype=F64)
        )
        assert slopes[-1].item() == pytest.approx(2.0**-8)


def brute_force_bias(num_queries, num_keys, num_heads):
    """The definition, one entry at a time: -m_h (i - j) for j <= i, -inf for j > i."""
    slopes = [2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)]
    bias = torch.empty(num_heads, num_queries, num_keys, dtype=F64)
    for h in range(num_heads):
        for q in range(num_queries):
            i = num_keys - num_queries + q  # the queries are the last positions
            for j in range(num_keys):
                bias[h, q, j] = -slopes[h] * (i - j) if j <= i else -math.inf
    return bias


@pytest.mark.parametrize("num_queries,num_keys,num_heads", [(7, 7, 4), (1, 9, 8), (3, 10, 2)])
def test_bias_equals_the_definition_entry_by_entry(num_queries, num_keys, num_heads):
    bias = alibi_bias(num_queries, num_keys, num_heads, dtype=F64)
    assert bias.shape == (num_heads, num_queries, num_keys)
    torch.testing.assert_close(bias, brute_force_bias(num_queries, num_keys, num_heads))


def test_bias_depends_on_the_distance_only():
    """The bias of a query and a key depends on i - j alone: the last query of 5 keys sees the
    same row as the last query of 12, shifted."""
    short, long = alibi_bias(1, 5, 4)[:, 0], alibi_bias(1, 12, 4)[:, 0]  # (heads, keys)
    torch.testing.assert_close(long[:, -5:], short)


def test_attention_with_alibi_equals_loops_over_heads_queries_and_keys():
    torch.manual_seed(0)
    layer = CausalSelfAttention(16, 4, 2, rotary=False, alibi=True).double().eval()
    n, batch = 6, 2
    X = torch.randn(batch, n, 16, dtype=F64)
    heads = layer.heads
    with torch.no_grad():
        q = heads.W_q(X).view(batch, n, 4, 4)  # (batch, n, heads, head_dim)
        k = heads.W_k(X).view(batch, n, 2, 4)  # (batch, n, kv_heads, head_dim)
        v = heads.W_v(X).view(batch, n, 2, 4)
        slopes = [2.0 ** (-8.0 * (h + 1) / 4) for h in range(4)]
        out = torch.zeros(batch, n, 4, 4, dtype=F64)
        for b in range(batch):
            for h in range(4):
                g = h // 2  # the key/value head of query head h
                for i in range(n):
                    scores = [
                        (q[b, i, h] @ k[b, j, g]).item() / math.sqrt(4) - slopes[h] * (i - j)
                        for j in range(i + 1)
                    ]
                    weights = torch.softmax(torch.tensor(scores, dtype=F64), dim=0)
                    out[b, i, h] = sum(weights[j] * v[b, j, g] for j in range(i + 1))
        expected = heads.W_o(out.reshape(batch, n, 16))
        torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_bad_input_raises():
    for bad in (0, 3, 6, -4):
        with pytest.raises(ValueError, match=rf"num_heads must be a positive power of two.*{bad}"):
            alibi_slopes(bad)
    with pytest.raises(ValueError, match=r"power of two, got 2.0"):
        alibi_slopes(2.0)
    with pytest.raises(ValueError, match=r"num_queries <= num_keys.*num_queries=5 and num_keys=3"):
        alibi_bias(5, 3, 4)
    with pytest.raises(ValueError, match=r"0 <= num_queries.*num_queries=-1"):
        alibi_bias(-1, 3, 4)
    assert alibi_bias(0, 3, 4).shape == (4, 0, 3)  # no query (an empty step): an empty bias
    with pytest.raises(ValueError, match=r"floating-point dtype, got torch.int64"):
        alibi_bias(2, 3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"power of two, got 6"):
        alibi_bias(2, 3, 6)
    with pytest.raises(ValueError, match=r"alibi needs softmax attention.*'linear'"):
        CausalSelfAttention(16, 4, 4, alibi=True, attention="linear")
    with pytest.raises(ValueError, match=r"power of two, got 3"):
        CausalSelfAttention(12, 3, 3, alibi=True)
