"""The words of the chapter "Beyond one device" that depend on its measurements.

`beyond_verdict` says whether two results agree: the ring's measured forward memory and its
formula, the parallel samples drawn with and without a shared prompt, each request's tokens
under continuous batching and alone. Each is fed both outcomes, and the pages are checked to
take the words from the build.
"""

from __future__ import annotations

from repo import ROOT

from attention_book.figures.beyond_one_device import beyond_verdict

CHAPTERS = ROOT / "docs" / "chapters"


def test_the_verdict_says_whether_the_results_agree():
    assert beyond_verdict(formula_exact=True) == {"formula_exact": "equal"}
    assert beyond_verdict(formula_exact=False) == {"formula_exact": "not equal"}
    assert beyond_verdict(paged_same=True, batching_same=False) == {
        "paged_same": "the same",
        "batching_same": "not the same",
    }
    assert beyond_verdict() == {}


def test_the_pages_take_the_words_from_the_build():
    ring = (CHAPTERS / "beyond-one-device-ring.md").read_text(encoding="utf-8")
    assert "{{ build:beyond_ring_facts.formula_exact }}" in ring
    core = (CHAPTERS / "beyond-one-device.md").read_text(encoding="utf-8")
    for name in ("beyond_paged_facts", "beyond_batching_facts"):
        assert f"{{{{ build:{name}.same }}}}" in core, name
