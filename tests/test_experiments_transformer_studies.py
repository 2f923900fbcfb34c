import pytest
import torch

from attention_book.data.text import tokenize
from attention_book.decoding import greedy_decode
from attention_book.experiments.bahdanau import bahdanau_data
from attention_book.experiments.transformer import transformer_make_model
from attention_book.experiments.transformer_studies import (
    LENGTH_SPLIT_CONFIG,
    length_split,
    transformer_decode_steps,
)


@pytest.fixture(scope="module")
def data():
    return bahdanau_data()


def test_length_split_trains_on_short_sources_and_tests_on_every_length(data):
    max_length = LENGTH_SPLIT_CONFIG.max_train_length
    loader, held_out = length_split(data, max_length)
    lengths = [len(tokenize(source)) for source, _ in data.train_pairs]
    assert len(loader.dataset) == sum(n <= max_length for n in lengths)
    seen = 0
    for src, src_valid_len, *_ in loader:
        assert int(src_valid_len.max()) <= max_length + 1  # + <eos>
        assert src.shape[1] == int(src_valid_len.max())  # trimmed like bahdanau_data's batches
        seen += len(src)
    assert seen == len(loader.dataset)
    assert held_out == data.valid_pairs + data.test_pairs
    assert max(len(tokenize(source)) for source, _ in held_out) >= 40
    # The same seed gives the same batches: both models of the split see the same data.
    first, second = (next(iter(length_split(data, max_length)[0]))[0] for _ in range(2))
    assert torch.equal(first, second)


def test_decode_steps_runs_the_given_number_of_steps_with_and_without_cache():
    torch.manual_seed(0)
    model = transformer_make_model(20, 15).eval()
    src = torch.randint(3, 20, (2, 6))
    valid_lens = torch.tensor([6, 4])
    outputs = {}
    for use_cache in (True, False):
        model.decoder.use_cache = use_cache
        outputs[use_cache] = transformer_decode_steps(model, src, valid_lens, 1, 9)
    assert outputs[True].shape == (2, 9)
    assert torch.equal(outputs[True], outputs[False])
    # It is greedy decoding that does not stop at <eos>: with an <eos> index that is never
    # generated, greedy_decode gives the same tokens.
    never = int(outputs[True].max()) + 1
    greedy = greedy_decode(model, src, valid_lens, 1, never, max_len=9)
    assert [t.tokens for t in greedy] == outputs[True].tolist()
