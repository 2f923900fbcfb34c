import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.masking import causal_mask, masked_softmax, valid_lens_to_mask

HALF_DTYPES = [torch.float16, torch.bfloat16]
ALL_DTYPES = [torch.float64, torch.float32, *HALF_DTYPES]


def reference_masked_softmax(scores, mask):
    """Independent reference: -inf fill, softmax, then NaN rows (fully masked) set to zero."""
    filled = scores.double().masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(filled, dim=-1), nan=0.0)


def loop_valid_lens_mask(valid_lens, num_queries, num_keys):
    """Build the valid-length mask element by element."""
    batch_size = valid_lens.shape[0]
    mask = torch.zeros(batch_size, num_queries, num_keys, dtype=torch.bool)
    for b in range(batch_size):
        for i in range(num_queries):
            length = valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i]
            for j in range(num_keys):
                mask[b, i, j] = j < length
    return mask


# ---------------------------------------------------------------- shapes and basic facts


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 4, 3, 5), (1, 1, 1)])
def test_shape_and_dtype_preserved(shape):
    scores = torch.randn(shape)
    for dtype in ALL_DTYPES:
        weights = masked_softmax(scores.to(dtype), torch.ones(shape[0], dtype=torch.long))
        assert weights.shape == shape
        assert weights.dtype == dtype


def test_no_mask_is_plain_softmax():
    scores = torch.randn(3, 4, 6, dtype=torch.float64)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, -1), rtol=0, atol=0)


@pytest.mark.parametrize("per_query", [False, True])
def test_masked_keys_exactly_zero_and_rows_sum_to_one(per_query):
    torch.manual_seed(0)
    batch_size, num_queries, num_keys = 4, 5, 7
    scores = torch.randn(batch_size, num_queries, num_keys)
    shape = (batch_size, num_queries) if per_query else (batch_size,)
    valid_lens = torch.randint(1, num_keys + 1, shape)
    weights = masked_softmax(scores, valid_lens)
    mask = loop_valid_lens_mask(valid_lens, num_queries, num_keys)
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[mask] > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch_size, num_queries))
    torch.testing.assert_close(weights.double(), reference_masked_softmax(scores, mask))


def test_valid_lens_broadcast_over_heads():
    torch.manual_seed(1)
    scores = torch.randn(3, 4, 5, 6, dtype=torch.float64)  # (batch, num_heads, q, k)
    valid_lens = torch.tensor([[1, 2, 3, 4, 5], [6, 6, 0, 2, 1], [3, 3, 3, 3, 3]])
    weights = masked_softmax(scores, valid_lens)
    for head in range(4):
        expected = masked_softmax(scores[:, head], valid_lens)
        torch.testing.assert_close(weights[:, head], expected, rtol=0, atol=0)


def test_valid_lens_longer_than_keys_masks_nothing():
    scores = torch.randn(2, 3, 4, dtype=torch.float64)
    weights = masked_softmax(scores, torch.tensor([4, 100]))
    torch.testing.assert_close(weights, torch.softmax(scores, -1))


def test_attn_mask_and_valid_lens_are_combined_with_and():
    torch.manual_seed(2)
    scores = torch.randn(2, 4, 4, dtype=torch.float64)
    valid_lens = torch.tensor([3, 2])
    causal = causal_mask(4, 4)
    weights = masked_softmax(scores, valid_lens, attn_mask=causal)
    mask = loop_valid_lens_mask(valid_lens, 4, 4) & causal
    torch.testing.assert_close(weights, reference_masked_softmax(scores, mask))


def test_bool_mask_matches_sdpa_weights():
    # SDPA's output with the identity as values is its weight matrix.
    torch.manual_seed(3)
    q, k = (
        torch.randn(2, 3, 5, 4, dtype=torch.float64),
        torch.randn(2, 3, 6, 4, dtype=torch.float64),
    )
    mask = torch.rand(2, 1, 5, 6) > 0.4
    mask[..., 0] = True  # SDPA would not be a reference for fully masked rows
    identity = torch.eye(6, dtype=torch.float64).expand(2, 3, 6, 6)
    expected = F.scaled_dot_product_attention(q, k, identity, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / 2.0
    torch.testing.assert_close(masked_softmax(scores, attn_mask=mask), expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- fully masked rows


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fully_masked_rows_are_zero_forward_and_backward(dtype):
    torch.manual_seed(4)
    scores = torch.randn(3, 2, 4, 5, dtype=dtype, requires_grad=True)
    valid_lens = torch.tensor([0, 3, 5])  # the first sequence has no valid key
    attn_mask = torch.ones(4, 5, dtype=torch.bool)
    attn_mask[2] = False  # query 2 of every sequence sees nothing
    weights = masked_softmax(scores, valid_lens, attn_mask)
    assert not torch.isnan(weights).any()
    assert torch.all(weights[0] == 0)  # not uniform (1/5): zero
    assert torch.all(weights[:, :, 2] == 0)
    sums = weights.float().sum(-1)
    torch.testing.assert_close(sums[1:, :, [0, 1, 3]], torch.ones(2, 2, 3), atol=1e-2, rtol=0)
    (weights * torch.randn_like(weights)).sum().backward()
    assert not torch.isnan(scores.grad).any()
    assert torch.all(scores.grad[0] == 0)
    assert torch.all(scores.grad[:, :, 2] == 0)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_is_stable_for_large_scores(dtype):
    # exp() of these would overflow in float16; the softmax must still be finite and correct.
    scores = torch.tensor([[[6.0e4, 5.99e4, -6.0e4, 0.0]]], dtype=dtype)
    weights = masked_softmax(scores, torch.tensor([3]))
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    expected = reference_masked_softmax(scores.double(), torch.tensor([[[1, 1, 1, 0]]]).bool())
    torch.testing.assert_close(weights.double(), expected, atol=1e-2, rtol=0)


def test_gradcheck_with_valid_lens_mask_and_fully_masked_row():
    torch.manual_seed(5)
    scores = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    valid_lens = torch.tensor([[1, 2, 0], [4, 3, 2]])
    attn_mask = torch.tensor([True, False, True, True])
    assert torch.autograd.gradcheck(
        lambda s: masked_softmax(s, valid_lens, attn_mask), (scores,), eps=1e-6, atol=1e-8
    )
    assert torch.autograd.gradgradcheck(lambda s: masked_softmax(s, valid_lens), (scores,))


# ---------------------------------------------------------------- property-based


@settings(max_examples=40, deadline=None)
@given(
    batch_size=st.integers(1, 4),
    num_heads=st.sampled_from([None, 1, 3]),
    num_queries=st.integers(1, 6),
    num_keys=st.integers(1, 6),
    per_query=st.booleans(),
    use_attn_mask=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_matches_reference(
    batch_size, num_heads, num_queries, num_keys, per_query, use_attn_mask, seed
):
    gen = torch.Generator().manual_seed(seed)
    heads = () if num_heads is None else (num_heads,)
    scores = torch.randn(batch_size, *heads, num_queries, num_keys, generator=gen)
    scores = scores.double().requires_grad_()
    len_shape = (batch_size, num_queries) if per_query else (batch_size,)
    valid_lens = torch.randint(0, num_keys + 2, len_shape, generator=gen)
    attn_mask = torch.rand(num_queries, num_keys, generator=gen) > 0.3 if use_attn_mask else None
    weights = masked_softmax(scores, valid_lens, attn_mask)

    mask = loop_valid_lens_mask(valid_lens, num_queries, num_keys)
    if heads:
        mask = mask[:, None]
    if attn_mask is not None:
        mask = mask & attn_mask
    mask = mask.expand_as(scores)
    assert torch.all(weights[~mask] == 0)
    row_has_key = mask.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums, row_has_key.double())
    torch.testing.assert_close(weights, reference_masked_softmax(scores, mask), rtol=0, atol=1e-12)
    weights.sum().backward()
    assert torch.isfinite(scores.grad).all()


# ---------------------------------------------------------------- mask helpers


def test_valid_lens_to_mask_matches_loops():
    valid_lens = torch.tensor([0, 2, 5, 9])
    mask = valid_lens_to_mask(valid_lens, 3, 5)
    assert mask.shape == (4, 3, 5) and mask.dtype == torch.bool
    torch.testing.assert_close(mask, loop_valid_lens_mask(valid_lens, 3, 5))
    per_query = torch.tensor([[1, 2, 3], [0, 0, 4]])
    torch.testing.assert_close(
        valid_lens_to_mask(per_query, 3, 4), loop_valid_lens_mask(per_query, 3, 4)
    )


@pytest.mark.parametrize("num_queries,num_keys", [(4, 4), (3, 6), (6, 3)])
def test_causal_top_left_equals_sdpa_is_causal(num_queries, num_keys):
    torch.manual_seed(6)
    q = torch.randn(2, num_queries, 4, dtype=torch.float64)
    k = torch.randn(2, num_keys, 4, dtype=torch.float64)
    v = torch.randn(2, num_keys, 3, dtype=torch.float64)
    mask = causal_mask(num_queries, num_keys)
    assert mask.shape == (num_queries, num_keys)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    actual = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)
    for i in range(num_queries):
        for j in range(num_keys):
            assert bool(mask[i, j]) == (j <= i)


@pytest.mark.parametrize("num_queries,num_keys", [(4, 4), (3, 6), (6, 3)])
def test_causal_bottom_right_formula_and_pytorch_lower_right(num_queries, num_keys):
    mask = causal_mask(num_queries, num_keys, alignment="bottom-right")
    for i in range(num_queries):
        for j in range(num_keys):
            assert bool(mask[i, j]) == (j <= i + num_keys - num_queries)
    bias = pytest.importorskip("torch.nn.attention.bias")
    if num_queries <= num_keys:  # PyTorch warns (NaN rows) otherwise
        torch.testing.assert_close(
            mask, bias.causal_lower_right(num_queries, num_keys)._materialize()
        )
    if num_queries == num_keys:
        torch.testing.assert_close(mask, causal_mask(num_queries, num_keys))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "valid_lens,match",
    [
        (torch.tensor([1.0, 2.0]), r"valid_lens must be an integer tensor.*float32.*\(2,\)"),
        (torch.tensor([1, -1]), r"valid_lens must be non-negative.*-1"),
        (torch.tensor([1, 2, 3]), r"valid_lens must have shape.*\(2,\).*got \(3,\)"),
        (torch.ones(2, 5, dtype=torch.long), r"valid_lens must have shape.*\(2, 3\).*got \(2, 5\)"),
        (torch.ones(2, 3, 1, dtype=torch.long), r"valid_lens must have shape.*got \(2, 3, 1\)"),
    ],
)
def test_bad_valid_lens_raise(valid_lens, match):
    with pytest.raises(ValueError, match=match):
        masked_softmax(torch.randn(2, 3, 4), valid_lens)


def test_bad_attn_mask_raise():
    with pytest.raises(ValueError, match=r"attn_mask must be a bool tensor.*float32"):
        masked_softmax(torch.randn(2, 3, 4), attn_mask=torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 5\) does not broadcast.*"):
        masked_softmax(torch.randn(2, 3, 4), attn_mask=torch.ones(3, 5, dtype=torch.bool))


def test_valid_lens_needs_batch_axis():
    with pytest.raises(ValueError, match=r"valid_lens needs scores of shape.*\(3, 4\)"):
        masked_softmax(torch.randn(3, 4), torch.tensor([1, 2, 3]))


def test_bad_causal_arguments_raise():
    with pytest.raises(ValueError, match="alignment"):
        causal_mask(3, 3, alignment="diagonal")
    with pytest.raises(ValueError, match="num_queries"):
        causal_mask(-1, 3)


def test_valid_lens_to_mask_rejects_negative():
    with pytest.raises(ValueError, match="valid_lens must be non-negative"):
        valid_lens_to_mask(torch.tensor([-2]), 2, 2)


@pytest.mark.parametrize(("q_len", "k_len"), [(3, 5), (5, 3), (4, 4)])
def test_attention_mask_is_bottom_right_causal_and_padding(q_len, k_len):
    from attention_book.masking import attention_mask

    valid_lens = torch.tensor([k_len, 2])
    mask = attention_mask(q_len, k_len, causal=True, valid_lens=valid_lens)
    assert mask.shape == (2, 1, q_len, k_len)
    causal = causal_mask(q_len, k_len, alignment="bottom-right")
    padding = valid_lens_to_mask(valid_lens, q_len, k_len)  # (batch, q_len, k_len)
    assert torch.equal(mask[:, 0], causal & padding)
    assert attention_mask(q_len, k_len) is None


def test_attention_mask_of_a_block_is_a_slice_of_the_whole():
    from attention_book.masking import attention_mask

    valid_lens = torch.tensor([6, 3])
    whole = attention_mask(7, 9, causal=True, valid_lens=valid_lens)
    block = attention_mask(
        7, 9, True, valid_lens, query_offset=2, key_offset=4, num_queries=3, num_keys=4
    )
    assert torch.equal(block, whole[:, :, 2:5, 4:8])


def test_combine_masks_broadcasts_valid_lens_over_heads():
    from attention_book.masking import combine_masks

    attn_mask = causal_mask(3, 4)
    mask = combine_masks((2, 5, 3, 4), torch.device("cpu"), torch.tensor([1, 4]), attn_mask)
    assert mask.shape == (2, 1, 3, 4)
    assert torch.equal(mask[1, 0], attn_mask)
    assert torch.equal(mask[0, 0], attn_mask & (torch.arange(4) < 1))
    assert combine_masks((2, 3, 4), torch.device("cpu"), None, None) is None


# ------------------------------------------------- sliding-window and block-sparse masks


def brute_force_sliding_window(num_queries, num_keys, window):
    """Query i sits at position p = i + num_keys - num_queries and sees p - window < j <= p."""
    mask = torch.zeros(num_queries, num_keys, dtype=torch.bool)
    for i in range(num_queries):
        p = i + num_keys - num_queries
        for j in range(num_keys):
            mask[i, j] = p - window < j <= p
    return mask


@pytest.mark.parametrize(
    ("num_queries", "num_keys", "window"),
    [(6, 6, 1), (6, 6, 2), (6, 6, 3), (7, 7, 4), (1, 9, 3), (3, 8, 2), (4, 10, 5), (8, 5, 2)],
)
def test_sliding_window_mask_matches_brute_force(num_queries, num_keys, window):
    from attention_book.masking import sliding_window_mask

    mask = sliding_window_mask(num_queries, num_keys, window)
    assert mask.dtype == torch.bool and mask.shape == (num_queries, num_keys)
    assert torch.equal(mask, brute_force_sliding_window(num_queries, num_keys, window))


@given(
    num_queries=st.integers(0, 12),
    extra_keys=st.integers(0, 12),
    window=st.integers(1, 30),
)
@settings(max_examples=60, deadline=None)
def test_sliding_window_mask_property(num_queries, extra_keys, window):
    from attention_book.masking import sliding_window_mask

    num_keys = num_queries + extra_keys
    mask = sliding_window_mask(num_queries, num_keys, window)
    assert torch.equal(mask, brute_force_sliding_window(num_queries, num_keys, window))
    # each query sees min(window, its position + 1) keys: the window, cut at the first key
    positions = torch.arange(num_queries) + extra_keys
    assert torch.equal(mask.sum(dim=-1), torch.clamp(positions + 1, max=window))


@pytest.mark.parametrize(("num_queries", "num_keys"), [(5, 5), (2, 7), (1, 4), (6, 3)])
def test_sliding_window_at_least_num_keys_is_the_bottom_right_causal_mask(num_queries, num_keys):
    from attention_book.masking import sliding_window_mask

    causal = causal_mask(num_queries, num_keys, alignment="bottom-right")
    for window in (num_keys, num_keys + 1, 100):
        assert torch.equal(sliding_window_mask(num_queries, num_keys, window), causal)
    if num_keys > 1:  # a smaller window hides something the causal mask shows
        smaller = sliding_window_mask(num_queries, num_keys, num_keys - 1)
        assert not torch.equal(smaller, causal)
        assert not bool((smaller & ~causal).any())  # never shows what the causal mask hides


def test_sliding_window_of_one_is_the_diagonal():
    from attention_book.masking import sliding_window_mask

    assert torch.equal(sliding_window_mask(5, 5, 1), torch.eye(5, dtype=torch.bool))


def test_sliding_window_mask_in_attention_matches_explicit_weights():
    """Used as attn_mask, keys outside the window get exactly zero weight."""
    from attention_book.masking import sliding_window_mask

    scores = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    mask = sliding_window_mask(6, 6, 3)
    weights = masked_softmax(scores, attn_mask=mask)
    assert torch.all(weights[..., ~mask] == 0)
    torch.testing.assert_close(weights, reference_masked_softmax(scores, mask), rtol=0, atol=1e-15)


def test_sliding_window_mask_bad_arguments():
    from attention_book.masking import sliding_window_mask

    with pytest.raises(ValueError, match=r"window must be at least 1.*got 0"):
        sliding_window_mask(4, 4, 0)
    with pytest.raises(ValueError, match=r"num_queries and num_keys must be non-negative"):
        sliding_window_mask(-1, 4, 2)


def test_block_sparse_mask_expands_each_block():
    from attention_book.masking import block_sparse_mask

    layout = torch.tensor([[True, False, False], [True, True, False], [False, True, True]])
    mask = block_sparse_mask(layout, 2)
    assert mask.shape == (6, 6) and mask.dtype == torch.bool
    for i in range(6):
        for j in range(6):
            assert bool(mask[i, j]) == bool(layout[i // 2, j // 2])


def test_block_sparse_mask_block_diagonal_and_rectangular():
    from attention_book.masking import block_sparse_mask

    diagonal = block_sparse_mask(torch.eye(3, dtype=torch.bool), 4)  # local, non-overlapping
    index = torch.arange(12)
    assert torch.equal(diagonal, index[:, None] // 4 == index[None, :] // 4)
    rectangular = block_sparse_mask(torch.ones(2, 3, dtype=torch.bool), 3)
    assert rectangular.shape == (6, 9) and bool(rectangular.all())


def test_block_sparse_mask_bad_arguments():
    from attention_book.masking import block_sparse_mask

    with pytest.raises(ValueError, match=r"layout must be a bool tensor.*got \(2, 2, 2\)"):
        block_sparse_mask(torch.ones(2, 2, 2, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match=r"layout must be a bool tensor"):
        block_sparse_mask(torch.ones(2, 2), 2)
    with pytest.raises(ValueError, match=r"block_size must be at least 1, got 0"):
        block_sparse_mask(torch.ones(2, 2, dtype=torch.bool), 0)
