import itertools

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attention_book.attention import DotProductAttention
from attention_book.decoding import beam_search, greedy_decode
from attention_book.losses import masked_cross_entropy
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from attention_book.training.metrics import num_parameters

SRC_VOCAB, TGT_VOCAB, EMBED, HIDDENS = 11, 13, 8, 16
BOS, EOS = 1, 2


def make_model(attention: bool, rnn: str = "gru", num_layers: int = 2, seed: int = 0, scorer=None):
    torch.manual_seed(seed)
    encoder = Seq2SeqEncoder(SRC_VOCAB, EMBED, HIDDENS, num_layers, rnn=rnn)
    decoder_class = Seq2SeqAttentionDecoder if attention else Seq2SeqDecoder
    kwargs = {"attention": scorer} if attention else {}
    decoder = decoder_class(TGT_VOCAB, EMBED, HIDDENS, num_layers, rnn=rnn, **kwargs)
    return EncoderDecoder(encoder, decoder).eval()


def toy_batch(batch=4, src_steps=7, tgt_steps=5, seed=1):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(3, SRC_VOCAB, (batch, src_steps), generator=generator)
    tgt = torch.randint(3, TGT_VOCAB, (batch, tgt_steps), generator=generator)
    src_valid_lens = torch.randint(1, src_steps + 1, (batch,), generator=generator)
    src_valid_lens[0] = src_steps
    return src, tgt, src_valid_lens


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("attention", [False, True])
def test_shapes(attention, rnn):
    model = make_model(attention, rnn)
    src, tgt, valid = toy_batch()
    enc_outputs, enc_state = model.encoder(src, valid)
    assert enc_outputs.shape == (4, 7, HIDDENS)
    hidden = enc_state[0] if rnn == "lstm" else enc_state
    assert hidden.shape == (2, 4, HIDDENS)
    logits = model(src, tgt, valid)
    assert logits.shape == (4, 5, TGT_VOCAB)
    if attention:
        assert model.decoder.attention_weights.shape == (4, 5, 7)


def test_encoder_matches_unpadded_runs():
    # Packing means the final state is the state after the last real token, and padding
    # tokens (whatever they are) change nothing.
    model = make_model(False)
    src, _, valid = toy_batch()
    outputs, state = model.encoder(src, valid)
    for i in range(src.shape[0]):
        n = int(valid[i])
        one_outputs, one_state = model.encoder(src[i : i + 1, :n])
        torch.testing.assert_close(outputs[i, :n], one_outputs[0])
        torch.testing.assert_close(state[:, i], one_state[:, 0])
        assert torch.all(outputs[i, n:] == 0)


def test_encoder_equals_torch_gru_without_padding():
    model = make_model(False, num_layers=1)
    src, _, _ = toy_batch()
    outputs, state = model.encoder(src)
    gru = nn.GRU(EMBED, HIDDENS, batch_first=True)
    gru.load_state_dict(model.encoder.rnn.state_dict())
    expected_outputs, expected_state = gru(model.encoder.embedding(src))
    torch.testing.assert_close(outputs, expected_outputs)
    torch.testing.assert_close(state, expected_state)


def test_plain_decoder_is_a_gru_over_embedding_and_fixed_context():
    model = make_model(False, num_layers=1)
    src, tgt, valid = toy_batch()
    enc_outputs = model.encoder(src, valid)
    logits, _ = model.decoder(tgt, model.decoder.init_state(enc_outputs, valid))
    _, enc_state = enc_outputs
    context = enc_state[-1][:, None].expand(-1, tgt.shape[1], -1)
    inputs = torch.cat([model.decoder.embedding(tgt), context], dim=-1)
    outputs, _ = model.decoder.rnn(inputs, enc_state)
    torch.testing.assert_close(logits, model.decoder.dense(outputs))


def test_attention_decoder_teacher_forcing_equals_step_by_step():
    model = make_model(True)
    src, tgt, valid = toy_batch()
    state = model.decoder.init_state(model.encoder(src, valid), valid)
    full_logits, _ = model.decoder(tgt, state)
    full_weights = model.decoder.attention_weights
    step_logits, step_weights = [], []
    for t in range(tgt.shape[1]):
        logits, state = model.decoder(tgt[:, t : t + 1], state)
        step_logits.append(logits)
        step_weights.append(model.decoder.attention_weights)
    torch.testing.assert_close(full_logits, torch.cat(step_logits, dim=1))
    torch.testing.assert_close(full_weights, torch.cat(step_weights, dim=1))


def test_attention_weights_are_zero_on_padding_and_sum_to_one():
    model = make_model(True)
    src, tgt, valid = toy_batch(batch=6, src_steps=9)
    model(src, tgt, valid)
    weights = model.decoder.attention_weights  # (batch, num_tgt_steps, num_src_steps)
    for i, n in enumerate(valid.tolist()):
        assert torch.all(weights[i, :, n:] == 0)
        assert torch.all(weights[i, :, :n] > 0)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(6, 5))


def test_decoder_attention_equals_the_additive_attention_module():
    # The decoder projects the keys once per sentence; it must match calling the module.
    model = make_model(True, num_layers=1).train()  # dropout 0, so train mode is exact too
    src, tgt, valid = toy_batch()
    enc_outputs, enc_state = model.encoder(src, valid)
    logits, _ = model.decoder(tgt, model.decoder.init_state((enc_outputs, enc_state), valid))
    state, outputs, weights = enc_state, [], []
    for t in range(tgt.shape[1]):
        context = model.decoder.attention(state[-1][:, None], enc_outputs, enc_outputs, valid)
        weights.append(model.decoder.attention.attention_weights)
        embedded = model.decoder.embedding(tgt[:, t : t + 1])
        output, state = model.decoder.rnn(torch.cat([embedded, context], dim=-1), state)
        outputs.append(output)
    torch.testing.assert_close(logits, model.decoder.dense(torch.cat(outputs, dim=1)))
    torch.testing.assert_close(model.decoder.attention_weights, torch.cat(weights, dim=1))


def test_attention_query_is_previous_decoder_state():
    # The first step's query is the encoder's final state: rebuild that step by hand.
    model = make_model(True, num_layers=1)
    src, tgt, valid = toy_batch()
    enc_outputs, enc_state = model.encoder(src, valid)
    model.decoder(tgt[:, :1], model.decoder.init_state((enc_outputs, enc_state), valid))
    attention = model.decoder.attention
    query = attention.W_q(enc_state[-1])[:, None, None]  # (batch, 1, 1, num_hiddens)
    keys = attention.W_k(enc_outputs)[:, None]  # (batch, 1, num_src_steps, num_hiddens)
    scores = attention.w_v(torch.tanh(query + keys)).squeeze(-1)  # (batch, 1, num_src_steps)
    mask = torch.arange(src.shape[1])[None, None] < valid[:, None, None]
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(model.decoder.attention_weights, expected)


def sequence_score(model, src, valid, tokens, eos=EOS):
    """Log-probability of `tokens` (+ <eos> if given) under the model, by teacher forcing."""
    inputs = torch.tensor([[BOS, *tokens]])
    labels = torch.tensor([[*tokens, EOS]])
    with torch.no_grad():
        log_probs = F.log_softmax(model(src, inputs, valid), dim=-1)
    chosen = log_probs.gather(2, labels[..., None])[0, :, 0]
    return float(chosen.sum()) if eos is not None else float(chosen[:-1].sum())


@pytest.mark.parametrize("attention", [False, True])
def test_greedy_decode_scores_and_attention(attention):
    model = make_model(attention)
    src, _, valid = toy_batch()
    results = greedy_decode(model, src, valid, BOS, EOS, max_len=6)
    assert len(results) == 4
    for i, result in enumerate(results):
        assert EOS not in result.tokens and len(result.tokens) <= 6
        eos = EOS if len(result.tokens) < 6 else None
        one_src, one_valid = src[i : i + 1], valid[i : i + 1]
        expected = sequence_score(model, one_src, one_valid, result.tokens, eos)
        assert result.score == pytest.approx(expected, abs=1e-4)
        if attention:
            n = int(valid[i])
            assert result.attention_weights.shape == (len(result.tokens), 7)
            assert torch.all(result.attention_weights[:, n:] == 0)
        else:
            assert result.attention_weights is None


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.parametrize("attention", [False, True])
def test_beam_size_one_is_greedy(attention, rnn):
    for seed in range(3):
        model = make_model(attention, rnn, seed=seed)
        src, _, valid = toy_batch(seed=seed)
        greedy = greedy_decode(model, src, valid, BOS, EOS, max_len=8)
        beam = beam_search(model, src, valid, BOS, EOS, max_len=8, beam_size=1)
        for g, b in zip(greedy, beam, strict=True):
            assert b.tokens == g.tokens
            assert b.score == pytest.approx(g.score, abs=1e-4)
            if attention:
                torch.testing.assert_close(b.attention_weights, g.attention_weights)


@pytest.mark.parametrize("attention", [False, True])
def test_beam_search_scores_are_log_probabilities_of_its_tokens(attention):
    # Nothing is claimed against greedy decoding: beam search can do worse
    # (tests/package/test_decoding.py).
    model = make_model(attention)
    src, _, valid = toy_batch(batch=6)
    beam = beam_search(model, src, valid, BOS, EOS, max_len=8, beam_size=4)
    for i, b in enumerate(beam):
        eos = EOS if len(b.tokens) < 8 else None
        expected = sequence_score(model, src[i : i + 1], valid[i : i + 1], b.tokens, eos)
        assert b.score == pytest.approx(expected, abs=1e-4)


def test_wide_beam_finds_the_most_probable_sequence():
    # With a beam wider than the number of hypotheses, beam search is exhaustive: compare it
    # with brute-force enumeration of every output of up to max_len tokens.
    torch.manual_seed(0)
    vocab = 4  # tokens 0..3 with <bos>=1, <eos>=2
    encoder = Seq2SeqEncoder(5, 4, 6, 1)
    model = EncoderDecoder(encoder, Seq2SeqAttentionDecoder(vocab, 4, 6, 1)).eval()
    src, valid = torch.tensor([[3, 4, 1, 0]]), torch.tensor([3])
    max_len = 3
    best = max(
        (
            (sequence_score(model, src, valid, list(seq), EOS if n < max_len else None), seq)
            for n in range(max_len + 1)
            for seq in itertools.product([0, 1, 3], repeat=n)
        ),
    )
    result = beam_search(model, src, valid, BOS, EOS, max_len=max_len, beam_size=100)[0]
    assert result.score == pytest.approx(best[0], abs=1e-5)
    assert tuple(result.tokens) == best[1]


def test_dot_product_attention_can_replace_additive():
    model = make_model(True, scorer=DotProductAttention(dropout=0.0))
    src, tgt, valid = toy_batch()
    logits = model(src, tgt, valid)
    assert logits.shape == (4, 5, TGT_VOCAB)
    torch.testing.assert_close(model.decoder.attention_weights.sum(-1), torch.ones(4, 5))


def test_parameter_counts():
    plain, attention = make_model(False, num_layers=1), make_model(True, num_layers=1)
    gru = 3 * (HIDDENS * (EMBED + HIDDENS) + HIDDENS * HIDDENS + 2 * HIDDENS)
    expected_plain = (
        SRC_VOCAB * EMBED  # source embedding
        + 3 * (HIDDENS * EMBED + HIDDENS * HIDDENS + 2 * HIDDENS)  # encoder GRU
        + TGT_VOCAB * EMBED  # target embedding
        + gru  # decoder GRU (input: embedding and context)
        + HIDDENS * TGT_VOCAB
        + TGT_VOCAB  # output layer
    )
    assert num_parameters(plain) == expected_plain
    # Additive attention adds W_q, W_k (num_hiddens x num_hiddens) and w_v (num_hiddens).
    assert num_parameters(attention) == expected_plain + 2 * HIDDENS * HIDDENS + HIDDENS


def test_training_step_reduces_loss():
    model = make_model(True).train()
    src, tgt, valid = toy_batch()
    labels = torch.roll(tgt, -1, dims=1)
    tgt_valid = torch.tensor([5, 4, 3, 5])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(20):
        loss = masked_cross_entropy(model(src, tgt, valid), labels, tgt_valid)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.encoder(torch.zeros(3, dtype=torch.long)), r"src must have shape .*\(3,\)"),
        (
            lambda m: m.encoder(torch.zeros(2, 4, dtype=torch.long), torch.tensor([1, 2, 3])),
            r"valid_lens must have shape \(batch,\) = \(2,\), got shape \(3,\)",
        ),
        (
            lambda m: m.encoder(torch.zeros(2, 4, dtype=torch.long), torch.tensor([1, 5])),
            r"valid_lens must lie in \[1, num_steps=4\]",
        ),
        (
            lambda m: m(torch.zeros(2, 4, dtype=torch.long), torch.zeros(3, 4, dtype=torch.long)),
            r"same batch size, got src \(2, 4\) and tgt \(3, 4\)",
        ),
        (
            lambda m: beam_search(m, torch.zeros(1, 4, dtype=torch.long), None, BOS, EOS, 5, 0),
            r"beam_size must be at least 1, got 0",
        ),
        (
            lambda m: greedy_decode(m, torch.zeros(4, dtype=torch.long), None, BOS, EOS, 5),
            r"src must have shape \(batch, num_steps\).*got shape \(4,\)",
        ),
        (
            lambda m: masked_cross_entropy(
                torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long), torch.tensor([1, 2])
            ),
            r"logits .* got logits \(2, 3, 5\) and labels \(2, 4\)",
        ),
        (
            lambda m: masked_cross_entropy(
                torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long), torch.tensor([1])
            ),
            r"valid_lens must have shape \(batch,\) = \(2,\), got \(1,\)",
        ),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call(make_model(True))


def test_unknown_rnn_raises():
    with pytest.raises(ValueError, match="rnn must be 'gru' or 'lstm', got 'rnn'"):
        Seq2SeqEncoder(5, 4, 4, 1, rnn="rnn")
