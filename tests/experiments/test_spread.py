"""The referee's yardstick: recorded spreads over arithmetic and seeds, and the rule on them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
from repo import ROOT

from attention_book.experiments.probes import declared_runs
from attention_book.experiments.spread import allowed_range, check_headlines, record_headlines
from attention_book.store import Run, cached, declared_key, seed_offset

HEADLINES = ROOT / "tests" / "recorded" / "headlines.json"
RUNS = {run.name: run for run in declared_runs()}


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTENTION_BOOK_SEED_OFFSET", raising=False)


@dataclass(frozen=True)
class Config:
    size: int = 1


def demo_run(bleu: float = 30.0, version: int = 1) -> Run:
    key = declared_key(Config(), version)
    cached("demo", key, lambda: {"bleu": bleu})
    return Run(
        "demo", version, probe=dict, result=lambda: cached("demo", key, dict), key=lambda: key,
        headline=lambda result: {"BLEU": result["bleu"]}, tolerance=0.5, module="demo.module",
    )  # fmt: skip


def recorded(*values: float, version: int = 1) -> dict:
    variants = {f"v{i}": {"numbers": {"BLEU": v}} for i, v in enumerate(values)}
    return {"demo": {"version": version, "recorded_on": "AVX512", "variants": variants}}


def test_the_range_is_the_recorded_one_widened_by_half_its_width_or_the_tolerance():
    assert allowed_range([28.0, 30.0, 29.0], 0.5) == (27.0, 31.0)
    assert allowed_range([30.0, 30.2], 0.5) == (29.5, 30.7)  # the tolerance is the least margin
    assert allowed_range([100.0], 0.5) == (99.5, 100.5)
    with pytest.raises(ValueError, match="at least one recorded number"):
        allowed_range([], 0.5)
    with pytest.raises(ValueError, match="tolerance must be at least 0, got -1"):
        allowed_range([1.0], -1)


def test_the_referee_passes_inside_the_range_and_says_how_far_outside_it_a_number_is():
    run = demo_run(30.0)
    assert check_headlines(recorded(29.0, 31.0), [run], {"demo": {"BLEU": 31.9}}) == []
    (problem,) = check_headlines(recorded(29.0, 31.0), [run], {"demo": {"BLEU": 25.0}})
    assert problem.startswith(
        "demo: BLEU is 25, 3 below what it may be (28 to 32: the 2 recorded variants span 29 "
        "to 31, widened by half that range"
    )
    assert "bump VERSION in demo.module" in problem and "make crossmachine" in problem
    (problem,) = check_headlines(recorded(29.0, 31.0), [run], {"demo": {"BLEU": 32.5}})
    assert "0.5 above what it may be" in problem


def test_the_referee_names_numbers_of_a_run_that_is_not_declared():
    (problem,) = check_headlines(recorded(30.0), [demo_run()], {"gone": {"BLEU": 30.0}})
    assert problem == "gone: not a declared run (its numbers come from older code)"


def test_the_referee_asks_for_a_recording_of_a_new_version():
    run = demo_run(30.0, version=2)
    (problem,) = check_headlines(recorded(30.0), [run], {"demo": {"BLEU": 30.0}})
    assert problem.startswith("demo: no headline numbers recorded for VERSION 2")
    assert "make crossmachine RECORD=1" in problem
    (problem,) = check_headlines({}, [run], {"demo": {"BLEU": 30.0}})
    assert "no headline numbers recorded" in problem


def test_recording_keeps_other_variants_of_the_same_version_only(tmp_path):
    run, path = demo_run(), tmp_path / "headlines.json"
    record_headlines(path, [run], {"native AVX512": {"demo": {"BLEU": 30.0}}})
    record_headlines(path, [run], {"avx2": {"demo": {"BLEU": 29.0}}})
    entry = json.loads(path.read_text())["demo"]
    assert entry["variants"] == {
        "native AVX512": {"numbers": {"BLEU": 30.0}},
        "avx2": {"numbers": {"BLEU": 29.0}},
    }
    record_headlines(path, [run], {"avx2": {"demo": {"BLEU": 28.0}}})  # the same variant again
    assert json.loads(path.read_text())["demo"]["variants"]["avx2"]["numbers"]["BLEU"] == 28.0
    record_headlines(path, [replace(run, version=2)], {"avx2": {"demo": {"BLEU": 27.0}}})
    assert list(json.loads(path.read_text())["demo"]["variants"]) == ["avx2"]


def test_recorded_pairs_put_two_numbers_side_by_side_in_each_variant(tmp_path, monkeypatch):
    from attention_book.experiments.spread import recorded_pairs, recorded_values

    path = tmp_path / "headlines.json"
    run = demo_run()
    other = Run("other", 1, probe=dict, result=dict, key=dict, headline=dict, tolerance=0.5)
    record_headlines(path, [run, other], {
        "avx2": {"demo": {"BLEU": 30.0}, "other": {"BLEU": 20.0}},
        "default": {"demo": {"BLEU": 29.0}},  # "other" not recorded in this variant
    })  # fmt: skip
    assert recorded_values("demo", path) == {"avx2": {"BLEU": 30.0}, "default": {"BLEU": 29.0}}
    assert recorded_values("missing", path) == {}
    assert recorded_values("demo", tmp_path / "none.json") == {}
    # The function reads the repository's file; point it at this one.
    import attention_book.experiments.spread as spread

    monkeypatch.setattr(spread, "HEADLINES", path)
    monkeypatch.setattr(spread, "recorded_values", lambda name: recorded_values(name, path))
    assert recorded_pairs(("demo", "BLEU"), ("other", "BLEU")) == [(30.0, 20.0)]


def test_a_seed_offset_shifts_the_seeds_and_the_keys(monkeypatch):
    import torch

    from attention_book.training.loop import set_seed

    plain = declared_key(Config(), 1)
    set_seed(3)
    expected = torch.rand(2)
    monkeypatch.setenv("ATTENTION_BOOK_SEED_OFFSET", "1")
    assert seed_offset() == 1
    set_seed(2)
    assert torch.equal(torch.rand(2), expected)
    shifted = declared_key(Config(), 1)
    assert shifted != plain and shifted["seed_offset"] == 1
    monkeypatch.setenv("ATTENTION_BOOK_SEED_OFFSET", "one")
    with pytest.raises(
        ValueError, match=r"ATTENTION_BOOK_SEED_OFFSET must be an integer, got 'one'"
    ):
        seed_offset()


# --- the recorded file ----------------------------------------------------------------------

RECORDED = json.loads(HEADLINES.read_text(encoding="utf-8"))


def test_every_recorded_headline_is_of_a_declared_run_and_version():
    with_headlines = {name for name, run in RUNS.items() if run.headline is not None}
    assert set(RECORDED) == with_headlines
    for name, entry in RECORDED.items():
        assert entry["version"] == RUNS[name].version, f"re-record {name} (make crossmachine)"


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_every_spread_covers_three_arithmetics_and_three_seeds(name):
    variants = RECORDED[name]["variants"]
    settings = {variant.split(" ")[0] for variant in variants}
    assert {"native", "avx2", "default"} <= settings, sorted(variants)
    assert {"avx2", "avx2 seed+1", "avx2 seed+2"} <= set(variants), sorted(variants)
    labels = [sorted(v["numbers"]) for v in variants.values()]
    assert all(found == labels[0] for found in labels), "every variant records every number"


def test_seeds_are_the_variants_of_one_arithmetic_and_rounding_the_others():
    from attention_book.experiments.spread import seed_of

    assert [seed_of(v) for v in ("avx2", "avx2 seed+1", "avx2 seed+4")] == [0, 1, 4]
    assert seed_of("native AVX512") is None and seed_of("default") is None
    assert seed_of("avx2 (ran DEFAULT)") is None  # not the arithmetic the seeds share


def test_seed_pairs_and_rounding_read_the_record_apart(tmp_path, monkeypatch):
    from attention_book.experiments import spread

    variants = {
        "native AVX512": 30.0,
        "avx2": 29.0,
        "default": 29.5,
        "avx2 seed+1": 25.0,
        "avx2 seed+2": 27.0,
    }
    path = tmp_path / "headlines.json"
    a = {v: {"numbers": {"x": n}} for v, n in variants.items()}
    b = {v: {"numbers": {"y": n - 10}} for v, n in variants.items()}
    record = {"a": {"version": 1, "variants": a}, "b": {"version": 1, "variants": b}}
    path.write_text(json.dumps(record))
    monkeypatch.setattr(spread, "HEADLINES", path)
    monkeypatch.setattr(spread.recorded_values, "__defaults__", (path,))
    assert spread.seed_pairs(("a", "x"), ("b", "y")) == [(29.0, 19.0), (25.0, 15.0), (27.0, 17.0)]
    assert spread.rounding_values("a", "x") == {
        "native AVX512": 30.0,
        "avx2": 29.0,
        "default": 29.5,
    }


def test_the_words_of_a_comparison_over_seeds_follow_one_rule():
    from attention_book.experiments.spread import seed_comparison

    assert seed_comparison([(2.0, 1.0), (3.0, 1.0), (2.5, 2.0)]) == (1, "in every seed")
    assert seed_comparison([(1.0, 2.0), (1.0, 3.0)]) == (-1, "in every seed")
    mostly = [(3.0, 1.0), (4.0, 1.0), (3.5, 1.0), (0.8, 1.0), (3.0, 1.0)]
    assert seed_comparison(mostly) == (1, "on average, not in every seed")
    even = [(1.0, 2.0), (2.0, 1.0), (1.5, 1.4)]
    assert seed_comparison(even) == (0, "the seeds cannot tell them apart")
    with pytest.raises(ValueError, match="at least one seed"):
        seed_comparison([])
