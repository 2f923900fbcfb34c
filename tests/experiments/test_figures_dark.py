"""Figures drawn for the dark page: the same data, recoloured at build time."""

from __future__ import annotations

import colorsys

import numpy as np
from matplotlib.colors import to_rgba

from attention_book.figures import dark_color, recolor_for_dark
from attention_book.figures.__main__ import main as render
from attention_book.plotting import new_figure


def lightness(color) -> float:
    return colorsys.rgb_to_hls(*to_rgba(color)[:3])[1]


def test_dark_colors_flip_the_extremes_and_keep_the_palette():
    assert lightness(dark_color("white")) < 0.2  # backgrounds and pale fills go dark
    assert lightness(dark_color("black")) > 0.85  # text and axes go light
    assert lightness(dark_color("#fde0dd")) < 0.3  # a pale red box: a dark red one
    for data_color in ("#1f77b4", "#d62728", "#2ca02c"):  # the data's colours stay
        assert dark_color(data_color) == to_rgba(data_color)
    assert dark_color((0, 0, 0, 0.5))[3] == 0.5  # alpha is kept


def test_recolor_for_dark_recolours_text_and_axes_but_not_data():
    fig = new_figure()
    ax = fig.add_subplot()
    (line,) = ax.plot([0, 1], [0, 1], color="#1f77b4")
    image = ax.imshow(np.eye(3), cmap="Reds")
    title = ax.set_title("a title")
    colors_before = image.to_rgba(np.eye(3)).copy()
    recolor_for_dark(fig)
    assert lightness(title.get_color()) > 0.85
    assert lightness(ax.spines["left"].get_edgecolor()) > 0.85
    assert to_rgba(line.get_color()) == to_rgba("#1f77b4")
    np.testing.assert_array_equal(image.to_rgba(np.eye(3)), colors_before)  # data colours
    assert fig.patch.get_alpha() == 0.0  # the page's background shows through


def test_rendering_a_figure_writes_a_light_and_a_dark_svg(tmp_path):
    assert render(["home_attention_weights", "--out-dir", str(tmp_path)]) == 0
    light = (tmp_path / "home_attention_weights.svg").read_text()
    dark = (tmp_path / "home_attention_weights.dark.svg").read_text()
    assert light != dark and "<svg" in dark


def test_pages_show_the_variant_of_their_colour_scheme():
    from booktools.plugin.figures import light_and_dark_figures
    from booktools.plugin.state import BuildState

    page = "Text ![A plot of x.](../figures/some_plot.svg) more."
    assert light_and_dark_figures(page, BuildState()) == (
        "Text ![A plot of x.](../figures/some_plot.svg#only-light)"
        "![A plot of x.](../figures/some_plot.dark.svg#only-dark) more."
    )


def test_frames_need_one_label_per_figure_and_a_start_among_them():
    from attention_book.figures import Frames

    figures = [new_figure(), new_figure()]
    assert Frames("width", ["a", "b"], figures, start=1).start == 1
    for labels, start in ((["a"], 0), (["a", "b"], 2)):
        try:
            Frames("width", labels, figures, start=start)
        except ValueError as error:
            assert "label" in str(error) or "start" in str(error)
        else:
            raise AssertionError(f"Frames accepted labels={labels}, start={start}")


def test_a_frames_figure_is_written_frame_by_frame(tmp_path):
    import json

    assert render(["nw_bandwidth_explorer", "--out-dir", str(tmp_path)]) == 0
    about = json.loads((tmp_path / "nw_bandwidth_explorer.frames.json").read_text())
    count = len(about["labels"])
    assert about["control"] == "kernel width" and count >= 5
    for number in range(count):
        assert (tmp_path / f"nw_bandwidth_explorer.frame-{number}.svg").exists()
        assert (tmp_path / f"nw_bandwidth_explorer.frame-{number}.dark.svg").exists()
    start = (tmp_path / f"nw_bandwidth_explorer.frame-{about['start']}.svg").read_text()
    assert (tmp_path / "nw_bandwidth_explorer.svg").read_text() == start  # notebooks, print


def test_a_frames_figure_becomes_a_slider_on_the_page():
    from booktools.plugin.figures import light_and_dark_figures
    from booktools.plugin.state import BuildState

    state = BuildState(frames={"walk": {"control": "step", "labels": ["a", "b"], "start": 1}})
    page = light_and_dark_figures("![A walk.](../figures/walk.svg)", state, "chapters/x/")
    assert 'data-base="../../figures/walk"' in page  # from the built page to the site's root
    assert 'src="../../figures/walk.frame-1.svg#only-light"' in page
    assert 'type="range" min="0" max="1" value="1"' in page and "<output>b</output>" in page
