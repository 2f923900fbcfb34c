import importlib
import inspect
import json

import pytest
from matplotlib.figure import Figure
from repo import ROOT
from synthetic import memory_report

from attention_book.figures import CHAPTERS, draw, figure_functions, find_figure, save_svg
from attention_book.figures import __main__ as render_cli


def test_unknown_figure_names_the_module_to_edit():
    with pytest.raises(ValueError, match="no figure function named 'nope'"):
        find_figure("nope")


@pytest.mark.parametrize(
    "name",
    [
        "bucket_label",  # a drawing helper of figures.bahdanau
        "bahdanau_experiment",  # an experiment (returns a dict), imported by figures.bahdanau
        "bahdanau_trained_models",
        "flash_attention_intensity",  # a measurement, imported by figures.flash
        "show_heatmaps",  # a plotting helper
    ],
)
def test_only_listed_figures_can_be_named(name):
    with pytest.raises(ValueError, match=rf"no figure function named '{name}'.*FIGURES"):
        find_figure(name)


def test_figures_are_listed_once_and_defined_where_they_are_listed():
    listed = []
    for chapter in CHAPTERS:
        module = importlib.import_module(f"attention_book.figures.{chapter}")
        for function in module.FIGURES:
            assert function.__module__ == module.__name__, function
            assert function.__name__ in module.__all__, function
            listed.append(function.__name__)
    assert len(listed) == len(set(listed))
    assert list(figure_functions()) == listed


def test_figure_functions_take_nothing_or_the_results_directory():
    for name, function in figure_functions().items():
        assert list(inspect.signature(function).parameters) in ([], ["results_dir"]), name


def test_save_svg_is_deterministic(tmp_path):
    paths = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for path in paths:
        save_svg(find_figure("home_attention_weights")(), path)
    first, second = (p.read_bytes() for p in paths)
    assert first == second
    assert b"<dc:date>" not in first


def test_render_cli_writes_svg(tmp_path):
    assert render_cli.main(["home_attention_weights", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "home_attention_weights.svg").read_text().lstrip().startswith("<?xml")


def test_home_figure_is_a_figure():
    assert isinstance(find_figure("home_attention_weights")(), Figure)


def test_a_results_figure_needs_a_results_directory(tmp_path):
    with pytest.raises(ValueError, match=r"flash_memory_rss.*results_dir"):
        draw("flash_memory_rss")
    with pytest.raises(ValueError, match="results_dir must be a directory"):
        draw("flash_memory_rss", tmp_path / "absent")
    assert "No `benchmarks/results/flash_memory.json` yet" in draw("flash_memory_rss", tmp_path)
    assert "No GPU run yet" in draw("flash_gpu_results", tmp_path)


def test_results_figures_read_the_directory_they_are_given(tmp_path):
    # A small synthetic file (test data, not a measurement) in a directory of the test's own.
    counts = {"counted_bytes": 2**20, "rss_bytes": 2 * 2**20}
    report = {
        "environment": {"date_utc": "2024-01-02T03:04:05", "machine": "test", "torch": "0"},
        "results": [{"seq_len": 1024, "naive": counts, "tiled": counts, "outputs_agree": True}],
    }
    (tmp_path / "flash_memory.json").write_text(json.dumps(report))
    out = tmp_path / "out"
    argv = ["flash_memory_rss", "--out-dir", str(out), "--results-dir", str(tmp_path)]
    assert render_cli.main(argv) == 0
    table = (out / "flash_memory_rss.md").read_text()
    assert "| 1,024 | 1.0 | 2.0 | 1.0 | 2.0 | yes |" in table and "2024-01-02" in table


def test_the_memory_benchmark_is_worded_from_its_numbers(tmp_path):
    # The FlashAttention chapter's verdict on counted bytes against RSS comes from the file:
    # "agree closely" only where they do, and the growths as they were measured.
    close = [(1024, (12.0, 12.3), (4.4, 5.4)), (4096, (192.0, 193.2), (5.2, 11.0))]
    (tmp_path / "flash_memory.json").write_text(json.dumps(memory_report(close)))
    text = " ".join(draw("flash_memory_rss", tmp_path).split())
    assert "within 2.5% of its count at every length" in text
    assert "the score-sized tensors are all there is" in text
    assert "exceeds its count by 1.0 to 5.8 MiB" in text
    assert "from 5.4 to 11.0 MiB" in text and "from 12.3 to 193.2 MiB" in text
    far = [(1024, (12.0, 30.0), (4.4, 4.0)), (4096, (192.0, 193.2), (5.2, 11.0))]
    (tmp_path / "flash_memory.json").write_text(json.dumps(memory_report(far)))
    text = " ".join(draw("flash_memory_rss", tmp_path).split())
    assert "within 150.0% of its count" in text
    assert "all there is" not in text and "differs from its count by up to 5.8 MiB" in text


def test_the_memory_growth_is_worded_from_the_measurements():
    from attention_book.figures.flash import memory_growth_words

    mib = 2**20
    words = memory_growth_words([1024, 16384], [12 * mib, 3072 * mib], [4.4 * mib, 8.2 * mib])
    assert "naive attention's peak grew 256× (slope 2.00" in words
    assert "the tiled reference's 1.9× (slope 0.22, under the slope-1 guide" in words
    steep = memory_growth_words([1024, 4096], [mib, 16 * mib], [mib, 8 * mib])
    assert "(slope 1.50, above the slope-1 guide" in steep
    assert "(slope 1.00, on the slope-1 guide" in memory_growth_words(
        [1024, 4096], [mib, 16 * mib], [mib, 4 * mib]
    )


def test_the_chapter_words_the_memory_it_measures():
    from attention_book.experiments.flash import flash_memory_measurements
    from attention_book.figures.flash import flash_memory_ratio, memory_growth_words

    data = flash_memory_measurements()
    words = memory_growth_words(data["seq_lens"], data["naive"], data["tiled"])
    assert words in flash_memory_ratio() and "(slope 2.00" in words and "under the" in words


def test_gpu_section_without_results_is_one_line_not_a_note(tmp_path):
    # The chapter's "Measured on a GPU" section reads complete on its own (issue 11); without
    # a results file, the build adds one italic line saying why no figure follows.
    text = draw("flash_gpu_results", tmp_path)
    assert not text.lstrip().startswith("!!!") and "\n" not in text.strip()
    assert text.startswith("*") and text.endswith("*")


def test_build_sentences_match_the_experiments_they_word():
    from attention_book.experiments.scoring import NUM_KEYS, NUM_TRIALS
    from attention_book.figures.flash_gpu import flash_roofline_facts
    from attention_book.figures.scoring import scoring_sample_sizes

    assert f"{NUM_TRIALS:,} queries" in scoring_sample_sizes()
    assert f"{NUM_TRIALS * NUM_KEYS:,} query-key pairs" in scoring_sample_sizes()
    assert flash_roofline_facts()["limit"] == "128"  # "levels off at 128 FLOP per byte"


COMPILE_FIGURES = [
    "flash_compile_facts",
    "flash_compile_resources",
    "flash_compile_table",
    "flash_compile_shared_memory",
    "flash_compile_mix",
    "flash_compile_score_paths",
    "flash_compile_changes",
    "flash_compile_before_after",
]


@pytest.mark.parametrize("name", COMPILE_FIGURES)
def test_compile_report_figures_without_a_report_say_how_to_make_one(tmp_path, name):
    with pytest.raises(ValueError, match=r"no compile report in .*benchmarks/flash_compile.py"):
        draw(name, tmp_path)


def test_compile_report_figures_read_the_committed_report():

    results = ROOT / "benchmarks" / "results"
    resources = draw("flash_compile_resources", results)
    assert "| sm_90 | forward |" in resources and "| sm_80 | dQ |" in resources
    mix = draw("flash_compile_mix", results)
    assert mix.count("data:image/svg+xml;base64,") == 2  # drawn for light and for dark pages
    assert "#only-light)" in mix and "#only-dark)" in mix
    paths = draw("flash_compile_score_paths", results)
    assert sorted(paths) == ["after", "before", "tutorial"]
    assert all(p.startswith("```text\n") and "MUFU.EX2" in p for p in paths.values())
    facts = draw("flash_compile_facts", results)
    assert int(facts["ours"]) > 100 and facts["dtype"] == "float16" and facts["commit"]
    changes = draw("flash_compile_changes", results)
    assert int(changes["fmul_before"]) > int(changes["fmul_after"]) > 0
    table = draw("flash_compile_before_after", results)
    assert table.count("\n|") >= 12 and "| – | – | – |" not in table
    assert draw("flash_compile_table", results).startswith("| GPU | kernel | d | tile |")


def test_a_figure_function_may_return_values_that_the_prose_cites(monkeypatch):
    import attention_book.figures as package

    monkeypatch.setattr(package, "find_figure", lambda name: lambda: {"count": "3", "date": "x"})
    assert draw("facts") == {"count": "3", "date": "x"}
    monkeypatch.setattr(package, "find_figure", lambda name: lambda: {"count": 3})
    with pytest.raises(TypeError, match="a dict of values"):
        draw("facts")


# ---------------------------------------------------------------------------------------------
# The scoring-functions chapter: the sentences that read the scaling measurements


def test_the_scaling_sentence_words_the_numbers_it_is_given():
    from attention_book.figures.scoring import scoring_gradient_words as words

    dims = (1, 16, 1024)
    measured = {
        "largest_weight_unscaled": [0.142, 0.619, 0.956],
        "largest_weight_scaled": [0.142, 0.160, 0.164],
        "gradient_unscaled": [0.191, 0.223, 4.48e-5],
        "gradient_scaled": [0.191, 0.216, 0.216],
    }
    text = words(measured, dims)
    assert "climbs from 0.14 at $d = 1$ to 0.96 at $d = 1024$" in text
    assert "stays between 0.14 and 0.16" in text
    assert "4,978 times smaller than at $d = 16$ (3.7 orders of magnitude)" in text
    assert "within 12% of its value at $d = 16$ at every size from 1 to 1024" in text
    flat = {
        "largest_weight_unscaled": [0.14, 0.15, 0.16],
        "largest_weight_scaled": [0.14, 0.30, 0.60],
        "gradient_unscaled": [0.2, 0.2, 0.1],
        "gradient_scaled": [0.1, 0.2, 0.4],
    }
    text = words(flat, dims)
    assert "2 times smaller" in text and "orders of magnitude" not in text
    assert "moves by up to 100% of its value at $d = 16$" in text and "within" not in text
    assert "Unscaled, the mean largest weight stays between 0.14 and 0.16" in text
    assert "Scaled, the mean largest weight ranges from 0.14 to 0.60" in text


def test_the_saturation_sentence_counts_the_rows_it_is_given():
    import torch

    from attention_book.figures.scoring import scoring_saturation_words as words

    one_hot, uniform = torch.eye(4), torch.full((4, 4), 0.25)
    mixed = torch.tensor([[0.95, 0.05], [0.6, 0.4], [0.5, 0.5]])  # (num_queries, num_keys)
    text = words(torch.stack([one_hot, uniform]))  # (2, num_queries, num_keys)
    assert text == (
        "Unscaled, 4 of the 4 queries give more than half of their weight to a single key, "
        "and 4 more than 90%; scaled, 0 and 0."
    )
    assert words(torch.stack([mixed, mixed])).startswith(
        "Unscaled, 2 of the 3 queries give more than half of their weight to a single key, "
        "and 1 more than 90%; scaled, 2 and 1."
    )


def test_the_cues_diagram_does_not_label_keys_and_query_as_the_two_cues():
    # The chapter's "Both cues in one score" splits the score, not the inputs: d2l's labels
    # (key-value pairs as the nonvolitional cues, the query as the volitional one) would
    # contradict it.
    from attention_book.figures.attention_cues import cues_qkv_diagram

    fig = cues_qkv_diagram()
    texts = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert "key-value pairs" in texts and "what we look for" in texts
    assert "volitional" not in texts
