import json
import subprocess
import sys

import pytest
import torch

from attention_book.data.corpus import corpus_digest
from attention_book.experiments import bahdanau, transformer
from attention_book.experiments.bahdanau import bahdanau_data, bahdanau_make_models
from attention_book.experiments.transformer import (
    TRANSFORMER_CONFIG,
    TRANSFORMER_PROBE,
    set_need_weights,
    transformer_cache_key,
    transformer_make_model,
)
from attention_book.training.metrics import num_parameters


@pytest.fixture(scope="module")
def data():
    return bahdanau_data()


def test_the_transformer_is_sized_like_the_bahdanau_model(data):
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    transformer = num_parameters(transformer_make_model(*sizes))
    bahdanau = num_parameters(bahdanau_make_models(*sizes)[1])
    assert abs(transformer / bahdanau - 1) < 0.2


def test_pre_norm_model_has_final_norms(data):
    model = transformer_make_model(10, 12, norm_first=True)
    assert isinstance(model.encoder.final_norm, torch.nn.LayerNorm)
    assert all(blk.addnorm1.norm_first for blk in model.decoder.blks)
    assert len(model.encoder.blks) == TRANSFORMER_CONFIG.num_blks


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


def test_the_experiment_loads_no_plotting_library():
    code = "import sys, attention_book.experiments.transformer; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_the_cache_key_declares_the_configuration_the_version_and_what_it_reuses():
    key = transformer_cache_key()
    assert key["config"]["class"] == "TransformerConfig"
    assert key["config"]["num_hiddens"] == TRANSFORMER_CONFIG.num_hiddens
    assert key["version"] == transformer.VERSION
    assert key["inputs"] == {"corpus": corpus_digest(), "bahdanau_version": bahdanau.VERSION}
    assert "source" not in json.dumps(key)  # no source code: a refactor retrains nothing
    # Another configuration (the probe's) is another key.
    assert transformer_cache_key(TRANSFORMER_PROBE) != key


def test_the_studies_keys_hold_the_versions_of_the_code_they_run():
    from attention_book.experiments import transformer_studies as studies
    from attention_book.experiments import transformer_timings as timings

    keys = [(studies.transformer_studies_key(c), studies.VERSION) for c in (
        studies.NORM_CONFIG, studies.NORM_WARMUP_CONFIG, studies.LENGTH_SPLIT_CONFIG
    )]  # fmt: skip
    keys.append((timings.transformer_timings_key(timings.TIMING_CONFIG), timings.VERSION))
    for key, version in keys:
        assert key["inputs"]["transformer_version"] == transformer.VERSION
        assert key["inputs"]["bahdanau_version"] == bahdanau.VERSION
        assert key["version"] == version
