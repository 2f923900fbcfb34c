import subprocess
import sys

import pytest
import torch

from attention_book.data import tokenize
from attention_book.experiments.bahdanau import bahdanau_data, bahdanau_make_models
from attention_book.experiments.transformer import (
    LENGTH_SPLIT_CONFIG,
    TRANSFORMER_CONFIG,
    label_smoothed_cross_entropy,
    length_split,
    set_need_weights,
    transformer_decode_steps,
    transformer_make_model,
)
from attention_book.seq2seq import greedy_decode, masked_cross_entropy, num_parameters
from attention_book.training import imported_modules


@pytest.fixture(scope="module")
def data():
    return bahdanau_data()


def test_label_smoothing_zero_is_the_masked_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64)
    labels = torch.randint(0, 7, (3, 5))
    valid_lens = torch.tensor([5, 2, 0])
    torch.testing.assert_close(
        label_smoothed_cross_entropy(logits, labels, valid_lens),
        masked_cross_entropy(logits, labels, valid_lens),
    )


def test_label_smoothing_mixes_the_reference_with_the_uniform_distribution():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6, dtype=torch.float64)
    labels = torch.randint(0, 6, (2, 4))
    valid_lens = torch.tensor([4, 3])
    eps = 0.1
    log_probs = logits.log_softmax(dim=-1)
    target = torch.full_like(log_probs, eps / 6)
    target.scatter_add_(-1, labels[..., None], torch.full_like(log_probs[..., :1], 1 - eps))
    per_token = -(target * log_probs).sum(dim=-1)  # (batch, num_steps)
    mask = torch.arange(4) < valid_lens[:, None]
    expected = per_token[mask].mean()
    loss = label_smoothed_cross_entropy(logits, labels, valid_lens, eps)
    torch.testing.assert_close(loss, expected)
    # Padding positions count for nothing: changing their logits changes nothing.
    other = logits.clone()
    other[1, 3] += 5.0
    loss = label_smoothed_cross_entropy(other, labels, valid_lens, eps)
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long)), r"logits must have shape"),
        ((torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long)), r"labels \(batch"),
    ],
)
def test_label_smoothing_rejects_bad_shapes(args, message):
    with pytest.raises(ValueError, match=message):
        label_smoothed_cross_entropy(*args, torch.tensor([1, 1]))


def test_label_smoothing_rejects_bad_epsilon():
    with pytest.raises(ValueError, match="label_smoothing"):
        label_smoothed_cross_entropy(
            torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]), 1.5
        )


def test_the_transformer_is_sized_like_the_bahdanau_model(data):
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    transformer = num_parameters(transformer_make_model(*sizes))
    bahdanau = num_parameters(bahdanau_make_models(*sizes)[1])
    assert abs(transformer / bahdanau - 1) < 0.2


def test_pre_norm_model_has_final_norms(data):
    model = transformer_make_model(10, 12, norm_first=True)
    assert isinstance(model.encoder.final_norm, torch.nn.LayerNorm)
    assert all(blk.addnorm1.norm_first for blk in model.decoder.blks)
    assert len(model.encoder.blks) == TRANSFORMER_CONFIG["num_blks"]


def test_length_split_trains_on_short_sources_and_tests_on_every_length(data):
    max_length = LENGTH_SPLIT_CONFIG["max_train_length"]
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


def test_fused_and_explicit_attention_give_the_same_model_output():
    torch.manual_seed(0)
    model = transformer_make_model(20, 15).double().eval()
    src = torch.randint(3, 20, (2, 6))
    tgt = torch.randint(3, 15, (2, 5))
    valid_lens = torch.tensor([6, 4])
    explicit = model(src, tgt, valid_lens)
    assert model.decoder.cross_attention_weights[0] is not None
    fused = set_need_weights(model, False)(src, tgt, valid_lens)
    assert model.decoder.cross_attention_weights[0] is None
    torch.testing.assert_close(fused, explicit, rtol=0, atol=1e-12)


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


def test_the_experiment_loads_no_plotting_library():
    code = "import sys, attention_book.experiments.transformer; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_the_cache_key_covers_the_model_the_schedule_and_the_bahdanau_experiment():
    modules = imported_modules("attention_book.experiments.transformer")
    for name in (
        "attention_book.transformer",
        "attention_book.transformer_decoder",
        "attention_book.transformer_sublayers",
        "attention_book.training.schedules",
        "attention_book.experiments.bahdanau",
        "attention_book.decoding",
        "attention_book.positional",
    ):
        assert name in modules
    assert not any(name.startswith("attention_book.figures") for name in modules)
