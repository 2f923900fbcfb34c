"""Decoding with the Transformer (batching, padding, the key/value cache) and beam search's limits.

`tests/package/test_seq2seq.py` covers greedy and beam search with the recurrent models, and
`tests/package/test_transformer.py` that cached and uncached decoding give the same tokens;
these tests check what batching and padding must not change. The last tests decode a hand-built
table of next-token probabilities, the counterexample of the Bahdanau chapter: beam search gives no
guarantee of beating greedy decoding, and a finished hypothesis leaves the beam.
"""

import math

import pytest
import torch
from repo import ROOT
from torch import nn

from attention_book.decoding import beam_search, greedy_decode
from attention_book.seq2seq import EncoderDecoder
from attention_book.transformer import TransformerEncoder
from attention_book.transformer_decoder import TransformerDecoder
from booktools.markdown import fences


def make_model(seed: int = 1) -> EncoderDecoder:
    torch.manual_seed(seed)
    model = EncoderDecoder(
        TransformerEncoder(15, 16, 32, 4, 2, 0.0), TransformerDecoder(12, 16, 32, 4, 2, 0.0)
    ).double()
    with torch.no_grad():  # sharper outputs than at initialization: varied translations
        model.decoder.dense.weight.mul_(4)
    return model.eval()


@pytest.mark.parametrize("use_cache", [True, False])
def test_batched_greedy_decoding_equals_decoding_each_sentence_alone(use_cache):
    model = make_model()
    model.decoder.use_cache = use_cache
    src = torch.randint(3, 15, (4, 7))
    src_valid_lens = torch.tensor([7, 3, 5, 1])
    batched = greedy_decode(model, src, src_valid_lens, 1, 2, max_len=10)
    for i, translation in enumerate(batched):
        n = int(src_valid_lens[i])
        (alone,) = greedy_decode(model, src[i : i + 1, :n], None, 1, 2, max_len=10)
        assert alone.tokens == translation.tokens
        assert alone.score == pytest.approx(translation.score, abs=1e-9)
        # The weights on the padding are zero, the rest equal the unpadded run's.
        assert torch.all(translation.attention_weights[:, n:] == 0)
        torch.testing.assert_close(translation.attention_weights[:, :n], alone.attention_weights)
    assert len({len(t.tokens) for t in batched}) > 1  # sentences of several lengths


def test_padding_tokens_do_not_change_the_translation():
    model = make_model(seed=3)
    src = torch.randint(3, 15, (2, 6))
    src_valid_lens = torch.tensor([6, 3])
    other = src.clone()
    other[1, 3:] = 7  # only positions that valid_lens marks as padding
    first = greedy_decode(model, src, src_valid_lens, 1, 2, max_len=8)
    second = greedy_decode(model, other, src_valid_lens, 1, 2, max_len=8)
    assert [t.tokens for t in first] == [t.tokens for t in second]
    assert all(t.tokens for t in first)  # something was generated


def test_beam_search_without_the_cache_reorders_the_kept_tokens():
    # Without the cache the state keeps the tokens decoded so far; beam search must reorder
    # them with the beams, or later steps would read another hypothesis's prefix.
    model = make_model(seed=0)
    src = torch.randint(3, 15, (2, 6))
    src_valid_lens = torch.tensor([6, 4])
    results = {}
    for use_cache in (True, False):
        model.decoder.use_cache = use_cache
        results[use_cache] = beam_search(model, src, src_valid_lens, 1, 2, max_len=7, beam_size=3)
    for cached, uncached in zip(results[True], results[False], strict=True):
        assert cached.tokens == uncached.tokens
        assert cached.score == pytest.approx(uncached.score, abs=1e-9)
    assert max(len(t.tokens) for t in results[True]) > 2  # the beams ran several steps


def test_greedy_decoding_restores_training_mode():
    model = make_model().train()
    greedy_decode(model, torch.randint(3, 15, (1, 4)), None, 1, 2, max_len=3)
    assert model.training


@pytest.mark.parametrize("max_len", [0, -1])
def test_greedy_decoding_rejects_a_max_len_below_one(max_len):
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(make_model(), torch.randint(3, 15, (1, 4)), None, 1, 2, max_len=max_len)


# A hand-built "model": next-token probabilities looked up by prefix (the Bahdanau chapter's
# counterexample). Tokens: <bos>, <eos>, a, b, c.
BOS, EOS, A, B, C = range(5)


class IgnoreSource(nn.Module):
    def forward(self, src, src_valid_lens):
        return src


class TableDecoder(nn.Module):
    """Next-token probabilities from a table indexed by the prefix; the state is the prefix.

    It records how many hypotheses each call decodes, in `batch_sizes`.
    """

    def __init__(self, table, otherwise):
        super().__init__()
        self.table, self.otherwise, self.batch_sizes = table, otherwise, []

    def init_state(self, enc_outputs, enc_valid_lens):
        return torch.zeros(len(enc_outputs), 0, dtype=torch.long)

    def forward(self, tokens, state):
        self.batch_sizes.append(len(tokens))
        prefixes = torch.cat([state, tokens], dim=1)
        probs = torch.zeros(len(prefixes), 5)
        for row, prefix in zip(probs, prefixes[:, 1:].tolist(), strict=True):
            for token, p in self.table.get(tuple(prefix), self.otherwise).items():
                row[token] = p
        return probs.log()[:, None], prefixes

    def reorder_state(self, state, index):
        return state[index]


COUNTEREXAMPLE = {
    (): {A: 0.40, B: 0.35, C: 0.25},
    (A,): {C: 0.34, A: 0.33, B: 0.33},
    (A, C): {EOS: 1.0},
    (B,): {A: 0.60, B: 0.40},
}
OTHERWISE = {EOS: 0.4, A: 0.3, B: 0.2, C: 0.1}


def table_model(table=COUNTEREXAMPLE, otherwise=OTHERWISE) -> EncoderDecoder:
    return EncoderDecoder(IgnoreSource(), TableDecoder(table, otherwise))


def decode_table(model, beam_size=None, max_len=5):
    src = torch.zeros(1, 1, dtype=torch.long)
    if beam_size is None:
        return greedy_decode(model, src, None, BOS, EOS, max_len=max_len)[0]
    return beam_search(model, src, None, BOS, EOS, max_len=max_len, beam_size=beam_size)[0]


def test_beam_search_can_return_a_less_probable_sentence_than_greedy_decoding():
    # Greedy: a (0.4), c (0.34), <eos> (1.0). A beam of 2 keeps b a (0.21) and b b (0.14) at
    # step 2 and drops greedy's a c (0.136); every way out of b ends below 0.136.
    greedy = decode_table(table_model())
    assert greedy.tokens == [A, C]
    assert greedy.score == pytest.approx(math.log(0.40 * 0.34 * 1.0), abs=1e-6)
    beam = decode_table(table_model(), beam_size=2)
    assert beam.tokens == [B, A]
    assert beam.score == pytest.approx(math.log(0.35 * 0.60 * 0.4), abs=1e-6)
    assert beam.score < greedy.score
    # A beam of 1 is greedy decoding, and a beam of 3 keeps a c at step 2 and finds it again.
    for beam_size in (1, 3):
        found = decode_table(table_model(), beam_size=beam_size)
        assert found.tokens == greedy.tokens
        assert found.score == pytest.approx(greedy.score, abs=1e-6)


def test_a_finished_hypothesis_leaves_the_beam_and_is_not_replaced():
    # Step 1's two best extensions are a (0.5) and <eos> (0.3): the empty sentence finishes and
    # takes one of the two places, so step 2 extends a alone, not a and b (0.2).
    table = {(): {A: 0.5, EOS: 0.3, B: 0.2}, (A,): {EOS: 0.9, A: 0.1}}
    model = table_model(table, otherwise={EOS: 1.0})
    result = decode_table(model, beam_size=2)
    assert model.decoder.batch_sizes == [1, 1]
    assert result.tokens == [A]
    assert result.score == pytest.approx(math.log(0.5 * 0.9), abs=1e-6)


def test_beam_search_needs_no_parameters_in_the_model():
    model = table_model()
    assert not list(model.parameters())
    assert decode_table(model, beam_size=2).tokens == [B, A]


def test_the_bahdanau_chapter_shows_this_counterexample(capsys):
    # The block of the chapter's deep dive on decoding runs on its own; here it runs again, and
    # its table must be the one above, so that the page and the tests show the same thing.
    page = ROOT / "docs" / "chapters" / "bahdanau-decoding.md"
    blocks = ["\n".join(fence.body) for fence in fences(page.read_text(encoding="utf-8"))]
    (block,) = [b for b in blocks if "class TableDecoder" in b]
    namespace: dict = {}
    exec(compile(block, str(page), "exec"), namespace)
    assert namespace["NEXT"] == COUNTEREXAMPLE
    assert namespace["OTHERWISE"] == OTHERWISE
    assert namespace["results"]["beam of 2"].score < namespace["greedy"].score
    assert "beam of 2: b a, probability 0.084" in capsys.readouterr().out
