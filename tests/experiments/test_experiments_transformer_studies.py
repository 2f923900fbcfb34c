import pytest
import torch

from attention_book.data.text import tokenize
from attention_book.decoding import greedy_decode
from attention_book.experiments.bahdanau import bahdanau_data
from attention_book.experiments.transformer import transformer_make_model
from attention_book.experiments.transformer_studies import LENGTH_SPLIT_CONFIG, length_split
from attention_book.experiments.transformer_timings import transformer_decode_steps


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


def test_the_warmup_stack_is_the_post_norm_stack_with_the_main_runs_schedule():
    from attention_book.experiments.transformer_studies import (
        NORM_CONFIG,
        NORM_PROBE,
        NORM_WARMUP_CONFIG,
        NORM_WARMUP_PROBE,
        RUNS,
        transformer_norm_run,
        transformer_norm_warmup_run,
        transformer_studies_key,
    )

    # A run of its own: the comparison it joins keeps its configuration and its key.
    assert NORM_WARMUP_CONFIG.norm == NORM_CONFIG and NORM_WARMUP_PROBE.norm == NORM_PROBE
    names = [run.name for run in RUNS]
    assert "transformer-norm" in names and "transformer-norm-warmup" in names
    assert transformer_studies_key(NORM_WARMUP_CONFIG) != transformer_studies_key(NORM_CONFIG)
    # The same weights and first batch (the first loss is measured before any step), then a
    # smaller first step: the schedule starts at 1 / warmup_steps of the peak.
    without = transformer_norm_run(NORM_PROBE)["post-norm"]
    (warm,) = transformer_norm_warmup_run(NORM_WARMUP_PROBE).values()
    assert len(warm["step_loss"]) == len(without["step_loss"]) == NORM_PROBE.num_steps
    assert warm["step_loss"][0] == without["step_loss"][0]
    assert warm["step_loss"][1] != without["step_loss"][1]
    assert warm["num_parameters"] == without["num_parameters"]
