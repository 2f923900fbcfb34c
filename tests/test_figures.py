import pytest
from matplotlib.figure import Figure

from attention_book.figures import __main__ as render_cli
from attention_book.figures import find_figure, save_svg


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
