import math
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from attention_book.data.corpus import corpus_digest
from attention_book.experiments import bahdanau
from attention_book.experiments import nadaraya_watson as nw
from attention_book.experiments.bahdanau import (
    BAHDANAU_CONFIG,
    LENGTH_BUCKETS,
    bahdanau_bleu_by_bucket,
    bahdanau_cache_key,
    bahdanau_exact_match_by_bucket,
    bahdanau_make_models,
    token_bleu,
)
from attention_book.experiments.flash import (
    GPUS,
    flash_attention_intensity,
    flash_tiling_steps,
)
from attention_book.experiments.scoring import DIMS, scoring_scaling_measurements
from attention_book.training.metrics import bleu, num_parameters


def test_training_and_experiments_load_no_plotting_library():
    modules = ["training", *(f"experiments.{m}" for m in ("bahdanau", "flash", "scoring"))]
    modules.append("experiments.nadaraya_watson")
    imports = "; ".join(f"import attention_book.{m}" for m in modules)
    code = f"import sys; {imports}; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


# --- Which code trains ----------------------------------------------------------------------


def test_the_functions_that_start_cached_runs_are_read_from_source():
    from attention_book.experiments import cached_runs

    runs = {function: names for (_, function), names in cached_runs().items()}
    assert runs["bahdanau_trained_models"] == ("bahdanau-*",)  # one run per model
    assert runs["transformer_length_experiment"] == ("transformer-length",)
    assert runs["optimizations_trained_model"] == ("optimizations-*",)  # an f-string name
    assert "bahdanau_translate" not in runs and "vit_digits" not in runs  # they train nothing


@pytest.mark.parametrize(
    "code, runs",
    [
        ("from attention_book.experiments.vit import vit_experiment\nvit_experiment()", ("vit-*",)),
        ("from attention_book.experiments.vit import vit_experiment as v\nr = v()", ("vit-*",)),
        ("from attention_book.experiments import multihead as m\nm.multihead_experiment()",
         ("multihead",)),
        ("import attention_book.experiments.vit\nattention_book.experiments.vit.vit_experiment()",
         ("vit-*",)),
        ("from attention_book.experiments.vit import vit_experiment", ()),  # imported, not called
        ("from attention_book.experiments.vit import vit_digits\nvit_digits()", ()),
        ("def vit_experiment():\n    pass\nvit_experiment()", ()),  # the reader's own function
    ],
)  # fmt: skip
def test_a_block_that_trains_is_recognized_by_its_calls(code, runs):
    from attention_book.experiments import runs_started_by

    assert runs_started_by(code) == runs


# --- Bahdanau --------------------------------------------------------------------------------


def test_bahdanau_cache_key_declares_config_version_corpus_and_libraries():
    key = bahdanau_cache_key()
    assert key["config"] == {"class": "BahdanauConfig", **asdict(BAHDANAU_CONFIG)}
    assert key["version"] == bahdanau.VERSION
    assert key["inputs"] == {"corpus": corpus_digest()}  # a digest of the sentence pairs
    assert len(key["inputs"]["corpus"]) == 16
    assert key["libraries"]["torch"] == torch.__version__
    assert set(key) == {"config", "version", "inputs", "libraries"}  # no source, no corpus_version


def test_bahdanau_models_have_nearly_the_same_number_of_parameters():
    plain, attention = bahdanau_make_models(50, 60)
    assert plain.encoder.rnn.hidden_size > attention.encoder.rnn.hidden_size
    assert num_parameters(plain) == pytest.approx(num_parameters(attention), rel=0.05)


def test_bleu_and_exact_matches_by_length_bucket():
    # One sentence per bucket, all translated right; the last bucket gets a wrong one too.
    references = [f"w{i} x y z" for i in range(len(LENGTH_BUCKETS))] + ["a b c d e"]
    hypotheses = [*references[:-1], "v w"]
    lengths = [low for low, _ in LENGTH_BUCKETS] + [LENGTH_BUCKETS[-1][1]]
    scores, counts = bahdanau_bleu_by_bucket(hypotheses, references, lengths)
    assert counts == [1] * (len(LENGTH_BUCKETS) - 1) + [2]
    assert scores[:-1] == [pytest.approx(100.0)] * (len(LENGTH_BUCKETS) - 1)
    assert 0 < scores[-1] < 100
    shares = bahdanau_exact_match_by_bucket(hypotheses, references, lengths)
    assert shares == [100.0] * (len(LENGTH_BUCKETS) - 1) + [50.0]


def test_token_bleu_scores_the_tokens_as_they_are():
    hypotheses, references = ["nous avons vendu dix billets ."], ["nous avons vendu six billets ."]
    expected = bleu([h.split() for h in hypotheses], [r.split() for r in references])
    assert token_bleu(hypotheses, references) == expected


# --- Nadaraya-Watson -------------------------------------------------------------------------


def test_nadaraya_watson_experiment():
    rows = nw.nw_test_errors()
    assert rows[0][0] == "Average pooling"
    assert len(rows) == 2 + len(nw.KERNEL_NAMES) + 1
    average, *kernels, learned = (test for *_, test in rows)
    assert all(error < average for error in [*kernels, learned])  # attention beats the mean
    assert all(nw.nw_loo_bandwidth(name) in nw.BANDWIDTHS for name in nw.KERNEL_NAMES)
    sweep = nw.nw_bandwidth_sweep_errors()
    assert list(sweep) == list(nw.KERNEL_NAMES)
    assert all(len(errors) == len(nw.BANDWIDTHS) for errors in sweep.values())
    _, losses = nw.nw_trained_model()
    assert losses[-1] < losses[0]
    assert nw.nw_data().x_train.shape == (50,)


# --- Scoring functions -----------------------------------------------------------------------


def test_scaling_keeps_the_variance_at_one():
    results = scoring_scaling_measurements()
    for i, d in enumerate(DIMS):
        assert results["variance_scaled"][i] == pytest.approx(1.0, rel=0.15)
        assert results["variance_unscaled"][i] == pytest.approx(d, rel=0.15)
    assert results["largest_weight_unscaled"][-1] > 0.9 > results["largest_weight_scaled"][-1]
    # The chapter's summary: unscaled, the gradient at the scores collapses as d grows; scaled,
    # it hardly changes with d (its sentence under the table is worded by the build).
    unscaled, scaled = results["gradient_unscaled"], results["gradient_scaled"]
    assert unscaled[-1] < unscaled[DIMS.index(16)] / 100
    assert max(scaled) < 1.25 * min(scaled)


# --- FlashAttention --------------------------------------------------------------------------


def test_gpu_ridge_points_lie_between_the_two_intensities():
    for gpu in GPUS.values():
        ridge = gpu["tflops"] / gpu["hbm_tb_s"]
        intensity = flash_attention_intensity(4096, 128)
        assert intensity["naive"] < ridge < intensity["flash"]
        assert math.isfinite(ridge)


def test_tiling_steps_hold_exact_attention_over_the_keys_seen_at_every_step():
    example = flash_tiling_steps(block_m=3, block_n=5, num_key_blocks=4, head_dim=6, seed=1)
    steps = example["steps"]
    assert len(steps) == 4
    # the last step is the package's tiled forward pass, and exact attention
    torch.testing.assert_close(example["output"], example["tiled"], rtol=0, atol=1e-12)
    assert all(step["error_seen"] < 1e-12 for step in steps)
    assert steps[0]["error_all"] > 1e-3 and steps[-1]["error_all"] < 1e-12
    for j, step in enumerate(steps):
        loaded = step["weights"][:, : 5 * (j + 1)]
        assert not loaded.isnan().any() and step["weights"][:, 5 * (j + 1) :].isnan().all()
        # relative to the current maximum: the largest weight of each row is exactly 1
        torch.testing.assert_close(loaded.max(dim=-1).values, torch.ones(3, dtype=torch.float64))
        if j:  # rescaled exactly where the maximum grew, by exp(m_old - m_new)
            before = steps[j - 1]["m"]
            torch.testing.assert_close(step["rescale"], torch.exp(before - step["m"]))
            assert torch.equal(step["rescale"] < 1, step["m"] > before)


def test_the_explorer_example_is_the_one_the_chapter_describes():
    """The core page's slider: blocks of 4 queries and 4 keys, four key/value blocks, float64;
    acc / l is exact over the keys loaded so far at every step, and over all keys only once the
    last block is in."""
    steps = flash_tiling_steps()["steps"]
    assert len(steps) == 4 and steps[0]["weights"].shape == (4, 16)
    assert steps[0]["weights"].dtype == torch.float64
    assert all(step["error_seen"] < 1e-12 for step in steps)
    assert all(step["error_all"] > 1e-3 for step in steps[:-1]) and steps[-1]["error_all"] < 1e-12


def test_tiling_steps_name_a_size_that_is_not_positive():
    with pytest.raises(ValueError, match="num_key_blocks=0"):
        flash_tiling_steps(num_key_blocks=0)
