import importlib
import inspect
import json

import pytest
from matplotlib.figure import Figure

from attention_book.figures import CHAPTERS, draw, figure_functions, find_figure, save_svg
from attention_book.figures import __main__ as render_cli


def test_unknown_figure_names_the_module_to_edit():
    with pytest.raises(ValueError, match="no figure function named 'nope'"):
        find_figure("nope")


@pytest.mark.parametrize(
    "name",
    [
        "_bucket_label",  # a drawing helper of figures.bahdanau
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


def test_gpu_section_without_results_is_one_line_not_a_note(tmp_path):
    # The chapter's "Measured on a GPU" section reads complete on its own (issue 11); without
    # a results file, the build adds one italic line saying why no figure follows.
    text = draw("flash_gpu_results", tmp_path)
    assert not text.lstrip().startswith("!!!") and "\n" not in text.strip()
    assert text.startswith("*") and text.endswith("*")


def test_build_sentences_match_the_experiments_they_word():
    from attention_book.experiments.scoring import NUM_KEYS, NUM_TRIALS
    from attention_book.figures.flash import flash_roofline_verdict
    from attention_book.figures.scoring import scoring_sample_sizes

    assert f"{NUM_TRIALS:,} queries" in scoring_sample_sizes()
    assert f"{NUM_TRIALS * NUM_KEYS:,} query-key pairs" in scoring_sample_sizes()
    assert "levels off at 128 FLOP per byte" in flash_roofline_verdict()


COMPILE_FIGURES = [
    "flash_compile_facts",
    "flash_compile_resources",
    "flash_compile_table",
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
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
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
# Transformer optimizations: the sentences whose wording depends on the numbers


def test_shared_key_value_heads_leave_fewer_parameters_as_the_prose_says():
    from attention_book.experiments.optimizations import optimizations_make_model
    from attention_book.figures.optimizations import optimizations_variant_facts

    facts = draw("optimizations_variant_facts")
    assert facts == optimizations_variant_facts()
    counts = {
        v: sum(p.numel() for p in optimizations_make_model(v).parameters())
        for v in ("baseline", "gqa", "mqa")
    }
    # The prose: "fewer parameters than the baseline", multi-query fewer than grouped-query.
    assert counts["mqa"] < counts["gqa"] < counts["baseline"]
    assert facts["gqa_fewer"] == "7.7%" and facts["mqa_fewer"] == "11.5%"
    assert facts["baseline_parameters"] == f"{counts['baseline']:,}"


def _curves(past_alibi: float, past_others: float, context: int = 8) -> dict[str, list[float]]:
    """Loss curves (synthetic test data): 1.0 on the trained positions, then a plateau."""
    curves = {}
    for variant in ("baseline", "sinusoidal", "alibi", "linear"):
        past = past_alibi if variant == "alibi" else past_others
        curves[variant] = [1.0] * context + [past] * context
    return curves


def test_the_extrapolation_verdict_follows_the_numbers():
    from attention_book.figures.optimizations import optimizations_extrapolation_verdict as verdict

    carried = verdict(_curves(past_alibi=1.0, past_others=3.0), 8)
    assert "moved by +0.00" in carried and "rose by 2.00 to 2.00" in carried
    assert "ALiBi carried its loss past the trained length and the other models did not" in carried
    assert "it did not degrade, which is not the same as making use" in carried
    fell = verdict(_curves(past_alibi=0.9, past_others=3.0), 8)
    assert "carried its loss" in fell and "did not degrade" not in fell
    less = verdict(_curves(past_alibi=2.0, past_others=3.0), 8)
    assert "ALiBi degraded past the trained length, but less than" in less
    assert "carried" not in less
    worse = verdict(_curves(past_alibi=3.5, past_others=3.0), 8)
    assert "does not reproduce what Press et al. report" in worse
    # The late trained positions (the last quarter), not the mean, are the reference.
    curves = _curves(past_alibi=1.0, past_others=3.0)
    curves["alibi"][:6] = [5.0] * 6
    assert "moved by +0.00" in verdict(curves, 8)
