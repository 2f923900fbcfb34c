import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

from attention_book.plotting import new_figure, plot_lines, show_heatmaps


def test_show_heatmaps_draws_one_axis_per_matrix_and_a_colorbar():
    fig = show_heatmaps(torch.rand(2, 3, 4, 5), "Keys", "Queries", titles=["a", "b", "c"])
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2 * 3 + 1
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (4, 5)


def test_show_heatmaps_accepts_a_single_matrix_and_keeps_values():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = show_heatmaps(weights, "Keys", "Queries")
    drawn = torch.as_tensor(fig.axes[0].images[0].get_array().data)
    assert torch.allclose(drawn, weights)


def test_show_heatmaps_labels_ticks():
    fig = show_heatmaps(torch.eye(2), "k", "q", xticklabels=["a", "b"], yticklabels=["c", "d"])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b"]


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4), (1, 1, 1, 2, 2)])
def test_show_heatmaps_rejects_wrong_dims(shape):
    with pytest.raises(ValueError, match=r"matrices must have shape .*got shape"):
        show_heatmaps(torch.rand(shape), "k", "q")


def test_show_heatmaps_rejects_wrong_number_of_titles():
    with pytest.raises(ValueError, match="titles must have 2 entries"):
        show_heatmaps(torch.rand(1, 2, 3, 3), "k", "q", titles=["only one"])


def test_plot_lines_draws_each_curve():
    fig = plot_lines([1, 2, 3], [[1, 4, 9], [1, 2, 3]], labels=["sq", "id"], yscale="log")
    (ax,) = fig.axes
    assert [line.get_ydata().tolist() for line in ax.lines] == [[1, 4, 9], [1, 2, 3]]
    assert ax.get_yscale() == "log"


def test_plot_lines_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match=r"ys\[1\] must have the shape of x"):
        plot_lines([1, 2, 3], [[1, 2, 3], [1, 2]])
    with pytest.raises(ValueError, match="labels must have one entry per curve"):
        plot_lines([1, 2], [[1, 2]], labels=["a", "b"])


def test_figures_stay_out_of_pyplot_state():
    import matplotlib.pyplot as plt

    before = len(plt.get_fignums())
    new_figure()
    show_heatmaps(torch.eye(2), "k", "q")
    plot_lines([0, 1], [[0, 1]])
    assert len(plt.get_fignums()) == before
    assert matplotlib.get_backend()
