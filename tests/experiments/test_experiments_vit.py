import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from attention_book.experiments.vit import (
    VERSION,
    VIT_CONFIG,
    vit_attention_distances,
    vit_cache_key,
    vit_digits,
    vit_make_models,
    vit_trained_model,
)
from attention_book.store import digest
from attention_book.training.metrics import num_parameters
from attention_book.vit import patch_distances


def test_experiment_models_shapes_and_parameter_counts_within_20_percent():
    vit, cnn = vit_make_models()
    images = torch.randn(3, 1, 8, 8)
    assert vit(images).shape == cnn(images).shape == (3, 10)
    assert vit.patch_embedding.num_patches == (8 // VIT_CONFIG.patch_size) ** 2
    ratio = num_parameters(cnn) / num_parameters(vit)
    assert 1 / 1.2 <= ratio <= 1.2, ratio


def test_attention_distances_of_an_untrained_vit():
    torch.manual_seed(0)
    vit, _ = vit_make_models()
    distances = vit_attention_distances(vit.eval(), torch.randn(5, 1, 8, 8))
    assert distances.shape == (len(vit.blks), vit.blks[0].self_attention.num_heads)
    uniform = patch_distances(4, 2).mean()
    # Small random weights give nearly uniform attention, hence nearly the uniform distance.
    torch.testing.assert_close(
        distances, torch.full_like(distances, uniform.item()), atol=0.3, rtol=0
    )


def test_vit_cache_key_declares_config_version_and_the_digits():
    key = vit_cache_key()
    assert key["config"] == {"class": "VitConfig", **asdict(VIT_CONFIG)}
    assert key["version"] == VERSION
    assert key["inputs"] == {"digits": digest(*vit_digits())}  # a digest of the digits
    assert "source" not in key
    code = "import sys, attention_book.experiments.vit; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_trained_model_rejects_an_unknown_seed():
    with pytest.raises(ValueError, match=r"seed must be one of \[0, 1, 2\], got 7"):
        vit_trained_model(7)
