import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.multihead import MultiHeadAttention, split_heads
from attention_book.training.metrics import num_parameters
from attention_book.transformer import TransformerEncoder, TransformerEncoderBlock
from attention_book.transformer_decoder import (
    DecoderState,
    TransformerDecoder,
    TransformerDecoderBlock,
    attend_projected,
    project_heads,
)
from attention_book.transformer_sublayers import AddNorm, PositionWiseFFN, token_embedding

TOL = {"rtol": 0, "atol": 1e-10}


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter (LayerNorm scales and biases too) random values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.5)
    return module


def copy_mha_(ours, theirs: nn.MultiheadAttention) -> None:
    """Copy our W_q, W_k, W_v, W_o into nn.MultiheadAttention's packed in-projection."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)


def copy_linear_(ours: nn.Module, theirs: nn.Module) -> None:
    """Copy weight and bias of a Linear or LayerNorm."""
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


def key_padding_mask(valid_lens: torch.Tensor, num_keys: int) -> torch.Tensor:
    """PyTorch's convention: True = ignore this key."""
    return torch.arange(num_keys)[None, :] >= valid_lens[:, None]


# PositionWiseFFN and AddNorm ------------------------------------------------------------


def test_position_wise_ffn_gives_identical_rows_for_identical_positions():
    ffn = PositionWiseFFN(4, 4, 8)
    out = ffn(torch.ones((2, 3, 4)))
    assert out.shape == (2, 3, 8)
    assert torch.equal(out, out[:1, :1].expand_as(out))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_position_wise_ffn_is_linear_activation_linear(activation):
    ffn = PositionWiseFFN(5, 7, 3, activation=activation).double()
    X = torch.randn(2, 4, 5, dtype=torch.float64)
    act = F.relu if activation == "relu" else F.gelu
    expected = F.linear(
        act(F.linear(X, ffn.dense1.weight, ffn.dense1.bias)), ffn.dense2.weight, ffn.dense2.bias
    )
    torch.testing.assert_close(ffn(X), expected, **TOL)


def test_position_wise_ffn_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        PositionWiseFFN(4, 4, 4, activation="tanh")


def test_add_norm_post_norm_and_pre_norm():
    X = torch.randn(2, 3, 4, dtype=torch.float64)
    Y = torch.randn(2, 3, 4, dtype=torch.float64)
    post = randomize_(AddNorm(4, 0.0).double())
    ln = post.ln
    assert post.sublayer_input(X) is X
    torch.testing.assert_close(
        post(X, Y), F.layer_norm(X + Y, (4,), ln.weight, ln.bias, ln.eps), **TOL
    )
    pre = randomize_(AddNorm(4, 0.0, norm_first=True).double())
    ln = pre.ln
    torch.testing.assert_close(
        pre.sublayer_input(X), F.layer_norm(X, (4,), ln.weight, ln.bias, ln.eps), **TOL
    )
    torch.testing.assert_close(pre(X, Y), X + Y, **TOL)


def test_add_norm_d2l_call_gives_shape():
    add_norm = AddNorm(4, 0.5)
    add_norm.eval()
    assert add_norm(torch.ones((2, 3, 4)), torch.ones((2, 3, 4))).shape == (2, 3, 4)


def test_add_norm_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"X .*\(2, 3, 4\).*Y .*\(2, 3, 5\)"):
        AddNorm(4, 0.0)(torch.ones(2, 3, 4), torch.ones(2, 3, 5))


def test_scaled_token_embeddings_start_at_unit_scale():
    torch.manual_seed(0)
    num_hiddens = 64
    embedding = token_embedding(5000, num_hiddens)
    scaled = embedding.weight * math.sqrt(num_hiddens)  # what both stacks add the encoding to
    assert abs(scaled.std().item() - 1) < 0.02
    assert abs(scaled.mean().item()) < 0.02
    for stack in (
        TransformerEncoder(50, 16, 32, 4, 1, 0.0),
        TransformerDecoder(50, 16, 32, 4, 1, 0.0),
    ):
        assert stack.embedding.weight.std().item() < 0.5  # not PyTorch's default of 1


def test_each_module_lists_only_the_names_it_defines():
    import attention_book
    from attention_book import transformer, transformer_decoder, transformer_sublayers

    for module in (transformer, transformer_decoder, transformer_sublayers):
        for name in module.__all__:
            assert getattr(module, name).__module__ == module.__name__, name
    assert not hasattr(transformer, "TransformerDecoder")  # no re-export of the decoder
    # The package's own front door gathers the most used names from where they are defined.
    assert attention_book.AddNorm is transformer_sublayers.AddNorm
    assert attention_book.TransformerDecoder is transformer_decoder.TransformerDecoder


# Encoder ---------------------------------------------------------------------------------


def copy_encoder_block_(ours: TransformerEncoderBlock, theirs: nn.TransformerEncoderLayer):
    copy_mha_(ours.self_attention, theirs.self_attn)
    copy_linear_(ours.ffn.dense1, theirs.linear1)
    copy_linear_(ours.ffn.dense2, theirs.linear2)
    copy_linear_(ours.addnorm1.ln, theirs.norm1)
    copy_linear_(ours.addnorm2.ln, theirs.norm2)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_block_matches_torch_encoder_layer(norm_first, padded):
    num_hiddens, num_heads, ffn_num_hiddens = 16, 4, 24
    ours = TransformerEncoderBlock(
        num_hiddens, ffn_num_hiddens, num_heads, 0.0, use_bias=True, norm_first=norm_first
    )
    ours = randomize_(ours.double())
    theirs = nn.TransformerEncoderLayer(
        num_hiddens,
        num_heads,
        ffn_num_hiddens,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
    )
    copy_encoder_block_(ours, theirs)
    X = torch.randn(3, 5, num_hiddens, dtype=torch.float64)
    valid_lens = torch.tensor([5, 2, 3]) if padded else None
    mask = key_padding_mask(valid_lens, 5) if padded else None
    torch.testing.assert_close(ours(X, valid_lens), theirs(X, src_key_padding_mask=mask), **TOL)


def test_encoder_block_shape_and_bad_input():
    blk = TransformerEncoderBlock(24, 48, 8, 0.5)
    blk.eval()
    X = torch.ones((2, 100, 24))
    assert blk(X, torch.tensor([3, 2])).shape == X.shape
    with pytest.raises(ValueError, match=r"X must have shape.*num_hiddens=24.*\(2, 100, 12\)"):
        blk(torch.ones((2, 100, 12)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_shapes_weights_and_final_norm(norm_first):
    encoder = TransformerEncoder(200, 24, 48, 8, 2, 0.5, norm_first=norm_first)
    encoder.eval()
    out = encoder(torch.ones((2, 100), dtype=torch.long), torch.tensor([3, 2]))
    assert out.shape == (2, 100, 24)
    assert len(encoder.attention_weights) == 2
    for weights in encoder.attention_weights:
        assert weights.shape == (2, 8, 100, 100)
        assert torch.all(weights[1, :, :, 2:] == 0)  # padding keys get no weight
    assert isinstance(encoder.final_norm, nn.LayerNorm if norm_first else nn.Identity)


def test_encoder_ignores_padding_tokens():
    torch.manual_seed(0)
    encoder = TransformerEncoder(30, 16, 32, 4, 2, 0.0).double()
    tokens = torch.randint(1, 30, (2, 6))
    other = tokens.clone()
    other[0, 4:] = 0  # change only what valid_lens marks as padding
    other[1, 2:] = 7
    valid_lens = torch.tensor([4, 2])
    out, out_other = encoder(tokens, valid_lens), encoder(other, valid_lens)
    torch.testing.assert_close(out[0, :4], out_other[0, :4], **TOL)
    torch.testing.assert_close(out[1, :2], out_other[1, :2], **TOL)


def test_encoder_with_empty_sequence_gives_no_nan():
    encoder = TransformerEncoder(30, 16, 32, 4, 2, 0.0)
    out = encoder(torch.ones((2, 5), dtype=torch.long), torch.tensor([0, 5]))
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)


def test_encoder_rejects_float_tokens():
    encoder = TransformerEncoder(30, 16, 32, 4, 1, 0.0)
    with pytest.raises(ValueError, match=r"X must be an integer tensor.*\(2, 5, 16\)"):
        encoder(torch.ones((2, 5, 16)))


# Decoder ---------------------------------------------------------------------------------


def copy_decoder_block_(ours: TransformerDecoderBlock, theirs: nn.TransformerDecoderLayer):
    copy_mha_(ours.self_attention, theirs.self_attn)
    copy_mha_(ours.cross_attention, theirs.multihead_attn)
    copy_linear_(ours.ffn.dense1, theirs.linear1)
    copy_linear_(ours.ffn.dense2, theirs.linear2)
    copy_linear_(ours.addnorm1.ln, theirs.norm1)
    copy_linear_(ours.addnorm2.ln, theirs.norm2)
    copy_linear_(ours.addnorm3.ln, theirs.norm3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch_decoder_layer(norm_first):
    num_hiddens, num_heads, ffn_num_hiddens = 16, 4, 24
    ours = TransformerDecoderBlock(
        num_hiddens, ffn_num_hiddens, num_heads, 0.0, 0, norm_first=norm_first, use_bias=True
    )
    ours = randomize_(ours.double())
    theirs = nn.TransformerDecoderLayer(
        num_hiddens,
        num_heads,
        ffn_num_hiddens,
        dropout=0.0,
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
    )
    copy_decoder_block_(ours, theirs)
    X = torch.randn(3, 6, num_hiddens, dtype=torch.float64)
    enc_outputs = torch.randn(3, 4, num_hiddens, dtype=torch.float64)
    enc_valid_lens = torch.tensor([4, 1, 3])
    state = DecoderState.empty(enc_outputs, enc_valid_lens, 1)
    out, state = ours(X, state)
    expected = theirs(
        X,
        enc_outputs,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64),
        memory_key_padding_mask=key_padding_mask(enc_valid_lens, 4),
    )
    torch.testing.assert_close(out, expected, **TOL)
    # The cache holds the projected keys and values, split into heads.
    H = ours.addnorm1.sublayer_input(X)
    assert state.keys[0].shape == state.values[0].shape == (3, num_heads, 6, 4)
    torch.testing.assert_close(state.keys[0], split_heads(ours.self_attention.W_k(H), 4), **TOL)
    torch.testing.assert_close(state.values[0], split_heads(ours.self_attention.W_v(H), 4), **TOL)
    cross = ours.cross_attention
    torch.testing.assert_close(state.cross_keys[0], split_heads(cross.W_k(enc_outputs), 4), **TOL)
    assert state.num_decoded_steps == 6


def make_decoder(norm_first: bool, vocab_size: int = 20, num_blks: int = 3):
    torch.manual_seed(1)
    decoder = TransformerDecoder(vocab_size, 16, 32, 4, num_blks, 0.0, norm_first=norm_first)
    return randomize_(decoder.double(), seed=1)


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_by_step_decoding_equals_decoding_at_once(norm_first):
    decoder = make_decoder(norm_first)
    enc_outputs = torch.randn(2, 5, 16, dtype=torch.float64)
    enc_valid_lens = torch.tensor([5, 3])
    tokens = torch.randint(0, 20, (2, 7))

    logits_at_once, state = decoder(tokens, decoder.init_state(enc_outputs, enc_valid_lens))
    cross_at_once = [w.clone() for w in decoder.cross_attention_weights]
    self_at_once = [w.clone() for w in decoder.self_attention_weights]
    assert state.num_decoded_steps == 7

    state = decoder.init_state(enc_outputs, enc_valid_lens)
    steps = []
    for t in range(7):
        logits, state = decoder(tokens[:, t : t + 1], state)
        assert logits.shape == (2, 1, 20)
        steps.append(logits)
        for i in range(3):  # step t's weights are row t of the all-at-once weights
            self_step = decoder.self_attention_weights[i]
            assert self_step.shape == (2, 4, 1, t + 1)
            torch.testing.assert_close(self_step[..., 0, :], self_at_once[i][..., t, : t + 1])
            cross_step = decoder.cross_attention_weights[i][..., 0, :]
            torch.testing.assert_close(cross_step, cross_at_once[i][..., t, :])
    torch.testing.assert_close(torch.cat(steps, dim=1), logits_at_once, **TOL)
    assert state.num_decoded_steps == 7

    # Two chunks of the sequence (cache of 3 positions, then 4 new ones) agree too.
    state = decoder.init_state(enc_outputs, enc_valid_lens)
    first, state = decoder(tokens[:, :3], state)
    second, state = decoder(tokens[:, 3:], state)
    torch.testing.assert_close(torch.cat([first, second], dim=1), logits_at_once, **TOL)


def test_decoder_is_causal():
    decoder = make_decoder(norm_first=False)
    enc_outputs = torch.randn(2, 5, 16, dtype=torch.float64)
    tokens = torch.randint(0, 20, (2, 6))
    changed = tokens.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 20  # change only the future of position 3
    logits, _ = decoder(tokens, decoder.init_state(enc_outputs))
    logits_changed, _ = decoder(changed, decoder.init_state(enc_outputs))
    torch.testing.assert_close(logits[:, :4], logits_changed[:, :4], **TOL)
    assert not torch.allclose(logits[:, 4:], logits_changed[:, 4:])


def test_decoder_shapes_and_attention_weights():
    decoder = TransformerDecoder(200, 24, 48, 8, 2, 0.5)
    decoder.eval()
    assert decoder.attention_weights is None
    enc_outputs = torch.randn(2, 9, 24)
    state = decoder.init_state(enc_outputs, torch.tensor([9, 4]))
    logits, state = decoder(torch.ones((2, 10), dtype=torch.long), state)
    assert logits.shape == (2, 10, 200)
    assert [w.shape for w in decoder.self_attention_weights] == [(2, 8, 10, 10)] * 2
    assert [w.shape for w in decoder.cross_attention_weights] == [(2, 8, 10, 9)] * 2
    assert torch.all(decoder.cross_attention_weights[0][1, :, :, 4:] == 0)
    assert torch.all(decoder.self_attention_weights[1].triu(diagonal=1) == 0)
    torch.testing.assert_close(
        decoder.attention_weights, decoder.cross_attention_weights[-1].mean(dim=1)
    )


def test_reorder_state_selects_and_repeats_rows():
    decoder = make_decoder(norm_first=True)
    enc_outputs = torch.randn(3, 5, 16, dtype=torch.float64)
    enc_valid_lens = torch.tensor([5, 2, 4])
    tokens = torch.randint(0, 20, (3, 4))
    full, _ = decoder(tokens, decoder.init_state(enc_outputs, enc_valid_lens))

    _, state = decoder(tokens[:, :2], decoder.init_state(enc_outputs, enc_valid_lens))
    index = torch.tensor([2, 0, 2])
    state = decoder.reorder_state(state, index)
    assert state.enc_outputs.shape == (3, 5, 16)
    assert torch.equal(state.enc_valid_lens, enc_valid_lens[index])
    rest, _ = decoder(tokens[index, 2:], state)
    torch.testing.assert_close(rest, full[index, 2:], **TOL)


def test_decoder_with_encoder_decoder_wrapper_and_greedy_decode():
    from attention_book.decoding import greedy_decode
    from attention_book.seq2seq import EncoderDecoder

    torch.manual_seed(0)
    model = EncoderDecoder(
        TransformerEncoder(15, 16, 32, 4, 2, 0.0), TransformerDecoder(12, 16, 32, 4, 2, 0.0)
    )
    src = torch.randint(3, 15, (2, 6))
    src_valid_lens = torch.tensor([6, 4])
    translations = greedy_decode(model, src, src_valid_lens, bos_index=1, eos_index=2, max_len=5)
    for i, translation in enumerate(translations):
        # Teacher-forcing the greedy output reproduces the greedy choices.
        tgt = torch.tensor([[1, *translation.tokens]])
        logits = model(src[i : i + 1], tgt, src_valid_lens[i : i + 1])
        generated = logits.argmax(dim=-1)[0, : len(translation.tokens)]
        assert generated.tolist() == translation.tokens
        assert translation.attention_weights.shape == (len(translation.tokens), 6)


def test_decoder_rejects_bad_input():
    decoder = TransformerDecoder(20, 16, 32, 4, 1, 0.0)
    with pytest.raises(ValueError, match=r"enc_outputs must have shape.*\(2, 5, 8\)"):
        decoder.init_state(torch.randn(2, 5, 8))
    state = decoder.init_state(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match=r"X must be an integer tensor.*\(2,\)"):
        decoder(torch.ones(2, dtype=torch.long), state)


def test_decoder_refuses_to_decode_past_max_len():
    decoder = TransformerDecoder(20, 16, 32, 4, 1, 0.0, max_len=4)
    state = decoder.init_state(torch.randn(1, 5, 16))
    _, state = decoder(torch.ones((1, 3), dtype=torch.long), state)
    with pytest.raises(ValueError, match="max_len=4"):
        decoder(torch.ones((1, 2), dtype=torch.long), state)


def test_beam_search_with_transformer_decoder():
    from attention_book.decoding import beam_search, greedy_decode
    from attention_book.seq2seq import EncoderDecoder

    torch.manual_seed(0)
    model = EncoderDecoder(
        TransformerEncoder(15, 16, 32, 4, 2, 0.0), TransformerDecoder(12, 16, 32, 4, 2, 0.0)
    )
    src = torch.randint(3, 15, (2, 6))
    src_valid_lens = torch.tensor([6, 4])
    greedy = greedy_decode(model, src, src_valid_lens, bos_index=1, eos_index=2, max_len=5)
    beam_1 = beam_search(model, src, src_valid_lens, 1, 2, max_len=5, beam_size=1)
    assert [t.tokens for t in beam_1] == [t.tokens for t in greedy]
    beam_3 = beam_search(model, src, src_valid_lens, 1, 2, max_len=5, beam_size=3)
    for i, translation in enumerate(beam_3):
        assert translation.attention_weights.shape == (len(translation.tokens), 6)
        # The score is the log-probability of the tokens (and of <eos>, if it was generated
        # before max_len) under teacher forcing.
        targets = translation.tokens + ([2] if len(translation.tokens) < 5 else [])
        tgt = torch.tensor([[1, *targets[:-1]]])
        with torch.no_grad():
            logits = model(src[i : i + 1], tgt, src_valid_lens[i : i + 1])
        log_probs = torch.log_softmax(logits[0], dim=-1)
        expected = log_probs[torch.arange(len(targets)), torch.tensor(targets)].sum()
        assert translation.score == pytest.approx(float(expected), abs=1e-4)


# Constructors: the d2l/seed positional signatures, options by keyword, passed down ----------


def test_seed_positional_calls_still_work():
    ffn = PositionWiseFFN(4, 4, 8)  # the seed's own example
    rows = ffn(torch.ones((2, 3, 4)))
    assert rows.shape == (2, 3, 8)
    assert torch.equal(rows[:, 0], rows[:, 1])
    AddNorm(4, 0.5)
    TransformerEncoderBlock(24, 48, 8, 0.5, True)
    TransformerEncoder(200, 24, 48, 8, 2, 0.5, True)
    TransformerDecoderBlock(24, 48, 8, 0.5, 0)
    TransformerDecoder(200, 24, 48, 8, 2, 0.5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PositionWiseFFN(4, 4, 8, "gelu"),
        lambda: AddNorm(4, 0.5, True),
        lambda: TransformerEncoderBlock(24, 48, 8, 0.5, True, True),
        lambda: TransformerEncoder(200, 24, 48, 8, 2, 0.5, True, True),
        lambda: TransformerDecoderBlock(24, 48, 8, 0.5, 0, True),
        lambda: TransformerDecoder(200, 24, 48, 8, 2, 0.5, True),
    ],
)
def test_options_beyond_the_positional_signature_are_keyword_only(make):
    with pytest.raises(TypeError):
        make()


@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_stacks_pass_every_option_to_their_blocks(stack):
    options = {"use_bias": True, "norm_first": True, "activation": "gelu"}
    if stack == "encoder":
        model = TransformerEncoder(50, 16, 32, 4, 2, 0.0, **options)
    else:
        model = TransformerDecoder(50, 16, 32, 4, 2, 0.0, **options)
    for blk in model.blks:
        assert isinstance(blk.ffn.activation, nn.GELU)
        assert blk.self_attention.W_q.bias is not None
        assert all(norm.norm_first for norm in (blk.addnorm1, blk.addnorm2))


# The key/value cache -----------------------------------------------------------------------


def test_attend_projected_equals_multihead_attention():
    torch.manual_seed(0)
    attention = randomize_(MultiHeadAttention(16, 4, 0.0, True).double())
    queries = torch.randn(2, 3, 16, dtype=torch.float64)
    keys_values = torch.randn(2, 5, 16, dtype=torch.float64)
    valid_lens = torch.tensor([5, 2])
    K = project_heads(attention.W_k, keys_values, 4)
    V = project_heads(attention.W_v, keys_values, 4)
    assert K.shape == (2, 4, 5, 4)
    torch.testing.assert_close(
        attend_projected(attention, queries, K, V, valid_lens),
        attention(queries, keys_values, keys_values, valid_lens),
        **TOL,
    )


def test_decoding_with_the_cache_projects_only_the_new_position():
    decoder = make_decoder(norm_first=False)
    rows = {"self": [], "cross": []}
    blk = decoder.blks[1]
    blk.self_attention.W_k.register_forward_hook(lambda m, i, o: rows["self"].append(i[0].shape[1]))
    blk.cross_attention.W_k.register_forward_hook(
        lambda m, i, o: rows["cross"].append(i[0].shape[1])
    )
    state = decoder.init_state(torch.randn(2, 5, 16, dtype=torch.float64))
    for t in range(4):
        _, state = decoder(torch.full((2, 1), t, dtype=torch.long), state)
    assert rows == {"self": [1, 1, 1, 1], "cross": [5]}  # the source is projected once
    assert state.keys[1].shape == (2, 4, 4, 4)  # (batch, num_heads, num_decoded_steps, head_dim)

    decoder.use_cache = False  # without the cache every call projects the whole prefix again
    rows = {"self": [], "cross": []}
    state = decoder.init_state(torch.randn(2, 5, 16, dtype=torch.float64))
    for t in range(4):
        _, state = decoder(torch.full((2, 1), t, dtype=torch.long), state)
    assert rows == {"self": [1, 2, 3, 4], "cross": [5, 5, 5, 5]}
    assert state.num_decoded_steps == 4 and state.keys == [None] * 3


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoding_without_the_cache_gives_the_same_logits_and_weights(norm_first):
    decoder = make_decoder(norm_first)
    enc_outputs = torch.randn(2, 5, 16, dtype=torch.float64)
    enc_valid_lens = torch.tensor([5, 3])
    tokens = torch.randint(0, 20, (2, 6))
    outputs = {}
    for use_cache in (True, False):
        decoder.use_cache = use_cache
        state = decoder.init_state(enc_outputs, enc_valid_lens)
        steps, weights = [], []
        for t in range(6):
            logits, state = decoder(tokens[:, t : t + 1], state)
            steps.append(logits)
            weights.append(decoder.self_attention_weights[-1])
        outputs[use_cache] = torch.cat(steps, dim=1), weights
    torch.testing.assert_close(outputs[True][0], outputs[False][0], **TOL)
    for cached, uncached in zip(outputs[True][1], outputs[False][1], strict=True):
        torch.testing.assert_close(cached, uncached, **TOL)


def test_cached_and_uncached_greedy_decoding_give_identical_tokens():
    from attention_book.decoding import beam_search, greedy_decode
    from attention_book.seq2seq import EncoderDecoder

    torch.manual_seed(0)
    model = EncoderDecoder(
        TransformerEncoder(15, 16, 32, 4, 2, 0.0), TransformerDecoder(12, 16, 32, 4, 2, 0.0)
    )
    randomize_(model, seed=3)  # varied logits: sentences of several lengths
    src = torch.randint(3, 15, (4, 7))
    src_valid_lens = torch.tensor([7, 4, 6, 2])
    results = {}
    for use_cache in (True, False):
        model.decoder.use_cache = use_cache
        greedy = greedy_decode(model, src, src_valid_lens, 1, 2, max_len=12)
        beam = beam_search(model, src, src_valid_lens, 1, 2, max_len=6, beam_size=3)
        results[use_cache] = greedy, beam
    for cached, uncached in zip(*(r[0] + r[1] for r in results.values()), strict=True):
        assert cached.tokens == uncached.tokens
        assert cached.score == pytest.approx(uncached.score, abs=1e-5)
        torch.testing.assert_close(cached.attention_weights, uncached.attention_weights)
    assert max(len(t.tokens) for t in results[True][0]) > 3  # the test decodes long enough


# Tied embeddings (Vaswani et al., 2017, section 3.4): an option, off by default -------------


def test_the_decoder_ties_its_embedding_and_output_layer_only_when_asked():
    untied = TransformerDecoder(50, 16, 32, 4, 2, 0.0)
    assert untied.dense.weight is not untied.embedding.weight
    tied = TransformerDecoder(50, 16, 32, 4, 2, 0.0, tie_embeddings=True)
    # One Parameter, one storage: the output layer's weight is the embedding table itself.
    assert tied.dense.weight is tied.embedding.weight
    assert tied.dense.weight.data_ptr() == tied.embedding.weight.data_ptr()
    shared = [name for name, p in tied.named_parameters() if p is tied.embedding.weight]
    assert shared == ["embedding.weight"]
    # The count drops by exactly one vocab_size x num_hiddens matrix (the output bias stays).
    assert num_parameters(untied) - num_parameters(tied) == 50 * 16


def test_tied_weights_collect_the_gradients_of_both_uses():
    torch.manual_seed(0)
    tied = TransformerDecoder(30, 16, 32, 4, 2, 0.0, tie_embeddings=True).double()
    untied = TransformerDecoder(30, 16, 32, 4, 2, 0.0).double()
    untied.load_state_dict(tied.state_dict())  # the same numbers, in two separate tensors
    assert torch.equal(untied.dense.weight, untied.embedding.weight)
    tokens = torch.randint(0, 30, (2, 6))
    enc_outputs = torch.randn(2, 4, 16, dtype=torch.float64)
    for decoder in (tied, untied):
        logits, _ = decoder(tokens, decoder.init_state(enc_outputs))
        (logits**2).mean().backward()
    both = untied.embedding.weight.grad + untied.dense.weight.grad
    torch.testing.assert_close(tied.embedding.weight.grad, both, **TOL)
    # Both uses contribute: neither gradient alone is the tied one.
    assert untied.embedding.weight.grad.abs().sum() > 0
    assert untied.dense.weight.grad.abs().sum() > 0


def test_three_way_tying_shares_the_encoders_table_when_the_vocabularies_are_one():
    encoder = TransformerEncoder(40, 16, 32, 4, 2, 0.0)
    decoder = TransformerDecoder(
        40, 16, 32, 4, 2, 0.0, embedding=encoder.embedding, tie_embeddings=True
    )
    assert decoder.embedding is encoder.embedding
    assert decoder.dense.weight is encoder.embedding.weight
    separate = nn.ModuleList([TransformerEncoder(40, 16, 32, 4, 2, 0.0),
                              TransformerDecoder(40, 16, 32, 4, 2, 0.0)])  # fmt: skip
    assert num_parameters(separate) - num_parameters(nn.ModuleList([encoder, decoder])) == (
        2 * 40 * 16
    )


@pytest.mark.parametrize(
    "embedding,got",
    [(nn.Embedding(40, 16), r"\(40, 16\)"), (nn.Embedding(50, 8), r"\(50, 8\)")],
    ids=["another vocabulary", "another width"],
)
def test_an_embedding_of_the_wrong_shape_cannot_be_shared(embedding, got):
    message = rf"embedding must have shape \(vocab_size, num_hiddens\) = \(50, 16\), got {got}"
    with pytest.raises(ValueError, match=message):
        TransformerDecoder(50, 16, 32, 4, 2, 0.0, embedding=embedding, tie_embeddings=True)
    with pytest.raises(ValueError, match="embedding"):
        TransformerDecoder(50, 16, 32, 4, 2, 0.0, embedding=embedding)


def test_tying_options_are_keyword_only_and_off_by_default():
    parameters = inspect.signature(TransformerDecoder).parameters
    for name, default in (("embedding", None), ("tie_embeddings", False)):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default is default
