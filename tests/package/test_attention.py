import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.attention import AdditiveAttention, DotProductAttention
from attention_book.masking import causal_mask, valid_lens_to_mask

F64 = torch.float64


def randn(*shape, dtype=F64, requires_grad=False):
    return torch.randn(*shape, dtype=dtype, requires_grad=requires_grad)


def assert_equal_1e12(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- shapes


def test_additive_shapes():
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1)
    attention.eval()
    queries, keys, values = (
        torch.normal(0, 1, (2, 1, 20)),
        torch.ones(2, 10, 2),
        torch.ones(2, 10, 4),
    )
    output = attention(queries, keys, values, torch.tensor([2, 6]))
    assert output.shape == (2, 1, 4)
    assert attention.attention_weights.shape == (2, 1, 10)


@pytest.mark.parametrize("heads", [(), (3,)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_dot_product_shapes(heads, need_weights):
    attention = DotProductAttention(dropout=0.5, need_weights=need_weights)
    attention.eval()
    queries, keys, values = randn(2, *heads, 4, 8), randn(2, *heads, 6, 8), randn(2, *heads, 6, 5)
    output = attention(queries, keys, values, torch.tensor([2, 6]))
    assert output.shape == (2, *heads, 4, 5)
    if need_weights:
        assert attention.attention_weights.shape == (2, *heads, 4, 6)
    else:
        assert attention.attention_weights is None


def test_need_weights_can_be_chosen_per_call():
    attention = DotProductAttention(0.0)
    x = randn(1, 3, 4)
    attention(x, x, x, need_weights=False)
    assert attention.attention_weights is None
    attention(x, x, x)
    assert attention.attention_weights.shape == (1, 3, 3)


def test_weights_kept_before_dropout():
    torch.manual_seed(0)
    attention = DotProductAttention(dropout=0.5)  # training mode: dropout active
    x = randn(2, 5, 4)
    attention(x, x, x, torch.tensor([3, 5]))
    torch.testing.assert_close(attention.attention_weights.sum(-1), torch.ones(2, 5, dtype=F64))


# ---------------------------------------------------------------- equivalence with SDPA


def sdpa_cases():
    """(name, kwargs for our module, kwargs for SDPA) with shapes (2, [3,] 4, 5) / 6 keys."""
    valid_lens = torch.tensor([2, 6])
    per_query = torch.tensor([[1, 2, 3, 4], [6, 5, 4, 3]])
    torch.manual_seed(1)
    bool_mask = torch.rand(2, 4, 6) > 0.5
    bool_mask[..., 0] = True  # no fully masked rows: SDPA is the reference
    return [
        ("no mask", {}, {}),
        ("valid_lens", {"valid_lens": valid_lens}, {"mask": valid_lens_to_mask(valid_lens, 4, 6)}),
        ("per query", {"valid_lens": per_query}, {"mask": valid_lens_to_mask(per_query, 4, 6)}),
        ("bool mask", {"attn_mask": bool_mask}, {"mask": bool_mask}),
        ("causal", {"is_causal": True}, {"is_causal": True}),
        (
            "causal and valid_lens",
            {"is_causal": True, "valid_lens": valid_lens},
            {"mask": valid_lens_to_mask(valid_lens, 4, 6) & causal_mask(4, 6)},
        ),
    ]


@pytest.mark.parametrize("name,ours,theirs", sdpa_cases(), ids=[c[0] for c in sdpa_cases()])
@pytest.mark.parametrize("heads", [(), (3,)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_dot_product_equals_sdpa(name, ours, theirs, heads, need_weights):
    torch.manual_seed(2)
    queries = randn(2, *heads, 4, 5, requires_grad=True)
    keys = randn(2, *heads, 6, 5, requires_grad=True)
    values = randn(2, *heads, 6, 7, requires_grad=True)
    attention = DotProductAttention(dropout=0.0, need_weights=need_weights)
    if heads and "attn_mask" in ours:
        ours = {**ours, "attn_mask": ours["attn_mask"][:, None]}  # broadcast over heads
    output = attention(queries, keys, values, **ours)
    mask = theirs.get("mask")
    if mask is not None and heads and mask.dim() == 3:
        mask = mask[:, None]  # (batch, 1, num_queries, num_keys): the same for every head
    expected = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask, is_causal=theirs.get("is_causal", False)
    )
    assert_equal_1e12(output, expected)
    grad_output = torch.randn_like(output)
    ours_grads = torch.autograd.grad(output, (queries, keys, values), grad_output)
    theirs_grads = torch.autograd.grad(expected, (queries, keys, values), grad_output)
    for actual, wanted in zip(ours_grads, theirs_grads, strict=True):
        assert_equal_1e12(actual, wanted)


@settings(max_examples=30, deadline=None)
@given(
    batch_size=st.integers(1, 3),
    num_heads=st.sampled_from([None, 1, 2]),
    num_queries=st.integers(1, 6),
    num_keys=st.integers(1, 6),
    d=st.integers(1, 6),
    value_dim=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_property_both_paths_equal_sdpa(
    batch_size, num_heads, num_queries, num_keys, d, value_dim, seed
):
    gen = torch.Generator().manual_seed(seed)
    heads = () if num_heads is None else (num_heads,)
    queries = torch.randn(batch_size, *heads, num_queries, d, generator=gen, dtype=F64)
    keys = torch.randn(batch_size, *heads, num_keys, d, generator=gen, dtype=F64)
    values = torch.randn(batch_size, *heads, num_keys, value_dim, generator=gen, dtype=F64)
    valid_lens = torch.randint(1, num_keys + 1, (batch_size,), generator=gen)
    attn_mask = torch.rand(num_queries, num_keys, generator=gen) > 0.5
    attn_mask[:, 0] = True
    mask = valid_lens_to_mask(valid_lens, num_queries, num_keys) & attn_mask
    if heads:
        mask = mask[:, None]
    expected = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    attention = DotProductAttention(0.0)
    for need_weights in (True, False):
        output = attention(queries, keys, values, valid_lens, attn_mask, need_weights=need_weights)
        assert_equal_1e12(output, expected)


# ---------------------------------------------------------------- fully masked rows


@pytest.mark.parametrize("dtype", [F64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_give_zero_output_and_finite_grads(dtype, need_weights):
    torch.manual_seed(3)
    queries = randn(2, 2, 3, 4, dtype=dtype, requires_grad=True)
    keys = randn(2, 2, 5, 4, dtype=dtype, requires_grad=True)
    values = randn(2, 2, 5, 6, dtype=dtype, requires_grad=True)
    attention = DotProductAttention(0.0, need_weights=need_weights)
    # Query 0 of every sequence may not attend anything; sequence 1 has no valid key at all.
    attn_mask = torch.tensor([[False] * 5, [True] * 5, [True] * 5])
    output = attention(queries, keys, values, torch.tensor([5, 0]), attn_mask)
    assert output.dtype == dtype
    assert torch.all(output[:, :, 0] == 0) and torch.all(output[1] == 0)
    assert torch.isfinite(output).all()
    output.float().square().sum().backward()
    for tensor in (queries, keys, values):
        assert torch.isfinite(tensor.grad).all()
    assert torch.all(queries.grad[1] == 0) and torch.all(queries.grad[:, :, 0] == 0)


def test_additive_fully_masked_rows():
    attention = AdditiveAttention(3, 4, 5, 0.0)
    queries = torch.randn(2, 3, 4, requires_grad=True)
    output = attention(queries, torch.randn(2, 6, 3), torch.randn(2, 6, 2), torch.tensor([0, 4]))
    assert torch.all(output[0] == 0) and torch.isfinite(output).all()
    output.sum().backward()
    assert torch.isfinite(queries.grad).all()


# ---------------------------------------------------------------- additive attention


def test_additive_matches_formula_computed_with_loops():
    torch.manual_seed(4)
    attention = AdditiveAttention(key_size=3, query_size=4, num_hiddens=5, dropout=0.0).double()
    queries, keys, values = randn(2, 3, 4), randn(2, 6, 3), randn(2, 6, 2)
    valid_lens = torch.tensor([4, 6])
    output = attention(queries, keys, values, valid_lens)
    W_q, W_k = attention.W_q.weight, attention.W_k.weight
    w_v = attention.w_v.weight[0]
    expected = torch.zeros(2, 3, 2, dtype=F64)
    for b in range(2):
        for i in range(3):
            length = int(valid_lens[b])
            scores = torch.stack(
                [w_v @ torch.tanh(W_q @ queries[b, i] + W_k @ keys[b, j]) for j in range(length)]
            )
            exp = torch.exp(scores - scores.max())
            weights = exp / exp.sum()
            expected[b, i] = weights @ values[b, :length]
            assert_equal_1e12(attention.attention_weights[b, i, :length], weights)
            assert torch.all(attention.attention_weights[b, i, length:] == 0)
    assert_equal_1e12(output, expected)


def test_dot_product_matches_formula():
    queries, keys, values = randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 2)
    attention = DotProductAttention(0.0)
    output = attention(queries, keys, values)
    weights = torch.softmax(torch.einsum("bqd,bkd->bqk", queries, keys) / math.sqrt(4), -1)
    assert_equal_1e12(attention.attention_weights, weights)
    assert_equal_1e12(output, torch.einsum("bqk,bkv->bqv", weights, values))


# ---------------------------------------------------------------- gradcheck


def test_gradcheck_additive():
    torch.manual_seed(5)
    attention = AdditiveAttention(3, 4, 5, 0.0).double()
    inputs = (randn(2, 3, 4, requires_grad=True), randn(2, 4, 3, requires_grad=True))
    values = randn(2, 4, 2, requires_grad=True)
    valid_lens = torch.tensor([[1, 2, 0], [4, 3, 2]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, valid_lens), (*inputs, values)
    )
    # and with respect to the parameters W_q, W_k and w_v
    names = [name for name, _ in attention.named_parameters()]
    detached = (inputs[0].detach(), inputs[1].detach(), values.detach())

    def by_params(*weights):
        return torch.func.functional_call(
            attention, dict(zip(names, weights, strict=True)), detached
        )

    weights = tuple(p.detach().clone().requires_grad_() for p in attention.parameters())
    assert torch.autograd.gradcheck(by_params, weights)


@pytest.mark.parametrize("need_weights", [True, False])
def test_gradcheck_dot_product(need_weights):
    torch.manual_seed(6)
    attention = DotProductAttention(0.0, need_weights=need_weights)
    inputs = (
        randn(2, 2, 3, 4, requires_grad=True),
        randn(2, 2, 5, 4, requires_grad=True),
        randn(2, 2, 5, 3, requires_grad=True),
    )
    attn_mask = torch.rand(3, 5) > 0.3
    attn_mask[1] = False  # a fully masked row
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, torch.tensor([2, 5]), attn_mask, is_causal=True), inputs
    )


# ---------------------------------------------------------------- bad input


def test_dot_product_bad_inputs():
    attention = DotProductAttention(0.0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(
        ValueError, match=r"queries and keys must have the same size d.*\(2, 3, 4\).*\(2, 5, 8\)"
    ):
        attention(q, torch.randn(2, 5, 8), v)
    with pytest.raises(
        ValueError, match=r"keys and values must have the same length.*\(2, 5, 4\).*\(2, 7, 6\)"
    ):
        attention(q, k, torch.randn(2, 7, 6))
    with pytest.raises(ValueError, match=r"queries must have 3 or 4 dims.*got shape \(3, 4\)"):
        attention(torch.randn(3, 4), k, v)
    with pytest.raises(ValueError, match=r"queries must have 3 or 4 dims.*\(1, 2, 2, 3, 4\)"):
        attention(torch.randn(1, 2, 2, 3, 4), k, v)
    with pytest.raises(ValueError, match=r"keys must have 3 dims.*got shape \(1, 2, 5, 4\)"):
        attention(q, torch.randn(1, 2, 5, 4), v)
    with pytest.raises(ValueError, match=r"values must have 3 dims.*got shape \(5, 6\)"):
        attention(q, k, torch.randn(5, 6))
    with pytest.raises(ValueError, match=r"leading.*\(2, 3, 4\), \(3, 5, 4\)"):
        attention(q, torch.randn(3, 5, 4), torch.randn(3, 5, 6))
    with pytest.raises(ValueError, match=r"valid_lens must have shape.*got \(3,\)"):
        attention(q, k, v, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"valid_lens must be non-negative"):
        attention(q, k, v, torch.tensor([1, -2]), need_weights=False)
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=r"attn_mask must be a bool tensor.*float32"):
            attention(
                q, k, v, attn_mask=torch.ones(3, 5), is_causal=True, need_weights=need_weights
            )
        with pytest.raises(ValueError, match=r"attn_mask of shape \(4, 5\) does not broadcast"):
            attention(
                q, k, v, attn_mask=torch.ones(4, 5, dtype=torch.bool), need_weights=need_weights
            )


def test_additive_bad_inputs():
    attention = AdditiveAttention(key_size=3, query_size=4, num_hiddens=5, dropout=0.0)
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 3), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"queries must have last dim query_size=4.*\(2, 3, 3\)"):
        attention(torch.randn(2, 3, 3), k, v)
    with pytest.raises(ValueError, match=r"keys must have last dim key_size=3.*\(2, 5, 4\)"):
        attention(q, torch.randn(2, 5, 4), v)
    with pytest.raises(ValueError, match=r"keys and values must have the same length"):
        attention(q, k, torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match=r"queries must have 3 dims.*\(3, 4\)"):
        attention(torch.randn(3, 4), k, v)
    with pytest.raises(ValueError, match=r"valid_lens must be an integer tensor"):
        attention(q, k, v, torch.tensor([1.0, 2.0]))


def test_additive_with_projected_keys_equals_plain_call():
    torch.manual_seed(0)
    attention = AdditiveAttention(key_size=3, query_size=5, num_hiddens=7).double()
    queries = torch.randn(2, 4, 5, dtype=torch.float64)
    keys = torch.randn(2, 6, 3, dtype=torch.float64)
    values = torch.randn(2, 6, 2, dtype=torch.float64)
    valid_lens = torch.tensor([2, 6])
    expected = attention(queries, keys, values, valid_lens)
    expected_weights = attention.attention_weights
    projected = attention.project_keys(keys)
    assert projected.shape == (2, 6, 7)
    got = attention(queries, projected, values, valid_lens, keys_projected=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(attention.attention_weights, expected_weights, rtol=0, atol=1e-12)


def test_additive_projected_keys_must_have_num_hiddens_features():
    attention = AdditiveAttention(3, 5, 7)
    queries, keys, values = torch.randn(2, 4, 5), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    with pytest.raises(ValueError, match=r"keys must have last dim num_hiddens=7.*\(2, 6, 3\)"):
        attention(queries, keys, values, keys_projected=True)


def test_options_beyond_the_seed_signature_are_keyword_only():
    DotProductAttention(0.1)  # the seed's call
    with pytest.raises(TypeError):
        DotProductAttention(0.1, False)
