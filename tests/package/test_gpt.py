import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.gpt import GPT, CausalSelfAttention, GPTBlock
from attention_book.kv_cache import KVCache, LinearAttentionCache
from attention_book.masking import sliding_window_mask
from attention_book.rotary import apply_rotary

F64 = torch.float64
VOCAB = 11

#: Every option of the model that changes how attention or positions work.
OPTIONS = [
    {"positional": positional, "attention": attention}
    for positional, attention in itertools.product(
        ("rope", "sinusoidal", "learned", "none"), ("softmax", "linear")
    )
] + [
    {"positional": "alibi"},
    {"positional": "alibi", "num_kv_heads": 2},
    {"positional": "alibi", "window": 3},
    {"num_kv_heads": 2},
    {"num_kv_heads": 1},
    {"num_kv_heads": 1, "attention": "linear"},
    {"window": 3},
    {"window": 1, "positional": "learned"},
    {"window": 4, "num_kv_heads": 2},
]


def small_gpt(seed=0, **options):
    torch.manual_seed(seed)
    model = GPT(VOCAB, 16, 4, 2, max_len=64, **options).double().eval()
    with torch.no_grad():
        # At initialization the residual stream is mostly the token's own embedding, and
        # greedy tokens barely depend on attention; sharpen it so that a wrong position or a
        # wrong cached key changes the generated tokens.
        for blk in model.blks:
            for W in (blk.attention.heads.W_q, blk.attention.heads.W_k, blk.attention.heads.W_o):
                W.weight.mul_(3.0)
        if options.get("positional") == "learned":  # they start near zero: make them matter
            model.position.P.normal_()
    return model


def option_id(options):
    return ",".join(f"{k}={v}" for k, v in options.items())


def tokens(batch, n, seed=0):
    return torch.randint(VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- shapes and causality


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_logits_shape(options):
    model = small_gpt(**options)
    logits = model(tokens(3, 10))
    assert logits.shape == (3, 10, VOCAB) and logits.dtype == F64


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_changing_a_future_token_leaves_earlier_logits_equal(options):
    model = small_gpt(**options)
    X = tokens(2, 12)
    changed = X.clone()
    changed[:, 7] = (changed[:, 7] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(X), model(changed)
    torch.testing.assert_close(after[:, :7], before[:, :7], rtol=0, atol=1e-12)
    assert not torch.allclose(after[:, 7:], before[:, 7:])  # later positions do see it


def test_repeated_token_tells_additive_positions_from_rotary_ones():
    """One token repeated: every value vector is the same, so attention returns it whatever
    the weights. Rotary and ALiBi positions act only on the weights (and "none" has no
    positions), so every position gets the same logits; added positions change the values."""
    X = torch.full((1, 8), 3)
    for positional in ("rope", "sinusoidal", "learned", "alibi", "none"):
        with torch.no_grad():
            logits = small_gpt(positional=positional)(X)[0]  # (8, vocab)
        spread = (logits - logits[:1]).abs().max().item()
        if positional in ("rope", "alibi", "none"):
            assert spread < 1e-12
        else:
            assert spread > 1e-6


# ---------------------------------------------------------------- the caches


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_generate_with_and_without_cache_gives_identical_tokens(options):
    model = small_gpt(**options)
    prompt = tokens(3, 4, seed=1)
    with_cache = model.generate(prompt, 20, use_cache=True)
    without_cache = model.generate(prompt, 20, use_cache=False)
    assert with_cache.shape == (3, 24)
    assert torch.equal(with_cache[:, :4], prompt)
    assert torch.equal(with_cache, without_cache)
    assert len(set(with_cache[:, 4:].flatten().tolist())) > 1  # not one token over and over


@pytest.mark.parametrize("options", OPTIONS, ids=option_id)
def test_cached_logits_equal_full_forward(options):
    """Stronger than equal tokens: the logits of every step, prompt of 5 then 1 at a time."""
    model = small_gpt(**options)
    X = tokens(2, 13, seed=2)
    with torch.no_grad():
        expected = model(X)
        cache = model.new_cache(2, 13)
        steps = [model(X[:, :5], cache)] + [model(X[:, i : i + 1], cache) for i in range(5, 13)]
    assert cache.length == 13
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, rtol=0, atol=1e-10)


def test_kv_cache_size_is_the_formula():
    model = GPT(VOCAB, 32, 8, 3, num_kv_heads=2, max_len=50)
    cache = model.new_cache(batch_size=4)
    assert isinstance(cache, KVCache)
    assert cache.keys.shape == (3, 4, 2, 50, 4)
    # 2 (keys and values) * layers * batch * kv_heads * length * head_dim * 4 bytes (float32)
    assert cache.nbytes == 2 * 3 * 4 * 2 * 50 * 4 * 4


def test_linear_attention_cache_does_not_grow():
    model = GPT(VOCAB, 32, 4, 2, attention="linear")
    short, long = model.new_cache(1, 10), model.new_cache(1, 10_000)
    assert isinstance(short, LinearAttentionCache)
    assert short.nbytes == long.nbytes == 2 * 1 * 4 * (8 * 8 + 8) * 4
    model.eval()
    with torch.no_grad():
        model(tokens(1, 30), short)
    assert short.length == 30 and short.nbytes == long.nbytes


def test_cache_overflow_raises():
    model = small_gpt()
    cache = model.new_cache(1, 6)
    with torch.no_grad():
        model(tokens(1, 4), cache)
        with pytest.raises(ValueError, match=r"max_len=6 positions; 4 are written.*bring 3 more"):
            model(tokens(1, 3), cache)


def test_generate_restores_training_mode_and_accepts_zero_new_tokens():
    model = small_gpt().train()
    prompt = tokens(2, 3)
    assert torch.equal(model.generate(prompt, 0), prompt)
    model.generate(prompt, 2)
    assert model.training


# ---------------------------------------------------------------- equal to PyTorch


def test_block_equals_pytorch_pre_norm_encoder_layer_with_causal_mask():
    """Without rotary positions, a GPT block is nn.TransformerEncoderLayer(norm_first=True,
    activation="gelu") under a causal mask, given the same weights (attention biases zero)."""
    torch.manual_seed(0)
    num_hiddens, num_heads, ffn = 16, 4, 40
    ours = GPTBlock(num_hiddens, num_heads, num_heads, ffn, rotary=False).double().eval()
    theirs = nn.TransformerEncoderLayer(
        num_hiddens, num_heads, ffn, dropout=0.0, activation="gelu", batch_first=True,
        norm_first=True,
    ).double().eval()  # fmt: skip
    heads = ours.attention.heads
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(
            torch.cat([heads.W_q.weight, heads.W_k.weight, heads.W_v.weight])
        )
        theirs.self_attn.in_proj_bias.zero_()
        theirs.self_attn.out_proj.weight.copy_(heads.W_o.weight)
        theirs.self_attn.out_proj.bias.zero_()
        for mine, pytorch in (
            (ours.ln1, theirs.norm1),
            (ours.ln2, theirs.norm2),
            (ours.ffn[0], theirs.linear1),
            (ours.ffn[2], theirs.linear2),
        ):
            mine.weight.normal_()  # not the default ones and zeros
            mine.bias.normal_()
            pytorch.weight.copy_(mine.weight)
            pytorch.bias.copy_(mine.bias)
    X = torch.randn(3, 9, num_hiddens, dtype=F64)
    mask = nn.Transformer.generate_square_subsequent_mask(9, dtype=F64)
    with torch.no_grad():
        expected = theirs(X, src_mask=mask, is_causal=True)
        torch.testing.assert_close(ours(X), expected, rtol=0, atol=1e-12)


def test_attention_with_rotary_equals_sdpa_on_rotated_queries_and_keys():
    torch.manual_seed(1)
    layer = CausalSelfAttention(16, 4, 2, rotary=True).double()
    X = torch.randn(2, 7, 16, dtype=F64)
    heads = layer.heads
    with torch.no_grad():
        q = heads.W_q(X).view(2, 7, 4, 4).transpose(1, 2)  # (batch, heads, n, head_dim)
        k = heads.W_k(X).view(2, 7, 2, 4).transpose(1, 2)  # (batch, kv_heads, n, head_dim)
        v = heads.W_v(X).view(2, 7, 2, 4).transpose(1, 2)
        q, k = apply_rotary(q, torch.arange(7)), apply_rotary(k, torch.arange(7))
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        output = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (batch, heads, n, d)
        expected = heads.W_o(output.transpose(1, 2).reshape(2, 7, 16))
        torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


def test_sliding_window_attention_equals_explicit_masked_softmax():
    torch.manual_seed(2)
    layer = CausalSelfAttention(8, 2, 2, rotary=False, window=3).double()
    X = torch.randn(1, 9, 8, dtype=F64)
    heads = layer.heads
    with torch.no_grad():
        q, k, v = (W(X).view(1, 9, 2, 4).transpose(1, 2) for W in (heads.W_q, heads.W_k, heads.W_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(4)  # (1, 2, 9, 9)
        mask = sliding_window_mask(9, 9, 3)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        expected = heads.W_o((weights @ v).transpose(1, 2).reshape(1, 9, 8))
        torch.testing.assert_close(layer(X), expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- bad input


def test_bad_options_raise():
    with pytest.raises(ValueError, match=r"positional must be one of.*'xpos'"):
        GPT(VOCAB, 16, 4, 2, positional="xpos")
    with pytest.raises(ValueError, match=r"positional='alibi' needs softmax.*'linear'"):
        GPT(VOCAB, 16, 4, 2, positional="alibi", attention="linear")
    with pytest.raises(ValueError, match=r"num_heads must be a positive power of two, got 6"):
        GPT(VOCAB, 24, 6, 2, positional="alibi")
    with pytest.raises(ValueError, match=r"attention must be one of.*'sparse'"):
        GPT(VOCAB, 16, 4, 2, attention="sparse")
    with pytest.raises(ValueError, match=r"window must be at least 1.*window=0"):
        GPT(VOCAB, 16, 4, 2, window=0)
    with pytest.raises(ValueError, match=r"only with softmax attention.*'linear'"):
        GPT(VOCAB, 16, 4, 2, window=4, attention="linear")
    with pytest.raises(ValueError, match=r"num_kv_heads=3 must divide num_heads=4"):
        GPT(VOCAB, 16, 4, 2, num_kv_heads=3)


def test_bad_tokens_raise():
    model = small_gpt(positional="learned")
    with pytest.raises(ValueError, match=r"tokens must be an integer tensor.*\(2, 3\).*float"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, num_steps\).*\(5,\)"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"exceed max_len=64"):
        model(tokens(1, 65))
    with pytest.raises(ValueError, match=r"max_new_tokens must be non-negative.*-1"):
        model.generate(tokens(1, 2), -1)
    with pytest.raises(ValueError, match=r"at least one token.*\(2, 0\)"):
        model.generate(torch.zeros(2, 0, dtype=torch.long), 3)
