import pytest
import torch

from attention_book.experiments.optimizations import (
    OPTIMIZATIONS_CONFIG,
    VARIANTS,
    optimizations_decode,
    optimizations_encode,
    optimizations_experiment,
    optimizations_make_model,
    optimizations_text,
    optimizations_vocab,
)
from attention_book.experiments.optimizations_measurements import (
    PUBLISHED_MODELS,
    kv_cache_bytes,
    receptive_fields,
    rope_offset_errors,
)
from attention_book.kv_cache import KVCache, LinearAttentionCache
from attention_book.masking import sliding_window_mask


def test_kv_cache_bytes_formula():
    # Llama 2 70B at 4096 tokens in 16 bits: 2 * 80 * 8 * 128 * 4096 * 2 bytes = 1.25 GiB
    assert kv_cache_bytes(80, 8, 128, 4096) == 2 * 80 * 8 * 128 * 4096 * 2 == 1.25 * 2**30
    assert kv_cache_bytes(2, 4, 16, 128, bytes_per_number=4) == 131072


def test_published_shapes_are_consistent():
    widths = {"GPT-3 175B": 12288, "Llama 2 7B": 4096, "Llama 2 70B": 8192, "Mistral 7B": 4096}
    for name, width in widths.items():  # d_model = heads * head_dim for these models
        shape = PUBLISHED_MODELS[name]
        assert shape["heads"] * shape["head_dim"] == width, name
    for shape in PUBLISHED_MODELS.values():
        assert shape["heads"] % shape["kv_heads"] == 0
    assert PUBLISHED_MODELS["PaLM 540B"]["kv_heads"] == 1  # multi-query attention


def test_encode_decode_round_trip():
    text = optimizations_text("valid")[:500]
    tokens = optimizations_encode(text)
    assert tokens.dtype == torch.long and tokens.shape == (500,)
    assert int(tokens.max()) < len(optimizations_vocab())
    assert optimizations_decode(tokens) == text
    with pytest.raises(ValueError, match=r"outside the vocabulary: \['€'\]"):
        optimizations_encode("5 €")


def test_variants_change_only_what_they_say():
    baseline = optimizations_make_model("baseline")
    for variant, changes in VARIANTS.items():
        model = optimizations_make_model(variant)
        assert model.num_kv_heads == changes.get("num_kv_heads", OPTIMIZATIONS_CONFIG.num_heads)
        assert model.positional == changes.get("positional", "rope")
        assert model.kind == changes.get("attention", "softmax")
        assert len(model.blks) == len(baseline.blks)
        cache = model.new_cache(1, OPTIMIZATIONS_CONFIG.context)
        expected = LinearAttentionCache if model.kind == "linear" else KVCache
        assert isinstance(cache, expected)
    with pytest.raises(ValueError, match=r"variant must be one of .*'xpos'"):
        optimizations_make_model("xpos")
    with pytest.raises(ValueError, match=r"variant must be one of .*'xpos'"):
        optimizations_experiment("xpos")


def test_receptive_field_is_the_composition_of_the_windows():
    data = receptive_fields()
    window, n = data["window"], data["n"]
    mask = sliding_window_mask(n, n, window).long()
    reach = torch.eye(n, dtype=torch.long)
    for depth, field in data["fields"].items():
        reach = (mask @ reach).clamp(max=1)  # one more layer: inputs of inputs
        assert torch.equal(field, reach.bool()), depth
        assert int(field[-1].sum()) == depth * (window - 1) + 1


def test_rope_offset_errors_are_rounding_errors():
    errors = rope_offset_errors()
    assert errors["float64"]["relative"] < 1e-12
    assert errors["float32"]["relative"] < 1e-5
    assert errors["float32"]["relative"] > errors["float64"]["relative"]


def test_the_moved_measurements_still_import_from_the_optimizations_module():
    from attention_book.experiments import optimizations, optimizations_measurements
    from attention_book.experiments.optimizations import kv_cache_bytes as moved

    assert moved is optimizations_measurements.kv_cache_bytes
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        optimizations.nothing  # noqa: B018
