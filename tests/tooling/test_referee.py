"""The build's referee (booktools.plugin.referee): stored results against recorded headlines."""

from __future__ import annotations

import json

import pytest
from mkdocs.exceptions import PluginError

from attention_book.experiments import multihead
from attention_book.store import cached
from booktools.plugin.referee import HEADLINES, referee


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path / "cache"))


def _store_multihead(accuracy: float) -> None:
    """A stand-in for the stored multi-head result, with every answer at `accuracy`."""
    runs = [
        {"num_heads": h, "seed": s, "accuracy_before": accuracy, "accuracy_after": accuracy}
        for h in multihead.MULTIHEAD_CONFIG.head_counts
        for s in multihead.MULTIHEAD_CONFIG.seeds
    ]
    cached("multihead", multihead.multihead_cache_key(), lambda: {"runs": runs})


def _recorded(tmp_path, percent: float):
    numbers = {f"accuracy %, {h} head{'s' if h > 1 else ''}": percent for h in (1, 2, 4)}
    variants = {"native": {"numbers": numbers}}
    path = tmp_path / "headlines.json"
    path.write_text(json.dumps({"multihead": {"version": multihead.VERSION, "variants": variants}}))
    return path


def test_the_referee_compares_what_the_store_holds(tmp_path):
    assert referee(_recorded(tmp_path, 90.0)) == 0  # nothing stored: nothing to compare
    _store_multihead(0.9)
    assert referee(_recorded(tmp_path, 90.2)) == 1  # within the tolerance


def test_the_referee_fails_the_build_on_a_moved_number(tmp_path):
    _store_multihead(0.9)
    with pytest.raises(
        PluginError, match=r"multihead: accuracy %, 1 head is 90, 4.5 below what it may be"
    ):
        referee(_recorded(tmp_path, 95.0))
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(PluginError, match="multihead: no headline numbers recorded for VERSION"):
        referee(empty)


def test_the_recorded_file_is_the_one_make_probes_writes():
    assert HEADLINES.name == "headlines.json" and HEADLINES.is_file()
