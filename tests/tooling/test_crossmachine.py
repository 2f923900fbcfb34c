"""make crossmachine (booktools.checks.crossmachine): variants, their environments and the table."""

from __future__ import annotations

import pytest

from booktools.checks import crossmachine
from booktools.checks.crossmachine import (
    CHECKED,
    RECORDED,
    environment,
    parse_variant,
    table,
    variant_label,
    verdict_files,
)


def test_variants_name_a_setting_and_a_seed_offset():
    assert parse_variant("avx2") == ("avx2", 0)
    assert parse_variant("avx2 seed+2") == ("avx2", 2)
    with pytest.raises(ValueError, match=r"the setting must be one of \['avx2', 'default'"):
        parse_variant("avx512")
    with pytest.raises(ValueError, match="the seed part must be like 'seed\\+1', got 'seed2'"):
        parse_variant("avx2 seed2")
    for name in (*CHECKED, *RECORDED):
        parse_variant(name)
    # The recorded spread covers three arithmetics and five independent seeds under AVX2.
    assert {parse_variant(n)[0] for n in RECORDED} == {"native", "avx2", "default"}
    seeds = [parse_variant(n)[1] for n in RECORDED if parse_variant(n)[0] == "avx2"]
    assert sorted(seeds) == [0, 1, 2, 3, 4]


def test_each_variant_trains_into_its_own_store_with_its_arithmetic(monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")  # a setting of the caller never leaks
    avx2, plain, seeded = environment("avx2"), environment("default"), environment("avx2 seed+1")
    assert avx2["ATEN_CPU_CAPABILITY"] == "avx2" and avx2["MKL_CBWR"] == "AVX2"
    assert avx2["ONEDNN_MAX_CPU_ISA"] == "AVX2" and avx2["ATTENTION_BOOK_SEED_OFFSET"] == "0"
    assert plain["ATEN_CPU_CAPABILITY"] == "default" and plain["MKL_CBWR"] == "COMPATIBLE"
    assert seeded["ATTENTION_BOOK_SEED_OFFSET"] == "1"
    stores = {env["ATTENTION_BOOK_CACHE"] for env in (avx2, plain, seeded)}
    assert len(stores) == 3 and all(s.startswith(str(crossmachine.OUT)) for s in stores)
    assert "ATEN_CPU_CAPABILITY" not in environment("native")


def test_the_table_shows_each_number_in_each_variant_with_its_allowed_range():
    trained = {
        v: {"runs": {"multihead": {"cpu_seconds": s, "numbers": {"accuracy %, 1 head": a}}}}
        for v, s, a in (("avx2", 15.0, 58.1), ("default", 40.0, 57.5))
    }
    label = "accuracy %, 1 head"
    variants = {"x": {"numbers": {label: 57.0}}, "y": {"numbers": {label: 59.0}}}
    recorded = {"multihead": {"variants": variants}}
    text = table(trained, recorded)
    assert "| multihead | accuracy %, 1 head | 58.1 | 57.5 | 57 to 59 | 56 to 60 |" in text
    assert "| multihead | 15 | 40 |" in text and "| **all** | 15 | 40 |" in text


def test_a_variant_is_labelled_with_the_kernels_its_own_process_ran(monkeypatch):
    # The caller held to AVX2 does not make the native variant "native AVX2".
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert variant_label("native", "AVX512") == "native AVX512"
    assert variant_label("native seed+1", "AVX512") == "native AVX512 seed+1"
    assert variant_label("avx2", "AVX2") == "avx2"
    assert variant_label("avx2 seed+2", "AVX2") == "avx2 seed+2"
    assert variant_label("avx2", "DEFAULT") == "avx2 (ran DEFAULT)"  # a CPU without AVX2
    assert variant_label("default", "DEFAULT") == "default"


def test_one_run_is_checked_by_the_verdict_tests_of_the_chapters_that_show_it():
    every = verdict_files()
    assert "tests/experiments/test_multihead_figures.py" in every
    assert verdict_files(["multihead"]) == ["tests/experiments/test_multihead_figures.py"]
    assert "tests/experiments/test_multihead_figures.py" not in verdict_files(["vit"])
    assert set(verdict_files(["vit"])) < set(every)


def test_one_run_trains_its_variants_side_by_side(monkeypatch):
    calls = []

    def train(name, jobs, runs):
        calls.append((name, jobs, runs))
        return {"cpu": "AVX2", "runs": {}}

    monkeypatch.setattr(crossmachine, "train", train)
    trained = crossmachine.train_variants(["avx2", "default"], 2, ["multihead"])
    assert list(trained) == ["avx2", "default"]
    assert sorted(calls) == [("avx2", 1, ["multihead"]), ("default", 1, ["multihead"])]
    calls.clear()
    crossmachine.train_variants(["avx2", "default"], 2, None)  # every run: one variant at a time
    assert calls == [("avx2", 2, None), ("default", 2, None)]
