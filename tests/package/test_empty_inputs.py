"""Empty and degenerate inputs, drawn by hypothesis, at every public attention entry point.

One file for many modules, where the house rule is one test file per module, because it tests
one rule that every module must keep in the same way, with the same strategies and the same
references; each module's own file keeps its other tests. The rule:

- A batch, a number of heads, of queries or of keys may be 0: the output has the matching
  shape, as PyTorch's own functions give it, and every gradient has its input's shape.
- A query that sees no key (0 keys, a valid length of 0, a fully masked row, a causal row
  with more queries than keys) gets a zero vector (and a log-sum-exp of ``-inf`` in
  `flash_attention`) and zero gradients, never NaN. PyTorch 2.13's
  ``scaled_dot_product_attention`` gives the same zeros (`test_what_pytorch_answers` records
  it); ``nn.MultiheadAttention`` with ``need_weights=True`` gives NaN, and there the book's
  rule is the answer.
- A size ``d`` of 0 for queries and keys, whose scores are divided by ``sqrt(d)``, is a
  ``ValueError`` naming the argument.

Entry points, each compared forward and backward with PyTorch's equivalent or, where PyTorch
has none, with a row-by-row loop written here: `flash_attention` (reference and Triton
backends), `masked_softmax`, `AdditiveAttention`, `DotProductAttention` (both paths),
`MultiHeadAttention`, `GroupedQueryAttention`, the Transformer encoder and decoder (with and
without the cache), `GPT` (with and without a cache, every positional and attention option),
`linear_attention` and ViT. Shapes are drawn with sizes 0, 1 and a few more, so that a
failure shrinks to the smallest case that shows it.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention_book.attention import AdditiveAttention, DotProductAttention
from attention_book.flash import flash_attention
from attention_book.gpt import GPT
from attention_book.linear_attention import linear_attention
from attention_book.masking import masked_softmax
from attention_book.multihead import GroupedQueryAttention, MultiHeadAttention
from attention_book.transformer import TransformerEncoder
from attention_book.transformer_decoder import (
    DecoderState,
    TransformerDecoder,
    TransformerDecoderBlock,
)
from attention_book.vit import ViT, ViTBlock

HAS_TRITON = importlib.util.find_spec("triton") is not None
NEG_INF = float("-inf")
TOL = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 2e-5, "rtol": 1e-5},
    torch.float16: {"atol": 1e-2, "rtol": 1e-2},
    torch.bfloat16: {"atol": 5e-2, "rtol": 2e-2},
}
FLOATS = (torch.float64, torch.float32)  # modules: exact and single precision
sizes = st.integers(0, 2)  # batch, heads: 0, 1 or 2
lengths = st.integers(0, 4)  # queries, keys, tokens: 0, 1 or a few
seeds = st.integers(0, 3)


# ---------------------------------------------------------------------------------------------
# Helpers: inputs, masks, forward and backward
# ---------------------------------------------------------------------------------------------


def randn(seed: int, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)


def randomize_(module: nn.Module, seed: int, dtype: torch.dtype) -> nn.Module:
    """Every parameter random (biases and LayerNorms too), so that nothing is 0 by chance."""
    module = module.to(dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=dtype) * 0.5)
    return module


def forward_backward(function, inputs, params=(), seed=0):
    """``function(*inputs)`` (a tensor or a tuple of tensors) and the gradients of a random
    projection of its first output with respect to the inputs and `params`."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    outputs = function(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    grad_out = randn(seed + 100, *outputs[0].shape, dtype=outputs[0].dtype)
    if outputs[0].requires_grad:
        grads = torch.autograd.grad(
            outputs[0], [*inputs, *params], grad_out, allow_unused=True, materialize_grads=True
        )
    else:  # a constant (the loops below, when no query sees a key): zero gradients
        grads = [torch.zeros_like(t) for t in (*inputs, *params)]
    return (*(t.detach() for t in outputs), *grads)


def assert_same(got, expected, dtype, names=None):
    """Same shapes, no NaN, equal values within the dtype's tolerance (-inf must match)."""
    names = names or [str(i) for i in range(len(got))]
    assert len(got) == len(expected)
    for name, a, b in zip(names, got, expected, strict=True):
        assert a.shape == b.shape, f"{name}: shape {tuple(a.shape)}, expected {tuple(b.shape)}"
        assert not a.isnan().any(), f"{name}: NaN"
        torch.testing.assert_close(a.double(), b.double(), **TOL[dtype], msg=name)


@st.composite
def valid_lengths(draw, batch, num_queries, num_keys, per_query=False):
    """None, or integer lengths in 0..num_keys + 1, per sequence (or per query)."""
    kinds = ["none", "sequence", "query"] if per_query else ["none", "sequence"]
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    one = st.integers(0, num_keys + 1)
    if kind == "sequence":
        return torch.tensor(draw(st.lists(one, min_size=batch, max_size=batch)), dtype=torch.long)
    rows = st.lists(one, min_size=num_queries, max_size=num_queries)
    lens = draw(st.lists(rows, min_size=batch, max_size=batch))
    return torch.tensor(lens, dtype=torch.long).reshape(batch, num_queries)


@st.composite
def bool_masks(draw, shape):
    """A boolean mask (True = may attend) of `shape`, drawn bit by bit: it shrinks to False."""
    bits = draw(st.lists(st.booleans(), min_size=math.prod(shape), max_size=math.prod(shape)))
    return torch.tensor(bits, dtype=torch.bool).reshape(shape)


def key_mask(valid_lens, batch, num_queries, num_keys):
    """(batch, num_queries, num_keys), True where a query may see a key (all without lengths)."""
    if valid_lens is None:
        return torch.ones(batch, num_queries, num_keys, dtype=torch.bool)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(batch, num_queries)
    return torch.arange(num_keys) < valid_lens[..., None]


def torch_padding(valid_lens, batch, num_keys):
    """PyTorch's key_padding_mask (True = ignore), or None when it would hold no element:
    nn.MultiheadAttention(need_weights=False) fails on an empty one (see below)."""
    if valid_lens is None or batch * num_keys == 0:
        return None
    return ~key_mask(valid_lens, batch, 1, num_keys)[:, 0]


def causal(num_queries, num_keys, bottom_right):
    """The causal mask, True = may attend, aligned bottom-right or top-left."""
    diagonal = num_keys - num_queries if bottom_right else 0
    return torch.ones(num_queries, num_keys, dtype=torch.bool).tril(diagonal)


def sdpa(q, k, v, mask, **options):
    """PyTorch's attention: zeros for rows that see no key (`test_what_pytorch_answers`)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)


def softmax_with_the_book_rule(scores, mask):
    """PyTorch's softmax of the visible scores; rows that see no key: zeros."""
    alive = mask.any(dim=-1, keepdim=True)
    hidden = scores.masked_fill(~mask, NEG_INF).masked_fill(~alive, 0.0)
    return torch.where(alive, F.softmax(hidden, dim=-1), 0.0)


# ---------------------------------------------------------------------------------------------
# What PyTorch itself answers (torch 2.13), which the properties below compare with
# ---------------------------------------------------------------------------------------------


def test_what_pytorch_answers():
    q = torch.randn(2, 2, 3, 4, requires_grad=True)
    empty = torch.randn(2, 2, 0, 4, requires_grad=True)
    # No keys, or every key masked: zeros and zero gradients, no NaN.
    out = F.scaled_dot_product_attention(q, empty, empty)
    assert torch.equal(out, torch.zeros(2, 2, 3, 4))
    k = torch.randn(2, 2, 5, 4)
    out = F.scaled_dot_product_attention(q, k, k, attn_mask=torch.zeros(3, 5, dtype=torch.bool))
    assert torch.equal(out, torch.zeros(2, 2, 3, 4))
    (grad,) = torch.autograd.grad(out.sum(), q)
    assert torch.equal(grad, torch.zeros_like(q))
    # Empty batch, empty queries: empty outputs; softmax over 0 keys: empty; lse: -inf.
    assert F.scaled_dot_product_attention(q[:0], k[:0], k[:0]).shape == (0, 2, 3, 4)
    assert F.scaled_dot_product_attention(q[:, :, :0], k, k).shape == (2, 2, 0, 4)
    assert F.softmax(torch.randn(2, 3, 0), dim=-1).shape == (2, 3, 0)
    assert torch.equal(torch.logsumexp(torch.randn(2, 0), -1), torch.full((2,), NEG_INF))
    # nn.MultiheadAttention: a sequence whose keys are all padding gives NaN with its weights,
    # its output bias (attention output 0) without them, as the book's modules give.
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    nn.init.normal_(mha.out_proj.bias)
    x = torch.randn(2, 3, 8)
    padding = torch.tensor([[True] * 3, [False] * 3])  # PyTorch: True = ignore
    out, _ = mha(x, x, x, key_padding_mask=padding)
    assert out[0].isnan().all() and not out[1].isnan().any()
    out, _ = mha(x, x, x, key_padding_mask=padding, need_weights=False)
    torch.testing.assert_close(out[0], mha.out_proj.bias.detach().expand(3, 8))
    # ... and without them, an empty batch or no keys with a key_padding_mask is an error.
    for batch, num_keys in ((0, 3), (2, 0)):
        y = torch.randn(batch, num_keys, 8)
        with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements"):
            mha(x[:batch], y, y, key_padding_mask=padding[:batch, :num_keys], need_weights=False)
    # Queries and keys of size 0: PyTorch's attention gives every key the same weight.
    v = torch.randn(1, 1, 5, 2)
    out = F.scaled_dot_product_attention(torch.randn(1, 1, 3, 0), torch.randn(1, 1, 5, 0), v)
    torch.testing.assert_close(out, v.mean(dim=2, keepdim=True).expand(1, 1, 3, 2))


def test_a_feature_size_of_zero_is_a_value_error_that_names_the_argument():
    queries, keys, values = torch.randn(2, 3, 0), torch.randn(2, 5, 0), torch.randn(2, 5, 4)
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=r"queries must have d >= 1.*\(2, 3, 0\)"):
            DotProductAttention()(queries, keys, values, need_weights=need_weights)
    with pytest.raises(ValueError, match=r"num_hiddens=0 must be divisible by num_heads=2"):
        MultiHeadAttention(0, 2)
    with pytest.raises(ValueError, match=r"num_hiddens=0 must be divisible by num_heads=2"):
        GroupedQueryAttention(0, 2, 1)


# ---------------------------------------------------------------------------------------------
# flash_attention, both backends, against PyTorch's SDPA in float64
# ---------------------------------------------------------------------------------------------


@st.composite
def flash_cases(draw, dtypes, head_dims):
    batch, num_heads = draw(sizes), draw(sizes)
    q_len, k_len = draw(lengths), draw(lengths)
    return {
        "shape": (batch, num_heads, q_len, k_len, draw(st.sampled_from(head_dims))),
        "causal": draw(st.booleans()),
        "valid_lens": draw(valid_lengths(batch, q_len, k_len)),
        "dtype": draw(st.sampled_from(dtypes)),
        "seed": draw(seeds),
    }


def sdpa_with_lse(q, k, v, causal_, valid_lens):
    """SDPA and the log-sum-exp of the visible scores, with flash's masks (bottom-right)."""
    batch, _, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    mask = key_mask(valid_lens, batch, q_len, k_len)[:, None]  # (batch, 1, q_len, k_len)
    if causal_:
        mask = mask & causal(q_len, k_len, bottom_right=True)
    scores = (q @ k.transpose(-2, -1) * head_dim**-0.5).masked_fill(~mask, NEG_INF)
    return sdpa(q, k, v, mask), torch.logsumexp(scores, dim=-1)


def check_flash(case, backend, device="cpu", **blocks):
    batch, num_heads, q_len, k_len, head_dim = case["shape"]
    dtype, seed, valid_lens = case["dtype"], case["seed"], case["valid_lens"]
    q = randn(seed, batch, num_heads, q_len, head_dim, dtype=dtype)
    k = randn(seed + 1, batch, num_heads, k_len, head_dim, dtype=dtype)
    v = randn(seed + 2, batch, num_heads, k_len, head_dim, dtype=dtype)
    if head_dim == 0:
        with pytest.raises(ValueError, match=r"q must have head_dim >= 1"):
            flash_attention(q.to(device), k.to(device), v.to(device), backend=backend)
        return

    def ours(q, k, v):
        lens = None if valid_lens is None else valid_lens.to(device)
        return flash_attention(
            q, k, v, causal=case["causal"], backend=backend, valid_lens=lens, return_lse=True,
            **blocks,
        )  # fmt: skip

    got = forward_backward(ours, [t.to(device) for t in (q, k, v)])
    expected = forward_backward(
        lambda q, k, v: sdpa_with_lse(q, k, v, case["causal"], valid_lens),
        [t.double() for t in (q, k, v)],
    )
    assert [t.dtype for t in got[:1] + got[2:]] == [dtype] * 4
    assert_same([t.cpu() for t in got], expected, dtype, ["out", "lse", "dq", "dk", "dv"])


@settings(max_examples=60, deadline=None)
@given(
    case=flash_cases((torch.float64, torch.float32, torch.float16, torch.bfloat16), (0, 1, 3, 16)),
    block_m=st.sampled_from([1, 2, 128]),
    block_n=st.sampled_from([1, 2, 128]),
)
def test_flash_reference_backend(case, block_m, block_n):
    check_flash(case, "reference", block_m=block_m, block_n=block_n)


@pytest.fixture(scope="module")
def triton_device():
    """The device of the Triton kernels: "cpu" under the interpreter, "cuda" compiled."""
    if not HAS_TRITON:
        pytest.skip("Triton is not installed")
    from attention_book.flash import launch  # imports Triton

    if launch.KERNEL_MODE == "compiled" and torch.cuda.is_available():
        return "cuda"
    if launch.KERNEL_MODE != "interpreted":
        pytest.skip("Triton is compiled and there is no CUDA GPU: set TRITON_INTERPRET=1")
    return "cpu"


@settings(max_examples=20, deadline=None)  # the interpreter: about 0.5 s per example
@given(case=flash_cases((torch.float32, torch.float16, torch.bfloat16), (0, 16)))
def test_flash_triton_backend(triton_device, case):
    check_flash(case, "triton", triton_device)


# ---------------------------------------------------------------------------------------------
# masked_softmax and the two scoring modules
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    batch=sizes,
    num_heads=st.sampled_from([None, 0, 1, 2]),
    num_queries=lengths,
    num_keys=lengths,
    dtype=st.sampled_from([torch.float64, torch.float32, torch.bfloat16]),
    seed=seeds,
    data=st.data(),
)
def test_masked_softmax(batch, num_heads, num_queries, num_keys, dtype, seed, data):
    heads = () if num_heads is None else (num_heads,)
    shape = (batch, *heads, num_queries, num_keys)
    valid_lens = data.draw(valid_lengths(batch, num_queries, num_keys, per_query=True), "lens")
    mask_shape = data.draw(st.sampled_from([None, (num_queries, num_keys), shape]), "mask shape")
    attn_mask = None if mask_shape is None else data.draw(bool_masks(mask_shape), "attn_mask")
    mask = key_mask(valid_lens, batch, num_queries, num_keys)
    mask = mask.reshape(batch, *(1 for _ in heads), num_queries, num_keys)
    if attn_mask is not None:
        mask = mask & attn_mask
    scores = randn(seed, *shape, dtype=dtype)
    got = forward_backward(lambda s: masked_softmax(s, valid_lens, attn_mask), [scores])
    expected = forward_backward(lambda s: softmax_with_the_book_rule(s, mask), [scores.double()])
    assert got[0].dtype == dtype
    assert_same(got, expected, dtype, ["weights", "grad"])


@st.composite
def scoring_cases(draw, max_dims=3):
    batch, num_queries, num_keys = draw(sizes), draw(lengths), draw(lengths)
    heads = draw(st.sampled_from([(), (1,), (2,)])) if max_dims == 4 else ()
    mask_shape = draw(st.sampled_from([None, (num_queries, num_keys)]))
    return {
        "batch": batch,
        "heads": heads,
        "num_queries": num_queries,
        "num_keys": num_keys,
        "valid_lens": draw(valid_lengths(batch, num_queries, num_keys, per_query=True)),
        "attn_mask": None if mask_shape is None else draw(bool_masks(mask_shape)),
        "dtype": draw(st.sampled_from(FLOATS)),
        "seed": draw(seeds),
    }


def visible_keys(case, is_causal=False):
    """(batch, [1,] num_queries, num_keys): True where a query may see a key."""
    batch, n_q, n_k = case["batch"], case["num_queries"], case["num_keys"]
    mask = key_mask(case["valid_lens"], batch, n_q, n_k)
    mask = mask.reshape(batch, *(1 for _ in case["heads"]), n_q, n_k)
    if case["attn_mask"] is not None:
        mask = mask & case["attn_mask"]
    return mask & causal(n_q, n_k, bottom_right=False) if is_causal else mask


def additive_by_rows(attention, queries, keys, values, visible):
    """Each query alone: softmax over its visible keys of w_v tanh(W_q q + W_k k), times V."""
    out = values.new_zeros(*queries.shape[:2], values.shape[-1])
    for b, t in torch.ones(out.shape[:2]).nonzero().tolist():
        seen = visible[b, t].nonzero().flatten()
        if len(seen):
            features = torch.tanh(attention.W_q(queries[b, t]) + attention.W_k(keys[b, seen]))
            out[b, t] = torch.softmax(attention.w_v(features).squeeze(-1), dim=0) @ values[b, seen]
    return out


@settings(max_examples=30, deadline=None)
@given(case=scoring_cases())
def test_additive_attention(case):
    dtype, seed = case["dtype"], case["seed"]
    attention = randomize_(AdditiveAttention(3, 2, 4), seed, dtype)
    queries = randn(seed, case["batch"], case["num_queries"], 2, dtype=dtype)
    keys = randn(seed + 1, case["batch"], case["num_keys"], 3, dtype=dtype)
    values = randn(seed + 2, case["batch"], case["num_keys"], 5, dtype=dtype)
    params = list(attention.parameters())
    inputs = [queries, keys, values]
    got = forward_backward(
        lambda q, k, v: attention(q, k, v, case["valid_lens"], case["attn_mask"]), inputs, params
    )
    visible = visible_keys(case)
    expected = forward_backward(
        lambda q, k, v: additive_by_rows(attention, q, k, v, visible), inputs, params
    )
    assert_same(got, expected, dtype)
    assert attention.attention_weights.shape == (*queries.shape[:2], keys.shape[1])


@settings(max_examples=50, deadline=None)
@given(
    case=scoring_cases(max_dims=4),
    d=st.sampled_from([0, 1, 3]),
    is_causal=st.booleans(),
    need_weights=st.booleans(),
)
def test_dot_product_attention_both_paths(case, d, is_causal, need_weights):
    dtype, seed, heads = case["dtype"], case["seed"], case["heads"]
    lead = (case["batch"], *heads)
    queries = randn(seed, *lead, case["num_queries"], d, dtype=dtype)
    keys = randn(seed + 1, *lead, case["num_keys"], d, dtype=dtype)
    values = randn(seed + 2, *lead, case["num_keys"], 5, dtype=dtype)
    attention = DotProductAttention(need_weights=need_weights)
    if d == 0:  # the scores would be 0 / 0 (PyTorch: uniform weights), on both paths
        with pytest.raises(ValueError, match=r"queries must have d >= 1"):
            attention(queries, keys, values, case["valid_lens"], case["attn_mask"], is_causal)
        return
    got = forward_backward(
        lambda q, k, v: attention(q, k, v, case["valid_lens"], case["attn_mask"], is_causal),
        [queries, keys, values],
    )
    mask = visible_keys(case, is_causal)
    expected = forward_backward(lambda q, k, v: sdpa(q, k, v, mask), [queries, keys, values])
    assert_same(got, expected, dtype, ["out", "dq", "dk", "dv"])
    if need_weights:
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(d)
        weights = softmax_with_the_book_rule(scores, mask)
        assert_same([attention.attention_weights], [weights], dtype, ["weights"])


# ---------------------------------------------------------------------------------------------
# Multi-head and grouped-query attention
# ---------------------------------------------------------------------------------------------


def copy_mha_(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Our W_q, W_k, W_v, W_o into nn.MultiheadAttention's packed projections."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)


@st.composite
def multihead_cases(draw):
    batch, num_queries, num_keys = draw(sizes), draw(lengths), draw(lengths)
    return {
        "batch": batch,
        "num_queries": num_queries,
        "num_keys": num_keys,
        "valid_lens": draw(valid_lengths(batch, num_queries, num_keys)),
        "is_causal": draw(st.booleans()),
        "need_weights": draw(st.booleans()),
        "dtype": draw(st.sampled_from(FLOATS)),
        "seed": draw(seeds),
    }


def multihead_inputs(case):
    """Queries, keys and values of width 8."""
    batch, dtype, seed = case["batch"], case["dtype"], case["seed"]
    lengths_ = (case["num_queries"], case["num_keys"], case["num_keys"])
    return [randn(seed + i, batch, n, 8, dtype=dtype) for i, n in enumerate(lengths_)]


@settings(max_examples=40, deadline=None)
@given(case=multihead_cases())
def test_multihead_attention_matches_torch_multihead_attention(case):
    """With need_weights=False, PyTorch's module gives the book's zeros to keyless rows."""
    dtype, valid_lens = case["dtype"], case["valid_lens"]
    ours = randomize_(MultiHeadAttention(8, 2, bias=True), case["seed"], dtype)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True, dtype=dtype)
    copy_mha_(ours, theirs)
    n_q, n_k = case["num_queries"], case["num_keys"]
    padding = torch_padding(valid_lens, case["batch"], n_k)
    future = ~causal(n_q, n_k, bottom_right=False) if case["is_causal"] else None
    got = forward_backward(
        lambda q, k, v: ours(q, k, v, valid_lens, None, case["is_causal"], case["need_weights"]),
        multihead_inputs(case),
    )
    expected = forward_backward(
        lambda q, k, v: theirs(
            q, k, v, key_padding_mask=padding, attn_mask=future, need_weights=False
        )[0],
        multihead_inputs(case),
    )
    assert_same(got, expected, dtype, ["out", "d_queries", "d_keys", "d_values"])


def grouped_by_sdpa(gqa, queries, keys, values, mask):
    """Projections, PyTorch's attention with grouped heads (enable_gqa), output projection."""

    def heads(layer, X, num_heads):  # (batch, n, num_heads * d) -> (batch, num_heads, n, d)
        return F.linear(X, layer.weight, layer.bias).unflatten(-1, (num_heads, -1)).transpose(1, 2)

    q = heads(gqa.W_q, queries, gqa.num_heads)
    k, v = heads(gqa.W_k, keys, gqa.num_kv_heads), heads(gqa.W_v, values, gqa.num_kv_heads)
    out = sdpa(q, k, v, mask, enable_gqa=True).transpose(1, 2).flatten(-2)
    return F.linear(out, gqa.W_o.weight, gqa.W_o.bias)


@settings(max_examples=40, deadline=None)
@given(case=multihead_cases(), num_kv_heads=st.sampled_from([1, 2, 4]))
def test_grouped_query_attention_matches_sdpa_with_grouped_heads(case, num_kv_heads):
    dtype = case["dtype"]
    gqa = randomize_(GroupedQueryAttention(8, 4, num_kv_heads, bias=True), case["seed"], dtype)
    options = (case["valid_lens"], None, case["is_causal"], case["need_weights"])
    got = forward_backward(lambda q, k, v: gqa(q, k, v, *options), multihead_inputs(case))
    mask = visible_keys(dict(case, heads=(1,), attn_mask=None), case["is_causal"])
    expected = forward_backward(
        lambda q, k, v: grouped_by_sdpa(gqa, q, k, v, mask), multihead_inputs(case)
    )
    assert_same(got, expected, dtype, ["out", "d_queries", "d_keys", "d_values"])


# ---------------------------------------------------------------------------------------------
# Transformer encoder (and ViT's block), decoder, GPT
# ---------------------------------------------------------------------------------------------


def torch_encoder_layer(ours_parts, norm_first, activation, dtype):
    """nn.TransformerEncoderLayer with the weights of (ln1, attention, ln2, dense1, dense2)."""
    ln1, attention, ln2, dense1, dense2 = ours_parts
    theirs = nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first,
        dtype=dtype,
    )  # fmt: skip
    copy_mha_(attention, theirs.self_attn)
    pairs = ((ln1, theirs.norm1), (ln2, theirs.norm2), (dense1, theirs.linear1))
    with torch.no_grad():
        for mine, its in (*pairs, (dense2, theirs.linear2)):
            its.weight.copy_(mine.weight)
            its.bias.copy_(mine.bias)
    return theirs


def encoder_parts(block):
    addnorm1, addnorm2 = block.addnorm1, block.addnorm2
    ffn = block.ffn
    return addnorm1.ln, block.self_attention, addnorm2.ln, ffn.dense1, ffn.dense2


@settings(max_examples=30, deadline=None)
@given(
    batch=sizes,
    num_steps=lengths,
    norm_first=st.booleans(),
    dtype=st.sampled_from(FLOATS),
    seed=seeds,
    data=st.data(),
)
def test_transformer_encoder_matches_torch(batch, num_steps, norm_first, dtype, seed, data):
    valid_lens = data.draw(valid_lengths(batch, num_steps, num_steps), "valid_lens")
    ours = TransformerEncoder(11, 8, 16, 2, 2, 0.0, use_bias=True, norm_first=norm_first)
    ours = randomize_(ours, seed, dtype)
    layers = [
        torch_encoder_layer(encoder_parts(block), norm_first, "relu", dtype) for block in ours.blks
    ]
    padding = torch_padding(valid_lens, batch, num_steps)
    # One block, forward and backward.
    X = randn(seed, batch, num_steps, 8, dtype=dtype)
    got = forward_backward(lambda X: ours.blks[0](X, valid_lens), [X])
    expected = forward_backward(lambda X: layers[0](X, src_key_padding_mask=padding), [X])
    assert_same(got, expected, dtype, ["out", "dX"])
    # The stack, from tokens.
    tokens = torch.randint(11, (batch, num_steps), generator=torch.Generator().manual_seed(seed))
    H = ours.pos_encoding(ours.embedding(tokens) * math.sqrt(8))
    for layer in layers:
        H = layer(H, src_key_padding_mask=padding)
    assert_same([ours(tokens, valid_lens)], [ours.final_norm(H)], dtype, ["encoder"])


def torch_decoder_layer(block: TransformerDecoderBlock, dtype, norm_first):
    theirs = nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype
    )
    copy_mha_(block.self_attention, theirs.self_attn)
    copy_mha_(block.cross_attention, theirs.multihead_attn)
    pairs = [(block.addnorm1.ln, theirs.norm1), (block.addnorm2.ln, theirs.norm2)]
    pairs += [(block.addnorm3.ln, theirs.norm3), (block.ffn.dense1, theirs.linear1)]
    with torch.no_grad():
        for mine, its in (*pairs, (block.ffn.dense2, theirs.linear2)):
            its.weight.copy_(mine.weight)
            its.bias.copy_(mine.bias)
    return theirs


@settings(max_examples=30, deadline=None)
@given(
    batch=sizes,
    num_steps=lengths,
    num_source_steps=lengths,
    norm_first=st.booleans(),
    dtype=st.sampled_from(FLOATS),
    seed=seeds,
    data=st.data(),
)
def test_transformer_decoder_block_matches_torch(
    batch, num_steps, num_source_steps, norm_first, dtype, seed, data
):
    enc_valid_lens = data.draw(valid_lengths(batch, 1, num_source_steps), "enc_valid_lens")
    block = TransformerDecoderBlock(8, 16, 2, 0.0, 0, use_bias=True, norm_first=norm_first)
    block = randomize_(block, seed, dtype)
    theirs = torch_decoder_layer(block, dtype, norm_first)
    padding = torch_padding(enc_valid_lens, batch, num_source_steps)
    inputs = [
        randn(seed, batch, num_steps, 8, dtype=dtype),
        randn(seed + 1, batch, num_source_steps, 8, dtype=dtype),
    ]
    got = forward_backward(
        lambda X, enc: block(X, DecoderState.empty(enc, enc_valid_lens, 1))[0], inputs
    )
    future = ~causal(num_steps, num_steps, bottom_right=False)
    expected = forward_backward(
        lambda X, enc: theirs(X, enc, tgt_mask=future, memory_key_padding_mask=padding), inputs
    )
    assert_same(got, expected, dtype, ["out", "dX", "d_enc_outputs"])


@st.composite
def chunks(draw, total):
    """Sizes of consecutive calls that add up to `total`, 0 allowed anywhere."""
    sizes_, left = [], total
    while left or draw(st.booleans()):
        size = draw(st.integers(0, left))
        sizes_.append(size)
        left -= size
        if len(sizes_) > 6:
            sizes_.append(left)
            break
    return sizes_


def split(tokens, sizes_):
    starts = [sum(sizes_[:i]) for i in range(len(sizes_))]
    return [tokens[:, start : start + size] for start, size in zip(starts, sizes_, strict=True)]


@settings(max_examples=30, deadline=None)
@given(
    batch=sizes,
    num_steps=lengths,
    num_source_steps=lengths,
    use_cache=st.booleans(),
    seed=seeds,
    data=st.data(),
)
def test_transformer_decoder_call_by_call_equals_all_at_once(
    batch, num_steps, num_source_steps, use_cache, seed, data
):
    """Calls of any sizes, 0 included, give the logits of one call on the whole target."""
    sizes_ = data.draw(chunks(num_steps), "chunk sizes")
    enc_valid_lens = data.draw(valid_lengths(batch, 1, num_source_steps), "enc_valid_lens")
    decoder = TransformerDecoder(11, 8, 16, 2, 2, 0.0, use_cache=use_cache)
    decoder = randomize_(decoder, seed, torch.float64)
    enc_outputs = randn(seed, batch, num_source_steps, 8)
    tokens = torch.randint(11, (batch, num_steps), generator=torch.Generator().manual_seed(seed))
    whole, _ = decoder(tokens, decoder.init_state(enc_outputs, enc_valid_lens))
    state = decoder.init_state(enc_outputs, enc_valid_lens)
    parts = []
    for part in split(tokens, sizes_):
        logits, state = decoder(part, state)
        assert logits.shape == (batch, part.shape[1], 11)
        parts.append(logits)
    assert_same([torch.cat(parts, dim=1) if parts else whole], [whole], torch.float64)
    assert state.num_decoded_steps == num_steps


GPT_OPTIONS = [
    {},
    {"num_kv_heads": 1},
    {"positional": "alibi"},
    {"positional": "sinusoidal", "window": 2},
    {"positional": "learned"},
    {"attention": "linear"},
    {"attention": "linear", "positional": "none"},
]


@settings(max_examples=40, deadline=None)
@given(
    options=st.sampled_from(GPT_OPTIONS),
    batch=sizes,
    num_steps=lengths,
    seed=seeds,
    data=st.data(),
)
def test_gpt_with_a_cache_call_by_call_equals_all_at_once(options, batch, num_steps, seed, data):
    """Cached calls of any sizes, 0 included, give the logits of one call without a cache, and
    an empty batch or sequence has an empty output with zero gradients."""
    sizes_ = data.draw(chunks(num_steps), "chunk sizes")
    model = randomize_(GPT(11, 8, 2, 2, max_len=8, **options), seed, torch.float64).eval()
    tokens = torch.randint(11, (batch, num_steps), generator=torch.Generator().manual_seed(seed))
    whole = model(tokens)
    assert whole.shape == (batch, num_steps, 11)
    cache = model.new_cache(batch)
    parts = [model(part, cache) for part in split(tokens, sizes_)]
    assert_same([torch.cat(parts, dim=1) if parts else whole], [whole], torch.float64)
    assert cache.length == num_steps
    grads = torch.autograd.grad(whole.sum(), list(model.parameters()), materialize_grads=True)
    assert all(g.isfinite().all() for g in grads)
    if whole.numel() == 0:
        assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


# ---------------------------------------------------------------------------------------------
# Linear attention, ViT
# ---------------------------------------------------------------------------------------------


def linear_by_rows(queries, keys, values, is_causal, eps=1e-6):
    """out_i = sum_j phi(q_i).phi(k_j) v_j / (sum_j phi(q_i).phi(k_j) + eps), j <= i if causal."""
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    weights = phi_q @ phi_k.transpose(-2, -1)  # (..., n, m): every pair, written out
    if is_causal:
        weights = weights * causal(*weights.shape[-2:], bottom_right=False)
    return (weights @ values) / (weights.sum(dim=-1, keepdim=True) + eps)


@settings(max_examples=40, deadline=None)
@given(
    batch=sizes,
    num_heads=st.sampled_from([(), (0,), (2,)]),
    num_queries=lengths,
    num_keys=lengths,
    is_causal=st.booleans(),
    chunk_size=st.sampled_from([1, 2, 64]),
    dtype=st.sampled_from(FLOATS),
    seed=seeds,
)
def test_linear_attention(
    batch, num_heads, num_queries, num_keys, is_causal, chunk_size, dtype, seed
):
    num_keys = num_queries if is_causal else num_keys  # causal: as many queries as keys
    lead = (batch, *num_heads)
    inputs = [
        randn(seed, *lead, num_queries, 3, dtype=dtype),
        randn(seed + 1, *lead, num_keys, 3, dtype=dtype),
        randn(seed + 2, *lead, num_keys, 2, dtype=dtype),
    ]
    got = forward_backward(
        lambda q, k, v: linear_attention(q, k, v, is_causal, chunk_size=chunk_size), inputs
    )
    expected = forward_backward(lambda q, k, v: linear_by_rows(q, k, v, is_causal), inputs)
    assert_same(got, expected, dtype, ["out", "dq", "dk", "dv"])


@settings(max_examples=30, deadline=None)
@given(batch=sizes, num_steps=lengths, dtype=st.sampled_from(FLOATS), seed=seeds, data=st.data())
def test_vit_block_matches_torch_and_vit_takes_an_empty_batch(batch, num_steps, dtype, seed, data):
    valid_lens = data.draw(valid_lengths(batch, num_steps, num_steps), "valid_lens")
    block = randomize_(ViTBlock(8, 8, 16, 2, 0.0, use_bias=True), seed, dtype)
    parts = (block.ln1, block.self_attention, block.ln2, block.mlp.dense1, block.mlp.dense2)
    theirs = torch_encoder_layer(parts, True, "gelu", dtype)
    padding = torch_padding(valid_lens, batch, num_steps)
    X = randn(seed, batch, num_steps, 8, dtype=dtype)
    got = forward_backward(lambda X: block(X, valid_lens), [X])
    expected = forward_backward(lambda X: theirs(X, src_key_padding_mask=padding), [X])
    assert_same(got, expected, dtype, ["out", "dX"])
    # The whole model: each image's logits do not depend on the rest of the batch.
    vit = randomize_(ViT(4, 2, 8, 16, 2, 1, 0.0, 0.0, num_classes=3), seed, dtype)
    images = randn(seed, batch, 3, 4, 4, dtype=dtype)
    logits = vit(images)
    alone = [vit(images[i : i + 1]) for i in range(batch)]
    assert_same([logits], [torch.cat(alone) if alone else torch.empty(0, 3)], dtype, ["vit"])
    grads = torch.autograd.grad(logits.sum(), list(vit.parameters()), materialize_grads=True)
    assert all(g.isfinite().all() for g in grads)
