import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention_book.masking import causal_mask, valid_lens_to_mask
from attention_book.multihead import MultiHeadAttention, merge_heads, split_heads

F64 = torch.float64


def assert_equal_1e12(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)


def copied_pair(num_hiddens, num_heads, bias, key_size=None, value_size=None, seed=0):
    """Our module and nn.MultiheadAttention with the same weights, float64, dropout 0."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(
        num_hiddens, num_heads, bias=bias, batch_first=True, kdim=key_size, vdim=value_size
    ).double()
    ours = MultiHeadAttention(
        num_hiddens, num_heads, 0.0, bias=bias, key_size=key_size, value_size=value_size
    ).double()
    with torch.no_grad():
        if theirs.in_proj_weight is not None:
            W_q, W_k, W_v = theirs.in_proj_weight.chunk(3)
        else:
            W_q, W_k, W_v = theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight
        for layer, weight in ((ours.W_q, W_q), (ours.W_k, W_k), (ours.W_v, W_v)):
            layer.weight.copy_(weight)
        ours.W_o.weight.copy_(theirs.out_proj.weight)
        if bias:
            for layer, b in zip(
                (ours.W_q, ours.W_k, ours.W_v), theirs.in_proj_bias.chunk(3), strict=True
            ):
                layer.bias.copy_(b)
            ours.W_o.bias.copy_(theirs.out_proj.bias)
    return ours, theirs


# ---------------------------------------------------------------- split and merge heads


def test_split_heads_slices_features_and_merge_inverts():
    X = torch.randn(2, 5, 12)
    heads = split_heads(X, 3)
    assert heads.shape == (2, 3, 5, 4)
    for i in range(3):
        torch.testing.assert_close(heads[:, i], X[..., 4 * i : 4 * (i + 1)], rtol=0, atol=0)
    torch.testing.assert_close(merge_heads(heads), X, rtol=0, atol=0)
    torch.testing.assert_close(merge_heads(heads.contiguous()), X, rtol=0, atol=0)


def test_split_and_merge_errors():
    with pytest.raises(ValueError, match=r"num_hiddens=10.*\(2, 5, 10\).*divisible by num_heads=3"):
        split_heads(torch.randn(2, 5, 10), 3)
    with pytest.raises(ValueError, match=r"X must have 3 dims.*\(5, 10\)"):
        split_heads(torch.randn(5, 10), 2)
    with pytest.raises(ValueError, match=r"X must have 4 dims.*\(2, 5, 10\)"):
        merge_heads(torch.randn(2, 5, 10))


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("need_weights", [True, False])
def test_shapes(need_weights):
    # The call readers know: MultiHeadAttention(num_hiddens, num_heads, dropout, bias=False).
    attention = MultiHeadAttention(100, 5, 0.5, need_weights=need_weights)
    attention.eval()
    X, Y = torch.ones(2, 4, 100), torch.ones(2, 6, 100)
    output = attention(X, Y, Y, torch.tensor([3, 2]))
    assert output.shape == (2, 4, 100)
    if need_weights:
        assert attention.attention_weights.shape == (2, 5, 4, 6)
    else:
        assert attention.attention_weights is None


def test_input_sizes_can_differ_from_num_hiddens():
    attention = MultiHeadAttention(8, 2, 0.0, query_size=3, key_size=5, value_size=7)
    output = attention(torch.randn(2, 4, 3), torch.randn(2, 6, 5), torch.randn(2, 6, 7))
    assert output.shape == (2, 4, 8)


# ---------------------------------------------------------------- equivalence with nn


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_equals_nn_multihead_attention(bias, masked, need_weights):
    ours, theirs = copied_pair(12, 3, bias)
    queries = torch.randn(2, 4, 12, dtype=F64, requires_grad=True)
    keys = torch.randn(2, 6, 12, dtype=F64, requires_grad=True)
    values = torch.randn(2, 6, 12, dtype=F64, requires_grad=True)
    valid_lens = torch.tensor([3, 6]) if masked else None
    key_padding_mask = ~valid_lens_to_mask(valid_lens, 1, 6)[:, 0] if masked else None

    output = ours(queries, keys, values, valid_lens, need_weights=need_weights)
    expected, averaged = theirs(queries, keys, values, key_padding_mask=key_padding_mask)
    assert_equal_1e12(output, expected)
    if need_weights:
        assert_equal_1e12(ours.attention_weights.mean(dim=1), averaged)
        _, per_head = theirs(
            queries, keys, values, key_padding_mask=key_padding_mask, average_attn_weights=False
        )
        assert_equal_1e12(ours.attention_weights, per_head)

    grad_output = torch.randn_like(output)
    weights = (ours.W_q.weight, ours.W_k.weight, ours.W_v.weight, ours.W_o.weight)
    ours_grads = torch.autograd.grad(output, (queries, keys, values, *weights), grad_output)
    weights = (theirs.in_proj_weight, theirs.out_proj.weight)
    theirs_grads = torch.autograd.grad(expected, (queries, keys, values, *weights), grad_output)
    for actual, wanted in zip(ours_grads[:3], theirs_grads[:3], strict=True):
        assert_equal_1e12(actual, wanted)
    assert_equal_1e12(torch.cat(ours_grads[3:6]), theirs_grads[3])  # in_proj = [W_q; W_k; W_v]
    assert_equal_1e12(ours_grads[6], theirs_grads[4])


@pytest.mark.parametrize("need_weights", [True, False])
def test_equals_nn_with_causal_and_bool_masks(need_weights):
    ours, theirs = copied_pair(8, 2, True, seed=1)
    X = torch.randn(3, 5, 8, dtype=F64)
    causal = causal_mask(5, 5)
    expected, _ = theirs(X, X, X, attn_mask=~causal, is_causal=True)  # nn: True = ignore
    assert_equal_1e12(ours(X, X, X, is_causal=True, need_weights=need_weights), expected)
    assert_equal_1e12(ours(X, X, X, attn_mask=causal, need_weights=need_weights), expected)
    # A 3-D (batch, num_queries, num_keys) mask is shared by all heads.
    per_sequence = torch.rand(3, 5, 5) > 0.5
    per_sequence[..., 0] = True
    nn_mask = (~per_sequence).repeat_interleave(2, dim=0)  # nn wants (batch * num_heads, q, k)
    expected, _ = theirs(X, X, X, attn_mask=nn_mask)
    assert_equal_1e12(ours(X, X, X, attn_mask=per_sequence, need_weights=need_weights), expected)


def test_equals_nn_with_other_key_and_value_sizes():
    ours, theirs = copied_pair(8, 4, True, key_size=5, value_size=3, seed=2)
    queries, keys, values = (
        torch.randn(2, 4, 8, dtype=F64),
        torch.randn(2, 7, 5, dtype=F64),
        torch.randn(2, 7, 3, dtype=F64),
    )
    expected, weights = theirs(queries, keys, values)
    assert_equal_1e12(ours(queries, keys, values), expected)
    assert_equal_1e12(ours.attention_weights.mean(1), weights)


@settings(max_examples=25, deadline=None)
@given(
    batch_size=st.integers(1, 3),
    num_heads=st.integers(1, 4),
    head_dim=st.integers(1, 4),
    num_queries=st.integers(1, 5),
    num_keys=st.integers(1, 5),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_equals_nn(batch_size, num_heads, head_dim, num_queries, num_keys, bias, seed):
    num_hiddens = num_heads * head_dim
    ours, theirs = copied_pair(num_hiddens, num_heads, bias, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    queries = torch.randn(batch_size, num_queries, num_hiddens, generator=gen, dtype=F64)
    keys = torch.randn(batch_size, num_keys, num_hiddens, generator=gen, dtype=F64)
    values = torch.randn(batch_size, num_keys, num_hiddens, generator=gen, dtype=F64)
    valid_lens = torch.randint(1, num_keys + 1, (batch_size,), generator=gen)
    key_padding_mask = ~valid_lens_to_mask(valid_lens, 1, num_keys)[:, 0]
    expected, weights = theirs(
        queries, keys, values, key_padding_mask=key_padding_mask, average_attn_weights=False
    )
    assert_equal_1e12(ours(queries, keys, values, valid_lens), expected)
    assert_equal_1e12(ours.attention_weights, weights)
    assert_equal_1e12(ours(queries, keys, values, valid_lens, need_weights=False), expected)


# ---------------------------------------------------------------- masked rows, gradients


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_sequence_gives_zero_output_without_nan(dtype, need_weights):
    attention = MultiHeadAttention(8, 2, 0.0, bias=False, need_weights=need_weights).to(dtype)
    X = torch.randn(2, 3, 8, dtype=dtype, requires_grad=True)
    output = attention(X, X, X, torch.tensor([0, 3]))
    assert torch.all(output[0] == 0)
    output.float().square().sum().backward()
    assert torch.isfinite(X.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in attention.parameters())


def test_gradcheck():
    torch.manual_seed(3)
    attention = MultiHeadAttention(6, 2, 0.0, bias=True).double()
    X = torch.randn(2, 3, 6, dtype=F64, requires_grad=True)
    Y = torch.randn(2, 4, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: attention(x, y, y, torch.tensor([2, 0])), (X, Y))


# ---------------------------------------------------------------- bad input


def test_num_hiddens_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"num_hiddens=10 must be divisible by num_heads=3"):
        MultiHeadAttention(10, 3, 0.0)


def test_bad_inputs():
    attention = MultiHeadAttention(8, 2, 0.0, key_size=5)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 4, 5), torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match=r"keys must have last dim key_size=5.*\(2, 4, 8\)"):
        attention(q, torch.randn(2, 4, 8), v)
    with pytest.raises(ValueError, match=r"queries must have last dim query_size=8.*\(2, 3, 5\)"):
        attention(torch.randn(2, 3, 5), k, v)
    with pytest.raises(ValueError, match=r"keys and values must have the same length"):
        attention(q, k, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match=r"queries must have 3 dims.*\(3, 8\)"):
        attention(torch.randn(3, 8), k, v)
    with pytest.raises(ValueError, match=r"values must have 3 dims.*\(1, 2, 4, 8\)"):
        attention(q, k, torch.randn(1, 2, 4, 8))
    with pytest.raises(ValueError, match=r"valid_lens must have shape.*got \(2, 4\)"):
        attention(q, k, v, torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"valid_lens must be non-negative"):
        attention(q, k, v, torch.tensor([-1, 2]))


# ---------------------------------------------------------------- grouped-query attention


def gqa_copied_from_mha(num_hiddens, num_heads, bias, seed=0):
    """A MultiHeadAttention and a GroupedQueryAttention with num_kv_heads == num_heads and
    the same weights, float64."""
    from attention_book.multihead import GroupedQueryAttention

    torch.manual_seed(seed)
    mha = MultiHeadAttention(num_hiddens, num_heads, 0.0, bias=bias).double()
    gqa = GroupedQueryAttention(num_hiddens, num_heads, num_heads, 0.0, bias=bias).double()
    gqa.load_state_dict(mha.state_dict())  # same names W_q, W_k, W_v, W_o, same shapes
    return mha, gqa


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_gqa_with_as_many_kv_heads_is_multi_head_attention(bias, need_weights):
    mha, gqa = gqa_copied_from_mha(12, 3, bias)
    queries = torch.randn(2, 4, 12, dtype=F64)
    keys = values = torch.randn(2, 6, 12, dtype=F64)
    valid_lens = torch.tensor([2, 6])
    mask = causal_mask(4, 6, alignment="bottom-right")
    with torch.no_grad():
        for kwargs in ({}, {"valid_lens": valid_lens}, {"attn_mask": mask}, {"is_causal": True}):
            expected = mha(queries, keys, values, need_weights=need_weights, **kwargs)
            output = gqa(queries, keys, values, need_weights=need_weights, **kwargs)
            assert_equal_1e12(output, expected)
            if need_weights:
                assert_equal_1e12(gqa.attention_weights, mha.attention_weights)


def test_gqa_with_as_many_kv_heads_matches_pytorch():
    from attention_book.multihead import GroupedQueryAttention

    ours, theirs = copied_pair(8, 2, bias=True)
    gqa = GroupedQueryAttention(8, 2, 2, 0.0, bias=True).double()
    gqa.load_state_dict(ours.state_dict())
    X = torch.randn(3, 5, 8, dtype=F64)
    with torch.no_grad():
        expected, _ = theirs(X, X, X)
        assert_equal_1e12(gqa(X, X, X), expected)


def multi_query_by_hand(layer, queries, keys, values):
    """Multi-query attention written out: every query head reads the same single key head."""
    head_dim = layer.head_dim
    K = keys @ layer.W_k.weight.T  # (batch, num_keys, head_dim): one key head
    V = values @ layer.W_v.weight.T  # (batch, num_keys, head_dim): one value head
    Q = queries @ layer.W_q.weight.T  # (batch, num_queries, num_heads * head_dim)
    outputs = []
    for h in range(layer.num_heads):
        q = Q[..., h * head_dim : (h + 1) * head_dim]  # (batch, num_queries, head_dim)
        weights = torch.softmax(q @ K.transpose(1, 2) / head_dim**0.5, dim=-1)
        outputs.append(weights @ V)
    return torch.cat(outputs, dim=-1) @ layer.W_o.weight.T  # (batch, num_queries, num_hiddens)


def test_gqa_with_one_kv_head_is_multi_query_attention():
    from attention_book.multihead import GroupedQueryAttention

    torch.manual_seed(1)
    layer = GroupedQueryAttention(12, 4, 1).double()
    assert layer.W_k.weight.shape == (3, 12) and layer.W_v.weight.shape == (3, 12)
    queries = torch.randn(2, 5, 12, dtype=F64)
    keys = values = torch.randn(2, 7, 12, dtype=F64)
    with torch.no_grad():
        expected = multi_query_by_hand(layer, queries, keys, values)
        assert_equal_1e12(layer(queries, keys, values), expected)
        weights = layer.attention_weights  # (batch, num_heads, num_queries, num_keys)
        assert_equal_1e12(layer(queries, keys, values, need_weights=False), expected)
    # every head's weights come from the same keys, but from its own query: they differ
    assert weights.shape == (2, 4, 5, 7)
    assert not torch.allclose(weights[:, 0], weights[:, 1])


def test_gqa_groups_are_consecutive_query_heads():
    """Query head i reads key/value head i // (num_heads // num_kv_heads)."""
    from attention_book.multihead import GroupedQueryAttention

    torch.manual_seed(2)
    layer = GroupedQueryAttention(24, 6, 2).double()
    X = torch.randn(2, 5, 24, dtype=F64)
    with torch.no_grad():
        output = layer(X, X, X)
        Q, K, V = layer.project(X, X, X)
        assert Q.shape == (2, 6, 5, 4) and K.shape == V.shape == (2, 2, 5, 4)
        heads = []
        for i in range(6):
            kv = i // 3
            weights = torch.softmax(Q[:, i] @ K[:, kv].transpose(1, 2) / 2.0, dim=-1)
            heads.append(weights @ V[:, kv])
        expected = layer.W_o(torch.cat(heads, dim=-1))
    assert_equal_1e12(output, expected)


def test_gqa_project_then_attend_is_forward():
    from attention_book.multihead import GroupedQueryAttention

    torch.manual_seed(3)
    layer = GroupedQueryAttention(8, 4, 2, 0.0, bias=True).double()
    queries, keys = torch.randn(2, 3, 8, dtype=F64), torch.randn(2, 5, 8, dtype=F64)
    mask = torch.rand(2, 3, 5) > 0.3  # 3-D: shared by all heads
    with torch.no_grad():
        expected = layer(queries, keys, keys, attn_mask=mask)
        output = layer.attend(*layer.project(queries, keys, keys), attn_mask=mask)
    assert_equal_1e12(output, expected)


def test_gqa_parameters_shrink_with_kv_heads():
    from attention_book.multihead import GroupedQueryAttention

    counts = {
        kv: sum(p.numel() for p in GroupedQueryAttention(64, 8, kv).parameters())
        for kv in (8, 4, 2, 1)
    }
    # W_q and W_o stay 64 x 64; W_k and W_v are 64 x (kv * 8)
    assert counts == {kv: 2 * 64 * 64 + 2 * 64 * kv * 8 for kv in (8, 4, 2, 1)}


def test_gqa_gradients_flow_through_shared_heads():
    from attention_book.multihead import GroupedQueryAttention

    torch.manual_seed(4)
    layer = GroupedQueryAttention(6, 3, 1, 0.0, bias=True).double()
    X = torch.randn(2, 3, 6, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x, x, x, torch.tensor([2, 3])), (X,))


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 3), (6, 4), (4, 0), (4, 8)])
def test_gqa_num_kv_heads_must_divide_num_heads(num_heads, num_kv_heads):
    from attention_book.multihead import GroupedQueryAttention

    with pytest.raises(
        ValueError, match=rf"num_kv_heads={num_kv_heads} must divide num_heads={num_heads}"
    ):
        GroupedQueryAttention(24, num_heads, num_kv_heads)


def test_gqa_bad_inputs():
    from attention_book.multihead import GroupedQueryAttention

    with pytest.raises(ValueError, match=r"num_hiddens=10 must be divisible by num_heads=4"):
        GroupedQueryAttention(10, 4, 2)
    layer = GroupedQueryAttention(8, 4, 2, key_size=5)
    q, k = torch.randn(2, 3, 8), torch.randn(2, 4, 5)
    with pytest.raises(ValueError, match=r"keys must have last dim key_size=5.*\(2, 4, 8\)"):
        layer(q, torch.randn(2, 4, 8), torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"keys and values must have the same length"):
        layer(q, k, torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match=r"queries must have 3 dims.*\(3, 8\)"):
        layer(torch.randn(3, 8), k, torch.randn(2, 4, 8))
