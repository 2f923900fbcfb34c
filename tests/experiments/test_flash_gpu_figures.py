"""The words of the FlashAttention GPU page that depend on the roofline's numbers.

`flash_gpu_verdict` says where tiled attention without reuse levels off against each GPU's
ridge point; it is fed a level below every ridge point and one above some, and the page is
checked to take the words from the build.
"""

from __future__ import annotations

from repo import ROOT

from attention_book.figures.flash_gpu import flash_gpu_verdict, flash_roofline_facts

PAGE = ROOT / "docs" / "chapters" / "flash-attention-gpu.md"
RIDGES = {"A100": 153.0, "H100": 295.0}


def test_a_level_below_every_ridge_point_is_memory_bound_on_all():
    words = flash_gpu_verdict(128.0, RIDGES)["no_reuse"]
    assert words.startswith("below the ridge point of every GPU in the table (the lowest is A100's")
    assert words.endswith("memory-bound on all of them too")


def test_a_level_above_some_ridge_points_names_the_others():
    assert flash_gpu_verdict(200.0, RIDGES)["no_reuse"] == (
        "below the ridge points of these GPUs of the table: H100"
    )
    assert flash_gpu_verdict(400.0, RIDGES)["no_reuse"].endswith("of the table: none")


def test_the_page_reads_the_roofline_through_the_build():
    text = PAGE.read_text(encoding="utf-8")
    assert "{{ build:flash_roofline_facts.no_reuse }}" in text
    facts = flash_roofline_facts()
    assert facts["limit"] == facts["block_m"]  # re-reads per block of B_r queries: B_r FLOP/byte
