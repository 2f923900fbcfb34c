"""The probe test: every stored run computes what its declared VERSION recorded.

Results are keyed by what they declare (configuration, VERSION, inputs, library versions), not
by source code, so that a refactor retrains nothing. These tests keep that safe: each run's
probe (its own ``run`` function at a small configuration) must reproduce the fingerprint
recorded in ``tests/recorded/probes.json`` for its VERSION. ``make probes`` re-records.
The tests further down show the check failing on a broken copy of the package, passing on a
docstring edit, and the recorder refusing a changed computation at an unchanged VERSION.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from repo import ROOT

from attention_book.experiments.probes import (
    PROBE_RTOL,
    check_probes,
    declared_runs,
    differences,
    fingerprint,
    probe_fingerprints,
    record_probes,
)
from attention_book.store import Run

RECORDED = ROOT / "tests" / "recorded" / "probes.json"
RUNS = {run.name: run for run in declared_runs()}


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    # The probes store nothing, but the corpus they read is cached: keep it out of the
    # reader's cache.
    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_probe_computes_what_its_version_recorded(name):
    run = RUNS[name]
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    problems = check_probes(recorded, probe_fingerprints([run]), [run])
    assert not problems, "\n".join(problems)


def test_every_recorded_probe_is_of_a_declared_run():
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    assert sorted(recorded) == sorted(RUNS), "re-record the probes (make probes)"


def test_every_run_with_a_headline_has_a_tolerance_and_its_module_a_version():
    import importlib

    for run in RUNS.values():
        assert getattr(importlib.import_module(run.module), run.version_name) == run.version
        if run.headline is not None:
            assert run.tolerance > 0, run.name


# --- the fingerprint and its comparison ------------------------------------------------------


def test_a_fingerprint_keeps_numbers_strings_and_tensor_checksums_but_no_times():
    value = {
        "loss": [2.5, 1.25],
        "train_seconds": 3.0,
        "decode_seconds": {"greedy": 1.0},
        "greedy": ("le chat", "un chien"),
        "state": {"w": torch.arange(4.0)},
        "identical": True,
    }
    found = fingerprint(value)
    assert set(found) == {"loss", "greedy", "state", "identical"}
    assert found["greedy"] == ["le chat", "un chien"]
    assert found["state"]["w"]["shape"] == [4]
    assert found["state"]["w"]["norm"] == pytest.approx(14**0.5)
    json.dumps(found)  # plain JSON


def test_any_change_of_a_tensor_beyond_the_tolerance_moves_its_fingerprint():
    torch.manual_seed(0)
    x = torch.randn(50, dtype=torch.float64)
    assert differences(fingerprint(x), fingerprint(x * (1 + 10 * PROBE_RTOL))) != []
    assert differences(fingerprint(x), fingerprint(x * (1 + PROBE_RTOL / 10))) == []
    for index in range(50):  # one element, by 1% of the tensor's norm
        y = x.clone()
        y[index] += 0.01 * x.norm()
        assert differences(fingerprint(x), fingerprint(y)), index
    for a, b in [(3, 7), (0, 49), (10, 11)]:  # two elements swapped: the norm stays
        y = x.clone()
        y[[a, b]] = y[[b, a]]
        assert differences(fingerprint(x), fingerprint(y)), (a, b)


def test_differences_name_where_and_how_much():
    recorded = {"loss": [1.0, 2.0], "tokens": "le chat", "n": 3, "w": fingerprint(torch.ones(3))}
    assert differences(recorded, recorded) == []
    close = {**recorded, "loss": [1.0, 2.0 * (1 + PROBE_RTOL / 2)]}
    assert differences(recorded, close) == []
    now = {"loss": [1.0, 2.5], "tokens": "le chien", "n": 3, "w": fingerprint(torch.ones(4))}
    assert differences(recorded, now) == [
        "loss[1]: 2 recorded, 2.5 now",
        'tokens: "le chat" recorded, "le chien" now',
        "w: shape [3] recorded, [4] now",
    ]
    assert differences({"a": 1}, {"b": 1}) == ["a: missing now", "b: new"]
    assert differences([1, 2], [1]) == ["the result: 2 entries recorded, 1 now"]
    assert differences({"flag": True}, {"flag": 1}) == ["flag: true recorded, 1 now"]


# --- recording, and what the check says ------------------------------------------------------


def _run(value, version=1):
    return Run("demo", version, probe=lambda: value, result=dict, key=dict, module="demo.module")


def test_the_check_names_the_run_and_says_what_to_do(tmp_path):
    path = tmp_path / "probes.json"
    assert record_probes(path, [_run({"loss": [1.0]})]) == []
    recorded = json.loads(path.read_text())
    changed = _run({"loss": [1.5]})
    problems = check_probes(recorded, probe_fingerprints([changed]), [changed])
    assert len(problems) == 1
    assert problems[0].startswith("demo computes differently now (VERSION 1, 1 differences)")
    assert "loss[0]: 1 recorded, 1.5 now" in problems[0]
    assert "bump VERSION in demo.module and re-record the probes (make probes)" in problems[0]
    bumped = _run({"loss": [1.5]}, version=2)
    problems = check_probes(recorded, probe_fingerprints([bumped]), [bumped])
    assert problems == [
        "demo: VERSION is 2 but its probe was recorded at VERSION 1: re-record the probes "
        "(make probes)"
    ]
    assert check_probes({}, probe_fingerprints([bumped]), [bumped]) == [
        "demo: no probe recorded: record it (make probes)"
    ]


def test_recording_refuses_a_changed_computation_at_the_same_version(tmp_path):
    path = tmp_path / "probes.json"
    record_probes(path, [_run({"loss": [1.0]})])
    refused = record_probes(path, [_run({"loss": [1.5]})])
    assert refused == [
        "demo: its probe computes differently at the same VERSION 1: bump VERSION in "
        "demo.module first (loss[0]: 1 recorded, 1.5 now)"
    ]
    assert json.loads(path.read_text())["demo"]["fingerprint"] == {"loss": [1.0]}  # kept
    assert record_probes(path, [_run({"loss": [1.5]}, version=2)]) == []  # bumped: recorded
    assert json.loads(path.read_text())["demo"]["version"] == 2
    assert record_probes(path, [_run({"loss": [2.0]}, version=2)], force=True) == []


def test_recording_again_keeps_an_agreeing_entry_as_it_was_written(tmp_path):
    # Another machine rounds the same computation a little differently: nothing is rewritten.
    path = tmp_path / "probes.json"
    record_probes(path, [_run({"loss": [1.0]})])
    written = path.read_text()
    rounded = _run({"loss": [1.0 * (1 + PROBE_RTOL / 10)]})
    assert record_probes(path, [rounded]) == []
    assert path.read_text() == written
    other = Run("other", 1, probe=lambda: {"loss": [3.0]}, result=dict, key=dict, module="m")
    assert record_probes(path, [rounded, other]) == []  # a new run is added, demo untouched
    entries = json.loads(path.read_text())
    assert entries["demo"]["fingerprint"] == {"loss": [1.0]}
    assert entries["other"]["fingerprint"] == {"loss": [3.0]}


# --- shown failing on a broken copy ----------------------------------------------------------


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "attention_book", tmp_path / "attention_book",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )  # fmt: skip
    return tmp_path / "attention_book"


def _probe_copy(tmp_path: Path, run: str) -> subprocess.CompletedProcess:
    """``python -m attention_book.experiments probes`` on the copy, for one run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "ATTENTION_BOOK_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "attention_book.experiments", "probes", str(RECORDED)]
    return subprocess.run(
        [*command, "--run", run], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_changed_computation_fails_the_probe_and_a_docstring_edit_does_not(tmp_path):
    package = _copy_package(tmp_path)
    # A refactor that computes the same: a docstring, a comment, a new helper.
    _edit(package / "attention.py", '"""', '"""An edited docstring.\n\n')
    (package / "attention.py").write_text(
        (package / "attention.py").read_text() + "\n\ndef a_new_helper():\n    return 1\n"
    )
    passed = _probe_copy(tmp_path, "multihead")
    assert passed.returncode == 0, passed.stderr[-3000:]
    # A small change of what is computed: the scores divided by sqrt(d + 1), not sqrt(d).
    _edit(package / "attention.py", "/ math.sqrt(d)", "/ math.sqrt(d + 1)")
    failed = _probe_copy(tmp_path, "multihead")
    assert failed.returncode == 1
    assert "multihead computes differently now (VERSION 1" in failed.stderr
    assert "bump VERSION in attention_book.experiments.multihead" in failed.stderr


def test_an_edited_corpus_generator_fails_until_its_version_is_bumped(tmp_path):
    package = _copy_package(tmp_path)
    _edit(package / "data" / "corpus.py", '("sold", "vendu")', '("sold", "revendu")')
    failed = _probe_copy(tmp_path, "builtin-corpus")
    assert failed.returncode == 1
    assert "builtin-corpus computes differently now (CORPUS_VERSION 3" in failed.stderr
    assert "bump CORPUS_VERSION in attention_book.data.corpus" in failed.stderr
    _edit(package / "data" / "corpus.py", "CORPUS_VERSION = 3", "CORPUS_VERSION = 4")
    bumped = _probe_copy(tmp_path, "builtin-corpus")
    assert bumped.returncode == 1
    assert "CORPUS_VERSION is 4 but its probe was recorded at CORPUS_VERSION 3" in bumped.stderr
