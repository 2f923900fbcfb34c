import re
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from attention_book.figures import __main__ as render_cli
from attention_book.figures import find_figure, save_svg

ROOT = Path(__file__).resolve().parents[1]
FIGURE_LINK = re.compile(r"\]\((?:\.\./)*figures/(\w+)\.svg")
BUILD_FRAGMENT = re.compile(r"\{\{ build:(\w+) \}\}")


def referenced(pattern: re.Pattern) -> set[str]:
    names = set()
    for page in (ROOT / "docs").rglob("*.md"):
        names.update(pattern.findall(page.read_text(encoding="utf-8")))
    return names


@pytest.mark.parametrize("name", sorted(referenced(FIGURE_LINK) | referenced(BUILD_FRAGMENT)))
def test_every_figure_a_page_shows_has_a_function(name):
    assert callable(find_figure(name))


def test_unknown_figure_names_the_module_to_edit():
    with pytest.raises(ValueError, match="no figure function named 'nope'"):
        find_figure("nope")


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
