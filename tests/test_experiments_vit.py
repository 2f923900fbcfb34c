import itertools
import subprocess
import sys

import pytest
import torch

from attention_book.experiments.vit import (
    VIT_CONFIG,
    SmallResNet,
    balanced_subset,
    random_shift,
    vit_attention_distances,
    vit_cache_key,
    vit_make_models,
    vit_trained_model,
    warmup_cosine,
)
from attention_book.seq2seq import num_parameters
from attention_book.training import package_source_hash
from attention_book.vit import patch_distances


def test_random_shift_moves_whole_images_and_fills_with_background():
    images = torch.zeros(64, 1, 5, 5)
    images[:, 0, 2, 2] = 1.0  # one lit pixel in the centre of a blank image
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum(dim=(1, 2, 3)), torch.ones(64))  # the pixel moved, whole
    rows, cols = (shifted[:, 0] == 1).nonzero()[:, 1:].T
    assert set(rows.tolist()) == {1, 2, 3} and set(cols.tolist()) == {1, 2, 3}
    assert torch.equal(random_shift(images, 0, torch.Generator()), images)
    background = torch.full((2, 1, 3, 3), -0.5)  # a normalized blank image is not 0
    assert torch.equal(random_shift(background, 1, torch.Generator()), background)


def test_balanced_subset_is_balanced_seeded_and_without_repeats():
    labels = torch.arange(10).repeat_interleave(torch.arange(10, 20))  # 10 to 19 per class
    chosen = balanced_subset(labels, 45, seed=3)
    assert len(set(chosen.tolist())) == 45
    counts = torch.bincount(labels[chosen], minlength=10)
    assert counts.max() - counts.min() <= 1
    assert torch.equal(chosen, balanced_subset(labels, 45, seed=3))
    assert not torch.equal(chosen, balanced_subset(labels, 45, seed=4))
    assert sorted(balanced_subset(labels, len(labels), 0).tolist()) == list(range(len(labels)))
    with pytest.raises(ValueError, match=r"size must be in \[1, 145\]"):
        balanced_subset(labels, 146, 0)


def test_experiment_models_shapes_and_parameter_counts_within_20_percent():
    vit, cnn = vit_make_models()
    images = torch.randn(3, 1, 8, 8)
    assert vit(images).shape == cnn(images).shape == (3, 10)
    assert vit.patch_embedding.num_patches == (8 // VIT_CONFIG["patch_size"]) ** 2
    ratio = num_parameters(cnn) / num_parameters(vit)
    assert 1 / 1.2 <= ratio <= 1.2, ratio
    assert SmallResNet(8, 3, in_channels=2)(torch.randn(2, 2, 16, 16)).shape == (2, 3)


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


def test_vit_cache_key_covers_config_data_and_source():
    key = vit_cache_key()
    assert {k: key[k] for k in VIT_CONFIG} == VIT_CONFIG
    assert len(key["data"]) == 16  # a digest of the digits
    assert key["source"] == package_source_hash("attention_book.experiments.vit")
    code = "import sys, attention_book.experiments.vit; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def test_warmup_cosine_rises_then_falls_to_zero():
    factors = [warmup_cosine(step, 4, 20) for step in range(20)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0  # the decay starts from the peak
    assert all(b < a for a, b in itertools.pairwise(factors[4:]))
    assert warmup_cosine(20, 4, 20) == pytest.approx(0.0)
    assert warmup_cosine(12, 4, 20) == pytest.approx(0.5)  # half-way through the decay
    with pytest.raises(ValueError, match=r"warmup_steps must be in \[1, total_steps - 1\]"):
        warmup_cosine(0, 20, 20)


def test_trained_model_rejects_an_unknown_seed():
    with pytest.raises(ValueError, match=r"seed must be one of \[0, 1, 2\], got 7"):
        vit_trained_model(7)
