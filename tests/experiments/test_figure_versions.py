"""Figures are keyed by their modules' declared ``VERSION``; recorded fingerprints keep it honest.

The site build draws a figure again only when what it declares changes (its module's
``VERSION``, the experiments' versions and run keys, the libraries), never for an edit of its
source. These tests catch an edit that changes what a figure shows without bumping the
version: every figure that reads nothing from the result store and draws the same numbers
every time is drawn again and compared with ``tests/recorded/figures.json`` (``make probes``
records it). A figure that reads trained runs is covered by the keys of those runs (the
probes keep those honest); the record says why each unchecked figure is not compared.
"""

from __future__ import annotations

import json

import pytest
from repo import ROOT

from attention_book.figures import declaration, figure_functions
from attention_book.figures._fingerprint import drawing_problems, fingerprint, version_problems

RECORDED = json.loads((ROOT / "tests" / "recorded" / "figures.json").read_text(encoding="utf-8"))
RESULTS = ROOT / "benchmarks" / "results"
CHECKED = sorted(name for name, entry in RECORDED.items() if "fingerprint" in entry)


def test_every_figure_is_recorded_for_its_modules_version():
    assert version_problems(RECORDED) == []


def test_most_figures_that_read_no_trained_run_are_compared():
    unchecked = {n: e["unchecked"] for n, e in RECORDED.items() if "fingerprint" not in e}
    reasons = {reason.split(" (")[0] for reason in unchecked.values()}
    assert len(CHECKED) >= 40
    assert reasons <= {
        "reads trained runs",
        "its numbers change from one drawing to the next",
        "slow to draw",
    } | {r for r in reasons if r.startswith("reads ") and r.endswith("from the result store")}


@pytest.mark.parametrize("name", CHECKED)
def test_a_figure_shows_what_was_recorded_for_its_version(name):
    assert drawing_problems(name, RECORDED[name], RESULTS) == []


def test_an_edit_that_changes_a_drawing_is_caught_and_says_to_bump_the_version(monkeypatch):
    import attention_book.figures.scoring as scoring

    name = next(n for n in CHECKED if RECORDED[n]["module"] == scoring.__name__)
    entry = RECORDED[name]
    function = figure_functions()[name]
    drawn = function()

    def edited():  # the same figure with one more line: what an unannounced edit looks like
        if hasattr(drawn, "axes"):
            drawn.axes[0].plot([0.0, 1.0], [0.0, 1.0])
            return drawn
        return drawn + "\nA sentence more." if isinstance(drawn, str) else {**drawn, "x": "1"}

    monkeypatch.setattr(scoring, name, edited)
    monkeypatch.setattr(scoring, "FIGURES", tuple(
        edited if f.__name__ == name else f for f in scoring.FIGURES
    ))  # fmt: skip
    edited.__name__ = name
    problems = drawing_problems(name, entry, RESULTS)
    assert problems and "bump that VERSION" in problems[0] and scoring.__name__ in problems[0]


def test_a_version_bump_asks_for_a_new_record():
    name = CHECKED[0]
    stale = {**RECORDED, name: {**RECORDED[name], "version": RECORDED[name]["version"] - 1}}
    problems = version_problems(stale)
    assert len(problems) == 1 and name in problems[0] and "make probes" in problems[0]


def test_a_figure_is_declared_by_its_modules_versions_and_the_runs_it_reads():
    found = declaration("attention_book.figures.introduction")
    # The introduction draws with helpers of the Bahdanau chapter's module, and its runs.
    assert {"attention_book.figures.introduction", "attention_book.figures.bahdanau"} <= set(
        found["figures"]
    )
    assert {"bahdanau-plain", "bahdanau-attention"} <= set(found["runs"])
    runs = found["computations"]["attention_book.experiments.bahdanau"]["runs"]
    assert runs["bahdanau-attention"]["version"] >= 1
    # A module that reads no experiment declares only itself.
    alone = declaration("attention_book.figures.home")
    assert alone == {"figures": {"attention_book.figures.home": 1}, "computations": {}, "runs": []}


def test_fingerprints_see_the_data_not_only_the_texts():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def drawn(y):
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], y)
        ax.set_title("same title")
        return json.loads(json.dumps(fingerprint(fig)))

    from attention_book.experiments.probes import differences

    assert differences(drawn([0.0, 1.0, 2.0]), drawn([0.0, 1.0, 2.0])) == []
    assert differences(drawn([0.0, 1.0, 2.0]), drawn([0.0, 1.5, 2.0]))
    plt.close("all")
