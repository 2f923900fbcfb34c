"""The training playground: the page trains as PyTorch trains; broken copies fail the check.

A tiny site holds the widget (``{{ live:train }}``), its code (``live/train.js`` and
``live/train_widget.js``) and a reference exported as the build exports it
(`booktools.live.train`); the real browser check runs it in headless Chromium: the page trains
every reference case and its losses and weights are compared with PyTorch's. Copies of the
trainer with a wrong softmax gradient, or without the causal mask, must fail the check.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from browser_sites import kernel_site
from mkdocs.exceptions import PluginError

from attention_book.playground import (
    Mulberry32,
    PlaygroundConfig,
    playground_batch,
    playground_model,
    train_playground,
)
from booktools.browser.check import check_site
from booktools.browser.serve import launch
from booktools.live import train
from booktools.live import widgets as live
from booktools.live.check import compare_training, decoded
from booktools.plugin.state import BuildState

needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (make chromium)"
)

#: Sabotages of the trainer: (the text of train.js, what replaces it).
BROKEN = {
    # The softmax's gradient without the term that keeps each row summing to one.
    "wrong softmax gradient": (
        "const ds = w * (dP[j] - dot) * scale",
        "const ds = w * dP[j] * scale",
    ),
    # Every query sees every key, the future ones too.
    "no mask": ("this.masked = true;", "this.masked = false;"),
}

#: What the widget shows of the build's study, written by hand (the real one takes minutes).
STUDY = {
    "max_steps": 1500,
    "eval_every": 25,
    "solved_accuracy": 0.99,
    "seeds": [0, 1, 2],
    "configs": [
        {"task": "reverse", "num_blks": 2, "num_heads": 2, "positional": "learned",
         "solved_at": [200, 225, None], "final_accuracy": [0.995, 0.993, 0.41]},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The exported reference trainings, and a study written by hand."""
    folder = tmp_path_factory.mktemp("train")
    cases = [train.reference_case(steps, changes) for steps, changes in train.CASES]
    data = {"tolerance": train.TOLERANCE, "cases": cases}
    (folder / "reference.json").write_text(json.dumps(data))
    (folder / "study.json").write_text(json.dumps(STUDY))
    about = {"tolerance": train.TOLERANCE, "reference_cases": len(train.CASES),
             "steps": train.CASES[0][0]}  # fmt: skip
    (folder / "about.json").write_text(json.dumps(about))
    return folder


def test_the_reference_is_pytorchs_training_from_the_seed(reference: Path):
    data = json.loads((reference / "reference.json").read_text())
    assert data["tolerance"] == train.TOLERANCE
    first = data["cases"][0]
    config = PlaygroundConfig()
    assert first["config"] == asdict(config) and first["steps"] == train.CASES[0][0]
    # The losses are those of train_playground, the weights those it starts from.
    run = train_playground(config, first["steps"], stop_when_solved=False)
    assert first["losses"] == run["losses"]
    start = torch.cat([p.detach().reshape(-1) for p in playground_model(config).parameters()])
    assert decoded(first["init"], "<f8") == start.tolist()
    final = torch.cat([p.detach().reshape(-1) for p in run["model"].parameters()])
    assert decoded(first["final"], "<f8") == final.tolist()
    # The batches are the stream of Mulberry32(seed + 1).
    rng = Mulberry32(config.seed + 1)
    tokens, answers = playground_batch(config.task, rng, config.batch_size, config.num_digits)
    size = tokens.numel()
    assert decoded(first["tokens"], "u1")[:size] == tokens.reshape(-1).tolist()
    assert decoded(first["answers"], "u1")[: answers.numel()] == answers.reshape(-1).tolist()
    # Between them the cases cross both tasks and every kind of positions and of heads.
    configs = [case["config"] for case in data["cases"]]
    assert {c["task"] for c in configs} == {"reverse", "sort"}
    assert {c["positional"] for c in configs} == {"learned", "sinusoidal", "none"}
    assert {c["num_heads"] for c in configs} == {1, 2, 4}


def page_result(data: dict, change=None) -> dict:
    """What a page that trains exactly as PyTorch would return, with `change` applied."""
    cases = []
    for case in data["cases"]:
        final, at, weights = decoded(case["final"], "<f8"), 0, {}
        for name, shape in zip(case["names"], case["shapes"], strict=True):
            weights[name] = final[at : at + math.prod(shape)]
            at += math.prod(shape)
        cases.append({"losses": list(case["losses"]), "final": weights, "init_difference": 0.0,
                      "batches_equal": True, "ms_per_step": 12.5})  # fmt: skip
    if change:
        change(cases[0])
    return {"cases": cases}


def test_compare_training_names_each_way_the_page_can_differ(reference: Path):
    data = json.loads((reference / "reference.json").read_text())
    problems, differences = compare_training(data, page_result(data))
    assert problems == []
    assert [d["losses"] for d in differences] == [0.0] * len(train.CASES)

    def loss(case):
        case["losses"][-1] *= 1 + 1e-6

    def weight(case):
        case["final"]["head.weight"][3] += 1e-6

    def batches(case):
        case["batches_equal"] = False

    def start(case):
        case["init_difference"] = 1e-9

    def nan(case):
        case["final"]["embedding.weight"][0] = math.nan

    expected = {
        loss: "the page's losses differ from PyTorch's by up to 1e-06 (relative)",
        weight: "the page's weights differ from PyTorch's",
        batches: "the page draws other batches than PyTorch",
        start: "the page's own initial weights differ from PyTorch's by up to 1e-09",
        nan: "the page's weights differ from PyTorch's by up to inf",
    }
    for change, message in expected.items():
        problems, _ = compare_training(data, page_result(data, change))
        assert len(problems) == 1 and message in problems[0], (change.__name__, problems)
        assert problems[0].startswith("live train, reverse, 2 layers, 2 heads, learned")
    assert compare_training(data, None)[0] == ["live train: the page trained nothing"]
    third = compare_training(data, page_result(data))[1][2]["case"]
    assert third == "reverse, 1 layer, 1 head, no positions, seed 3, 100 steps"
    short = page_result(data)
    short["cases"].pop()
    assert "2 trainings, not 3" in compare_training(data, short)[0][0]


def test_the_widget_loads_its_own_module_and_stays_within_its_budget(reference, monkeypatch):
    facts = live.widget_facts("train", reference)
    html = live.widget_html("train", "../../", facts)
    assert 'data-module="../../assets/javascripts/live/train_widget.js"' in html
    assert "Load the training playground (" in html and "<noscript><p>JavaScript is off" in html
    # The reader downloads the code and the study, never the check's reference.
    study = live.gzip_bytes(reference / "study.json")
    assert facts["download_gzip_bytes"] == facts["code_gzip_bytes"] + study
    assert facts["download_gzip_bytes"] < live.MAX_TRAIN_GZIP_BYTES
    assert live.VALUES["tolerance"](facts) == "1e-09"
    assert live.VALUES["reference_cases"](facts) == str(len(train.CASES))
    sentence = live.notebook_text("{{ live:train }}", "chapters/x/", "https://example.org/",
                                  BuildState())  # fmt: skip
    assert sentence.startswith("*The training playground runs in the browser on [the book's")
    monkeypatch.setattr(live, "MAX_TRAIN_GZIP_BYTES", facts["download_gzip_bytes"] - 1)
    with pytest.raises(PluginError, match=r"the live train downloads .* over the"):
        live.widget_facts("train", reference)


def test_the_export_folder_is_named_after_the_trainers_and_the_study(monkeypatch, tmp_path):
    from attention_book.experiments import playground as study

    first = train.digest()
    assert train.digest() == first
    monkeypatch.setattr(study, "playground_cache_key", lambda: {"another": "study"})
    assert train.digest() != first
    monkeypatch.undo()
    edited = tmp_path / "playground.py"
    edited.write_text(train.SOURCES[1].read_text() + "# an edit\n")
    monkeypatch.setattr(train, "SOURCES", (train.SOURCES[0], edited))
    assert train.digest() != first
    assert train.SOURCES[1].name == "playground.py"


def train_site(site: Path, reference: Path, broken: str | None = None) -> str:
    """A page with the training widget, its code (broken as named) and its reference."""
    edit = ("train.js", *BROKEN[broken]) if broken else None
    return kernel_site(site, "train", reference, edit)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        shared = launch(playwright)
        yield shared
        shared.close()


def train_check(site: Path, path: str, browser):
    reports = check_site(site, pages=[path], search=False, dark=False, browser=browser)
    return [p for report in reports for p in report.problems], reports[0].live


@needs_chromium
def test_the_page_trains_as_pytorch_trains(tmp_path, reference, browser):
    problems, found = train_check(tmp_path, train_site(tmp_path, reference), browser)
    assert problems == []
    (report,) = found
    assert report.name == "train" and report.cases == len(train.CASES)
    assert report.logit_difference < train.TOLERANCE and report.weight_difference < train.TOLERANCE
    assert 0 < report.bytes < live.MAX_TRAIN_GZIP_BYTES
    assert "ms per step" in report.timings[0], report.timings


@needs_chromium
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_trainer_fails_the_check(tmp_path, reference, browser, broken: str):
    problems, _ = train_check(tmp_path, train_site(tmp_path, reference, broken), browser)
    assert problems, broken
    differ = [p for p in problems if "differ from PyTorch's by up to" in p]
    assert len(differ) == 2 * len(train.CASES), problems  # losses and weights, every case
