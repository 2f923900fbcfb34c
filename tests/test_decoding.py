"""Decoding with the Transformer: batching, padding and the key/value cache.

`tests/test_seq2seq.py` covers greedy and beam search with the recurrent models, and
`tests/test_transformer.py` that cached and uncached decoding give the same tokens; these tests
check what batching and padding must not change.
"""

import pytest
import torch

from attention_book.decoding import beam_search, greedy_decode
from attention_book.seq2seq import EncoderDecoder
from attention_book.transformer import TransformerDecoder, TransformerEncoder


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
