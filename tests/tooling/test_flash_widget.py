"""The FlashAttention widget: its WebGPU kernels against PyTorch; broken kernels fail the check.

A tiny site holds the widget (``{{ live:flash }}``), its code (``live/flash.js``) and a
reference exported as the build exports it (`booktools.live.flash`); the real browser check runs
it in headless Chromium, whose WebGPU adapter is SwiftShader, on the CPU. Copies of the widget
whose tiled kernel forgets the rescale, or masks the wrong keys, must fail the check.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from browser_sites import kernel_site
from mkdocs.exceptions import PluginError

from attention_book.flash.reference import naive_attention, tiled_attention_forward
from booktools.browser.check import check_site
from booktools.browser.serve import CHROMIUM_ARGS, find_chromium, launch
from booktools.live import flash
from booktools.live import widgets as live
from booktools.live.check import compare_kernels
from booktools.plugin.state import BuildState

needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (make chromium)"
)

#: Sabotages of the tiled WGSL kernel: (the text of flash.js, what replaces it).
BROKEN = {
    # The running sum and the accumulator kept as they were when the max grows.
    "no rescale": ("let alpha = exp(m_i - m_new);", "let alpha = 1.0;"),
    # Each query also sees the key after it.
    "wrong mask": ("(!CAUSAL || key <= i)", "(!CAUSAL || key <= i + 1u)"),
    # The diagonal tile skipped with the future ones.
    "diagonal tile skipped": (
        "end_n = min(n, start_m + BLOCK_M);",
        "end_n = min(n, max(start_m, BLOCK_N));",
    ),
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("flash")
    flash.export_flash(folder)
    return folder


def flash_site(site: Path, reference: Path, broken: str | None = None) -> str:
    """A page with the FlashAttention widget, its code (broken as named) and reference."""
    edit = ("flash.js", *BROKEN[broken]) if broken else None
    return kernel_site(site, "flash", reference, edit)


def test_the_reference_is_pytorchs_attention_on_lengths_that_are_no_multiple_of_the_tile(
    reference: Path,
):
    data = json.loads((reference / "reference.json").read_text())
    assert data["tolerance"] == flash.TOLERANCE
    shapes = [(c["length"], c["head_dim"], c["causal"]) for c in data["cases"]]
    assert shapes == list(flash.CASES)
    assert any(n % 16 for n, _, causal in shapes if causal)
    assert any(n % 16 for n, _, causal in shapes if not causal)
    for case in data["cases"]:
        n, d = case["length"], case["head_dim"]
        q, k, v = (torch.tensor(case[x], dtype=torch.float64).reshape(1, 1, n, d) for x in "qkv")
        ours, _ = tiled_attention_forward(q, k, v, causal=case["causal"], block_m=16, block_n=16)
        theirs = torch.tensor(case["out"], dtype=torch.float64).reshape(1, 1, n, d)
        assert torch.allclose(ours, theirs, atol=flash.TOLERANCE / 4)
        assert torch.allclose(naive_attention(q, k, v, causal=case["causal"]), ours, atol=1e-12)
    about = json.loads((reference / "about.json").read_text())
    assert about["reference_gzip_bytes"] < live.MAX_FLASH_GZIP_BYTES


def test_the_reference_is_exported_once_into_a_folder_named_after_the_exporter(
    tmp_path, monkeypatch
):
    folder = flash.exported(tmp_path)
    assert folder.name == f"flash-{flash.digest()}" and (folder / "reference.json").is_file()
    written = (folder / "about.json").stat().st_mtime_ns
    assert flash.exported(tmp_path) == folder  # found, not written again
    assert (folder / "about.json").stat().st_mtime_ns == written
    copy = tmp_path / "flash.py"
    copy.write_text(Path(flash.__file__).read_text() + "# an edit\n")
    monkeypatch.setattr(flash, "__file__", str(copy))
    assert flash.digest() != folder.name.removeprefix("flash-")


def test_the_widget_loads_its_own_module_and_stays_within_its_budget(reference, monkeypatch):
    html = live.widget_html("flash", "../../", live.widget_facts("flash", reference))
    assert 'data-module="../../assets/javascripts/live/flash.js"' in html
    assert "<noscript><p>JavaScript is off" in html
    assert "Load the FlashAttention widget (" in html
    sentence = live.notebook_text("{{ live:flash }}", "chapters/x/", "https://example.org/",
                                  BuildState())  # fmt: skip
    assert sentence.startswith("*The FlashAttention widget runs in the browser on [the book's")
    facts = live.widget_facts("flash", reference)
    assert facts["download_gzip_bytes"] < live.MAX_FLASH_GZIP_BYTES
    monkeypatch.setattr(live, "MAX_FLASH_GZIP_BYTES", facts["download_gzip_bytes"] - 1)
    with pytest.raises(PluginError, match=r"the live flash downloads .* over the"):
        live.widget_facts("flash", reference)


def test_compare_kernels_reports_each_kernel_and_a_missing_webgpu():
    case = {"length": 1, "head_dim": 2, "causal": False, "out": [0.5, 0.25]}
    reference = {"tolerance": 1e-5, "cases": [case]}
    good = {"backend": "webgpu", "cases": [{"tiled": [0.5, 0.25], "naive": [0.5, 0.25000001]}]}
    assert compare_kernels(reference, good)[0] == []
    bad = {"backend": "cpu", "cases": [{"tiled": [0.5, 0.3], "naive": [0.5, math.nan]}]}
    problems, differences = compare_kernels(reference, bad)
    assert problems[0] == "live flash: the kernels did not run on WebGPU (backend 'cpu')"
    assert "the tiled kernel differs from PyTorch's by up to 0.05" in problems[1]
    assert "the naive kernel differs from PyTorch's by up to inf" in problems[2]
    assert differences[0]["naive"] == math.inf
    assert compare_kernels(reference, None)[0] == ["live flash: the page computed nothing"]


@pytest.fixture(scope="module")
def playwright():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as started:
        yield started


@pytest.fixture(scope="module")
def browser(playwright):
    shared = launch(playwright)
    yield shared
    shared.close()


def flash_check(site: Path, path: str, browser):
    reports = check_site(site, pages=[path], search=False, dark=False, browser=browser)
    return [p for report in reports for p in report.problems], reports[0].live


@needs_chromium
def test_both_webgpu_kernels_compute_what_pytorch_computes(tmp_path, reference, browser):
    problems, found = flash_check(tmp_path, flash_site(tmp_path, reference), browser)
    assert problems == []
    (report,) = found
    assert report.name == "flash" and report.cases == len(flash.CASES)
    assert 0 < report.weight_difference < flash.TOLERANCE, report.summary()
    assert 0 < report.bytes < live.MAX_FLASH_GZIP_BYTES
    assert any("n=256: tiled" in timing for timing in report.timings), report.timings


@needs_chromium
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_tiled_kernel_fails_the_check(tmp_path, reference, browser, broken: str):
    problems, _ = flash_check(tmp_path, flash_site(tmp_path, reference, broken), browser)
    assert problems, broken
    assert all("the tiled kernel differs from PyTorch's" in p for p in problems), problems
    causal = [c for c in flash.CASES if c[2]]
    if broken != "no rescale":  # a mask is wrong only where there is one
        assert len(problems) == len(causal), problems


@needs_chromium
def test_without_webgpu_the_page_says_so_and_runs_the_algorithms_on_the_cpu(
    tmp_path, reference, playwright
):
    from booktools.browser import scripts as js
    from booktools.browser.serve import browsing

    path = flash_site(tmp_path, reference)
    args = [arg for arg in CHROMIUM_ARGS if "webgpu" not in arg and "swiftshader" not in arg]
    plain = playwright.chromium.launch(executable_path=find_chromium(), args=args)
    try:
        with browsing(tmp_path, plain) as (new_context, base_url):
            page = new_context().new_page()
            page.goto(base_url + path)
            page.click(".book-live__load")
            page.wait_for_function("document.querySelector('.book-live').dataset.state === 'done'")
            text = page.inner_text(".book-live")
            result = page.evaluate(js.LIVE_RESULT, "flash")
    finally:
        plain.close()
    assert "WebGPU is missing here" in text
    assert result["backend"] == "cpu"
    data = json.loads((reference / "reference.json").read_text())
    problems, _ = compare_kernels(data, {**result, "backend": "webgpu"})
    assert problems == []  # float64 in JavaScript: PyTorch's float32 within the tolerance
