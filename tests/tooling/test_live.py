"""The live widgets' build side: the export of a model, the placeholders, the comparison.

What runs in a browser (the widgets' JavaScript against PyTorch, and the check failing on a
broken copy of it) is tested in ``tests/tooling/test_browser_check.py``, which shares one browser.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from mkdocs.exceptions import PluginError

from booktools.live import widgets as live
from booktools.live.check import compare_case, largest_difference
from booktools.live.export import exporter_digest, rounded, write_weights
from booktools.plugin.notebooks import chapter_notebook
from booktools.plugin.state import BuildState

FACTS = {
    "num_parameters": 91578,
    "vocab_size": 327,
    "folder": "transformer-0123-abcd",
    "download_gzip_bytes": 352_400,
    "download_bytes": 377_500,
    "weights_bytes": 366_312,
    "weights_gzip_bytes": 340_000,
    "code_gzip_bytes": 9_000,
    "float16_max_logit_change": 0.018,
    "tolerance": 1e-4,
    "reference_cases": 4,
    "example": 'We paid "5" <euros>.',
}


def state_with(name: str = "translator") -> BuildState:
    state = BuildState()
    state.live[name] = FACTS
    return state


def test_a_widget_is_inserted_with_its_addresses_and_a_note_without_javascript():
    page = "Before.\n\n{{ live:translator }}\n\nIt downloads {{ live:translator.download }}."
    out = live.insert_live(page, "docs/chapters/x.md", "chapters/x/", state_with())
    assert 'data-model="../../live/transformer-0123-abcd/"' in out
    assert 'data-module="../../assets/javascripts/live/widget.js"' in out
    assert 'data-example="We paid &quot;5&quot; &lt;euros&gt;."' in out  # escaped
    assert "hidden>Load the translator (378 KB)</button>" in out  # book.js shows it
    assert "<noscript><p>JavaScript is off" in out
    assert out.endswith("It downloads 378 KB.")
    assert "{{" not in out


def test_every_value_a_page_may_cite_is_written():
    for key in live.VALUES:
        assert "{{" not in live.insert_live(
            f"{{{{ live:translator.{key} }}}}", "p", "", state_with()
        )


def test_an_unknown_widget_or_value_names_the_page():
    with pytest.raises(PluginError, match=r"docs/x\.md: unknown live widget 'nope'"):
        live.referenced_live([("docs/x.md", "{{ live:nope }}")])
    with pytest.raises(PluginError, match=r"docs/x\.md: unknown value 'nope'"):
        live.insert_live("{{ live:translator.nope }}", "docs/x.md", "", state_with())
    with pytest.raises(PluginError, match=r"docs/x\.md: the live widget 'gpt' was not exported"):
        live.insert_live("{{ live:gpt }}", "docs/x.md", "", state_with())


def test_the_notebook_links_to_the_widget_on_the_page():
    chapter = "# A chapter\n\n{{ live:translator }}\n\nIt has {{ live:translator.num_parameters }}."
    notebook = chapter_notebook(chapter, "chapters/x/", "https://example.org/", state=state_with())
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "[the book's page](https://example.org/chapters/x/)" in text
    assert "It has 91,578." in text
    assert "book-live" not in text


def test_a_widget_over_its_budget_fails_the_build(live_models, monkeypatch):
    facts = live.widget_facts("gpt", live_models["gpt"])
    assert facts["download_gzip_bytes"] < live.MAX_WIDGET_GZIP_BYTES
    assert facts["reference_cases"] == 2 and facts["example"] == "Elle a "
    monkeypatch.setattr(live, "MAX_WIDGET_GZIP_BYTES", facts["download_gzip_bytes"] - 1)
    with pytest.raises(PluginError, match=r"the live gpt downloads .* over the"):
        live.widget_facts("gpt", live_models["gpt"])


def test_the_weights_file_holds_the_state_dict_as_float32(tmp_path: Path):
    state_dict = {"a.weight": torch.randn(3, 4), "a.bias": torch.randn(3).double()}
    tensors = write_weights(state_dict, tmp_path)
    floats = np.fromfile(tmp_path / "weights.bin", dtype="<f4")
    assert tensors == {"a.weight": {"shape": [3, 4], "offset": 0},
                       "a.bias": {"shape": [3], "offset": 12}}  # fmt: skip
    assert np.array_equal(floats[:12].reshape(3, 4), state_dict["a.weight"].numpy())
    assert np.array_equal(floats[12:], state_dict["a.bias"].float().numpy())


def test_the_reference_holds_pytorchs_decoding(live_models):
    manifest = json.loads((live_models["translator"] / "model.json").read_text())
    reference = json.loads((live_models["translator"] / "reference.json").read_text())
    unk = manifest["src_vocab"].index("<unk>")
    (first, unknown) = reference["cases"]
    assert first["source_tokens"] == ["we", "sold", "3", "books", ".", "<eos>"]
    assert unknown["source_ids"].count(unk) == 4  # zebras, ate, cakes, !
    steps = len(first["tokens"])
    assert len(first["logits"]) == len(first["decoder_self"]) == len(first["cross"]) == steps
    num_blks, num_heads = manifest["config"]["num_blks"], manifest["config"]["num_heads"]
    assert [len(step[0][0]) for step in first["decoder_self"]] == list(range(1, steps + 1))
    assert np.array(first["encoder"]).shape == (num_blks, num_heads, 6, 6)
    assert rounded(torch.tensor([-1e-9, 0.25])) == [0, 0.25]  # no "-0.0" in the JSON


def test_the_export_is_named_after_the_stored_result_and_the_exporter():
    from attention_book.experiments.transformer import (
        MODEL_SMOOTHING,
        transformer_cache_key,
        transformer_run_name,
    )
    from attention_book.store import cache_path
    from booktools.live.export import result_name

    assert (
        result_name("translator")
        == cache_path(transformer_run_name(MODEL_SMOOTHING), transformer_cache_key()).stem
    )
    assert len(exporter_digest()) == 8
    with pytest.raises(ValueError, match="name must be one of"):
        result_name("nope")


def test_the_exporters_digest_covers_every_file_that_exports(monkeypatch, tmp_path):
    import shutil

    import booktools
    from booktools.live import export as live_export

    # Every module that writes an exported model's files is in the digest, so an edit to it
    # exports again; the widget's page code (widgets.py) and the browser's check are not, nor
    # flash.py and train.py, which export no trained model and name their folders by their
    # own digests (tested in test_flash_widget.py and test_train_widget.py).
    folder = Path(booktools.__file__).parent
    exporters = {p.name for p in (folder / "live").glob("*.py")} - {
        "__init__.py",
        "check.py",
        "widgets.py",
        "flash.py",
        "train.py",
    }
    assert set(live_export.EXPORTER_FILES) == exporters
    # An edit to one of them (in a copy) changes the digest.
    copy = tmp_path / "booktools"
    shutil.copytree(folder, copy)
    monkeypatch.setattr(live_export, "__file__", str(copy / "live" / "export.py"))
    before = live_export.exporter_digest()
    with open(copy / "live" / "gpt.py", "a", encoding="utf-8") as file:
        file.write("# an edit\n")
    assert live_export.exporter_digest() != before


def test_the_comparison_fails_on_other_tokens_or_numbers_beyond_the_tolerance():
    case = {
        "sentence": "a", "source_ids": [4, 2], "tokens": [5, 2], "logits": [[1.0, 2.0]],
        "encoder": [[[[1.0]]]], "decoder_self": [[[[1.0]]]], "cross": [[[[0.5, 0.5]]]],
    }  # fmt: skip
    result = json.loads(json.dumps(case))
    assert compare_case("translator", case, result, 1e-4)[0] == []
    result["logits"] = [[1.0, 2.001]]
    result["tokens"] = [5, 5, 2]
    problems, differences = compare_case("translator", case, result, 1e-4)
    assert differences["logits"] == pytest.approx(0.001)
    assert any("tokens differ" in p for p in problems)
    assert any("logits differ" in p for p in problems)
    assert largest_difference([[1.0, 2.0]], [[1.0]]) == math.inf  # another shape
    assert largest_difference([float("nan")], [1.0]) == math.inf
    assert compare_case("gpt", {"prompt": "x"}, None, 1e-4)[0] == [
        "live gpt, 'x': the page computed nothing"
    ]
