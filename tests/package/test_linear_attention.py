import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.linear_attention import (
    causal_linear_attention_step,
    causal_linear_chunks,
    elu_feature_map,
    linear_attention,
)

F64 = torch.float64


def explicit_linear_attention(queries, keys, values, causal=False, feature_map=elu_feature_map):
    """The O(n^2) formula: weights phi(q_i)^T phi(k_j), normalized over the visible keys."""
    weights = feature_map(queries) @ feature_map(keys).transpose(-2, -1)  # (..., n, m)
    if causal:
        n, m = weights.shape[-2:]
        weights = weights * torch.ones(n, m, dtype=torch.bool).tril()
    return (weights @ values) / (weights.sum(dim=-1, keepdim=True) + 1e-6)


def qkv(*leading, n=9, m=None, d=4, d_v=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    return (
        torch.randn(*leading, n, d, dtype=F64, generator=generator),
        torch.randn(*leading, m, d, dtype=F64, generator=generator),
        torch.randn(*leading, m, d_v, dtype=F64, generator=generator),
    )


# ---------------------------------------------------------------- the feature map


def test_elu_feature_map_is_positive_and_elu_plus_one():
    x = torch.linspace(-30, 5, 200, dtype=F64)
    phi = elu_feature_map(x)
    assert bool((phi > 0).all())
    torch.testing.assert_close(phi, torch.where(x > 0, x + 1, torch.exp(x)), rtol=0, atol=1e-15)


# ---------------------------------------------------------------- against the explicit formula


@pytest.mark.parametrize("leading", [(), (2,), (2, 3)])
def test_non_causal_equals_explicit_formula(leading):
    queries, keys, values = qkv(*leading, n=7, m=11)
    output = linear_attention(queries, keys, values)
    assert output.shape == (*leading, 7, 3)
    expected = explicit_linear_attention(queries, keys, values)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 9, 64])
@pytest.mark.parametrize("n", [1, 8, 9, 17])
def test_causal_equals_explicit_formula_for_every_chunk_size(n, chunk_size):
    queries, keys, values = qkv(2, 3, n=n)
    output = linear_attention(queries, keys, values, causal=True, chunk_size=chunk_size)
    expected = explicit_linear_attention(queries, keys, values, causal=True)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)


def test_causal_output_does_not_see_the_future():
    queries, keys, values = qkv(1, n=12)
    output = linear_attention(queries, keys, values, causal=True, chunk_size=4)
    changed = values.clone()
    changed[:, 7:] += 10.0
    keys_changed = keys.clone()
    keys_changed[:, 7:] -= 3.0
    later = linear_attention(queries, keys_changed, changed, causal=True, chunk_size=4)
    torch.testing.assert_close(later[:, :7], output[:, :7], rtol=0, atol=1e-12)
    assert not torch.allclose(later[:, 7:], output[:, 7:])


def test_other_feature_maps_are_used():
    queries, keys, values = qkv(2, n=6)

    def feature_map(x):
        return F.softplus(x) + 0.1

    for causal in (False, True):
        output = linear_attention(queries, keys, values, causal, feature_map=feature_map)
        expected = explicit_linear_attention(queries, keys, values, causal, feature_map)
        torch.testing.assert_close(output, expected, rtol=0, atol=1e-12)
        assert not torch.allclose(output, linear_attention(queries, keys, values, causal))


def test_weights_are_a_convex_combination():
    """Constant values come out unchanged: the implicit weights of every query sum to 1."""
    queries, keys, _ = qkv(2, n=10)
    values = torch.full((2, 10, 3), 2.5, dtype=F64)
    for causal in (False, True):
        output = linear_attention(queries, keys, values, causal, eps=0.0)
        torch.testing.assert_close(output, torch.full_like(output, 2.5), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- the recurrent form


@given(n=st.integers(1, 20), chunk_size=st.integers(1, 8), seed=st.integers(0, 1000))
@settings(max_examples=30, deadline=None)
def test_recurrent_steps_equal_the_parallel_causal_form(n, chunk_size, seed):
    queries, keys, values = qkv(2, n=n, seed=seed)
    parallel = linear_attention(queries, keys, values, causal=True, chunk_size=chunk_size)
    state, outputs = None, []
    for i in range(n):
        output, state = causal_linear_attention_step(queries[:, i], keys[:, i], values[:, i], state)
        outputs.append(output)
    torch.testing.assert_close(torch.stack(outputs, dim=1), parallel, rtol=0, atol=1e-12)
    # the state is the running sums over all positions: sum_j phi(k_j) v_j^T and sum_j phi(k_j)
    phi_k = elu_feature_map(keys)
    torch.testing.assert_close(state[0], phi_k.transpose(-2, -1) @ values, rtol=0, atol=1e-12)
    torch.testing.assert_close(state[1], phi_k.sum(dim=-2), rtol=0, atol=1e-12)


def test_state_has_constant_size():
    queries, keys, values = qkv(n=50, d=4, d_v=3)
    state = None
    for i in range(50):
        _, state = causal_linear_attention_step(queries[i], keys[i], values[i], state)
        assert state[0].shape == (4, 3) and state[1].shape == (4,)


def test_chunks_return_numerator_and_normalizer():
    queries, keys, values = qkv(3, n=10)
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    numerator, denominator = causal_linear_chunks(phi_q, phi_k, values, chunk_size=4)
    weights = (phi_q @ phi_k.transpose(-2, -1)).tril()  # (3, 10, 10)
    torch.testing.assert_close(numerator, weights @ values, rtol=0, atol=1e-12)
    torch.testing.assert_close(denominator, weights.sum(-1, keepdim=True), rtol=0, atol=1e-12)


def test_gradients_match_the_explicit_formula():
    queries, keys, values = (x.requires_grad_() for x in qkv(2, n=7))
    torch.autograd.gradcheck(
        lambda q, k, v: linear_attention(q, k, v, causal=True, chunk_size=3),
        (queries, keys, values),
    )
    output = linear_attention(queries, keys, values, causal=True, chunk_size=3)
    grads = torch.autograd.grad(output.square().sum(), (queries, keys, values))
    expected = explicit_linear_attention(queries, keys, values, causal=True)
    expected_grads = torch.autograd.grad(expected.square().sum(), (queries, keys, values))
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=0, atol=1e-10)


def test_float32_close_to_float64():
    queries, keys, values = qkv(2, 4, n=300, d=16, d_v=16)
    expected = linear_attention(queries, keys, values, causal=True)
    output = linear_attention(queries.float(), keys.float(), values.float(), causal=True)
    assert output.dtype == torch.float32
    torch.testing.assert_close(output.double(), expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- bad input


def test_bad_input():
    queries, keys, values = qkv(2, n=5, m=6)
    with pytest.raises(ValueError, match=r"causal linear attention needs as many queries as keys"):
        linear_attention(queries, keys, values, causal=True)
    with pytest.raises(ValueError, match=r"same size d.*\(2, 6, 5\)"):
        linear_attention(queries, torch.randn(2, 6, 5, dtype=F64), values)
    with pytest.raises(ValueError, match=r"keys and values must have the same length"):
        linear_attention(queries, keys, values[:, :4])
    with pytest.raises(ValueError, match=r"leading"):
        linear_attention(queries, keys[:1], values[:1])
    with pytest.raises(ValueError, match=r"same number of dims"):
        linear_attention(queries[0], keys, values)
    with pytest.raises(ValueError, match=r"chunk_size must be at least 1, got 0"):
        linear_attention(queries, queries, queries, causal=True, chunk_size=0)
    q, k, v = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 3)
    with pytest.raises(ValueError, match=r"query and key must have the same shape"):
        causal_linear_attention_step(q, torch.randn(2, 5), v)
    with pytest.raises(ValueError, match=r"state must have shapes.*\(2, 4, 3\)"):
        causal_linear_attention_step(q, k, v, (torch.zeros(2, 4, 4), torch.zeros(2, 4)))
