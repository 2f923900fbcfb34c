import pytest
import torch
from repo import ROOT

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
    LINEAR_HEAD_DIM,
    PUBLISHED_MODELS,
    causal_attention_methods,
    kv_cache_bytes,
    receptive_fields,
    rope_offset_errors,
)
from attention_book.kv_cache import KVCache, LinearAttentionCache
from attention_book.masking import sliding_window_mask
from attention_book.memory import measure_tensor_memory

CHAPTERS = ROOT / "docs" / "chapters"


def page_text(name: str) -> str:
    """A chapter page's Markdown, whitespace collapsed."""
    return " ".join((CHAPTERS / name).read_text(encoding="utf-8").split())


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


def test_the_windows_page_describes_the_receptive_fields_it_shows():
    data = receptive_fields()
    depths, window = list(data["fields"]), data["window"]
    reach = [int(field[-1].sum()) for field in data["fields"].values()]
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    text = page_text("optimizations-windows.md")
    assert f"for stacks of {depths[0]} to {depths[-1]} layers with $w = {window}$" in text
    panels = ", ".join(str(d) for d in depths[:-1]) + f" and {depths[-1]} layers"
    assert f"![{words[len(depths)].capitalize()} square panels, output position" in text
    assert f"for {panels} of a causal sliding window of {window} keys" in text
    assert "the band widens with every layer" in text and reach == sorted(set(reach))
    assert (
        f"from {reach[0]} positions for one layer to {reach[-1]} for {words[depths[-1]]}." in text
    )


def test_peak_memory_grows_as_the_linear_scaling_figure_says():
    # Its alt text: "the explicit softmax line grows quadratically and the two others linearly".
    text = page_text("optimizations-linear.md")
    assert "where the explicit softmax line grows quadratically and the two others linearly" in text
    peaks: dict[str, list[int]] = {name: [] for name in causal_attention_methods()}
    for n in (512, 1024):
        q, k, v = torch.randn(3, 1, 4, n, LINEAR_HEAD_DIM)
        for name, method in causal_attention_methods().items():
            peaks[name].append(measure_tensor_memory(method, q, k, v)[1])
    growth = {name: later / earlier for name, (earlier, later) in peaks.items()}
    assert 3.5 < growth["softmax"] < 4.5, growth
    assert 1.8 < growth["softmax_fused"] < 2.2 and 1.8 < growth["linear"] < 2.2, growth


def test_rope_offset_errors_are_rounding_errors():
    errors = rope_offset_errors()
    assert errors["float64"]["relative"] < 1e-12
    assert errors["float32"]["relative"] < 1e-5
    assert errors["float32"]["relative"] > errors["float64"]["relative"]
