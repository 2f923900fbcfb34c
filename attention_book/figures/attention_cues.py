"""Figures of the chapter "Attention cues: queries, keys and values"."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from attention_book.plotting import new_figure, show_heatmaps

__all__ = [
    "FIGURES",
    "cues_heatmap_example",
    "cues_pooling_weights",
    "cues_qkv_diagram",
]

_KEY_COLOR = "#fde0c5"
_VALUE_COLOR = "#d4e6f9"
_QUERY_COLOR = "#f8c9c9"
_POOL_COLOR = "#e2f0d9"


def _box(ax, x: float, y: float, text: str, color: str, width: float = 1.5) -> None:
    """Draw a rounded box of the diagram centred at (x, y)."""
    height = 0.62
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.04,rounding_size=0.12",
            facecolor=color,
            edgecolor="#333333",
            linewidth=1.0,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9.5, color="#111111")


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], style: str = "-|>") -> None:
    """Draw an arrow of the diagram from `start` to `end`."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=11,
            color="#333333",
            linewidth=1.0,
            shrinkA=0,
            shrinkB=0,
        )
    )


def cues_qkv_diagram() -> Figure:
    """The query-key-value framework: a query scores every key; the scores weight the values.

    Each key is paired with a value (what the inputs offer). The query (what we look for) is
    compared with every key by a scoring function; the softmax of the scores gives the
    attention weights, and the output is the weighted sum of the values. The figure does not
    label either side as one of the two cues: in the chapter's reading both meet in the score,
    its query-dependent part the volitional cue, a part of the key alone the nonvolitional one.
    """
    fig = new_figure((7.6, 3.9))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 10.6)
    ax.set_ylim(0, 5.5)
    ax.axis("off")
    rows = (4.3, 3.1, 1.9)
    for y, i in zip(rows, ("1", "2", "m"), strict=True):
        _box(ax, 1.0, y, f"value $v_{i}$", _VALUE_COLOR, width=1.4)
        _box(ax, 2.9, y, f"key $k_{i}$", _KEY_COLOR, width=1.3)
        ax.plot([1.7, 2.25], [y, y], color="#999999", linewidth=1.0, linestyle=":")
        _box(ax, 5.4, y, rf"score $a(q, k_{i})$", _POOL_COLOR, width=1.8)
        # The key and the query meet at a junction and enter the scoring function together.
        ax.plot([3.55, 4.0], [y, y], color="#333333", linewidth=1.0)
        ax.plot([4.0], [y], "o", color="#333333", markersize=3.5)
        _arrow(ax, (4.0, y), (4.5, y))
    ax.text(1.95, 2.5, "⋮", ha="center", va="center", fontsize=14)
    ax.text(5.4, 2.5, "⋮", ha="center", va="center", fontsize=14)
    ax.text(
        1.95,
        1.15,
        "key-value pairs:\nwhat the inputs offer",
        ha="center",
        va="center",
        fontsize=8.5,
    )
    # The query enters at the bottom and reaches every scoring function.
    _box(ax, 5.4, 0.55, "query $q$:\nwhat we look for", _QUERY_COLOR, width=2.9)
    ax.plot([4.0, 4.0], [0.86, 4.3], color="#b03030", linewidth=1.2)
    for y in rows:
        ax.plot([4.0, 4.0], [y, y], "o", color="#b03030", markersize=3.5)
    _box(ax, 7.6, 3.1, "softmax\n" + r"$\alpha(q, k_i)$", _POOL_COLOR, width=1.4)
    for y in rows:
        _arrow(ax, (6.3, y), (6.9, 3.1 + (y - 3.1) * 0.25))
    _box(ax, 9.55, 3.1, "output\n" + r"$\sum_i \alpha(q, k_i)\, v_i$", "#eeeeee", width=1.8)
    _arrow(ax, (8.3, 3.1), (8.65, 3.1))
    # The values travel along the top to the weighted sum.
    ax.plot([1.0, 1.0], [4.61, 5.2], color="#2b6cb0", linewidth=1.2)
    ax.plot([1.0, 9.55], [5.2, 5.2], color="#2b6cb0", linewidth=1.2)
    _arrow(ax, (9.55, 5.2), (9.55, 3.41))
    ax.text(5.4, 5.27, "values", color="#2b6cb0", ha="center", va="bottom", fontsize=8.5)
    ax.text(7.6, 4.0, "attention\nweights", ha="center", va="center", fontsize=8.5)
    ax.text(
        9.55,
        1.9,
        "attention pooling:\na weighted average\nof the values",
        ha="center",
        va="center",
        fontsize=8.5,
    )
    return fig


def cues_pooling_weights() -> Figure:
    """Which weights each kind of pooling puts on eight values, for six different queries.

    A fully connected layer applies the same learned weights whatever the query (here random,
    as after some training). Average pooling gives every value 1/8. Max pooling picks the
    largest value: its choice depends on the values, never on a query. Attention pooling
    weights the values by how well their keys match the query, so each query (row) gets its
    own distribution.
    """
    generator = torch.Generator().manual_seed(0)
    num_queries, num_values = 6, 8
    values = torch.tensor([0.3, -1.2, 0.8, 2.1, -0.4, 0.9, 1.5, -0.7])
    fully_connected = torch.rand(num_values, generator=generator).expand(num_queries, num_values)
    average = torch.full((num_queries, num_values), 1 / num_values)
    maximum = torch.nn.functional.one_hot(values.argmax(), num_values).float()
    maximum = maximum.expand(num_queries, num_values)
    keys = torch.linspace(0, 1, num_values)
    queries = torch.linspace(0, 1, num_queries)
    attention = torch.softmax(-((queries[:, None] - keys) ** 2) / (2 * 0.1**2), dim=-1)
    weights = torch.stack([fully_connected, average, maximum, attention])[None]
    # (1, 4, num_queries, num_values)
    return show_heatmaps(
        weights,
        xlabel="Values",
        ylabel="Queries",
        titles=["fully connected", "average pooling", "max pooling", "attention pooling"],
        figsize=(2.2, 2.0),
        cmap="Blues",
    )


# --8<-- [start:cues_heatmap_example]
def cues_heatmap_example() -> Figure:
    """Two 10 x 10 weight matrices drawn with `show_heatmaps`.

    On the left, the identity: each query attends only to the key with its own index. On the
    right, weights that fall off with the distance between the query's and the key's index.
    """
    positions = torch.arange(10.0)
    identity = torch.eye(10)  # (num_queries, num_keys)
    distance = (positions[:, None] - positions[None, :]).abs()  # (num_queries, num_keys)
    nearby = torch.softmax(-distance, dim=-1)
    weights = torch.stack([identity, nearby])[None]  # (1, 2, num_queries, num_keys)
    return show_heatmaps(
        weights,
        xlabel="Keys",
        ylabel="Queries",
        titles=["identity", "softmax of -|i - j|"],
    )


# --8<-- [end:cues_heatmap_example]


#: The figures of this module, in the order of the chapter.
FIGURES = (cues_qkv_diagram, cues_pooling_weights, cues_heatmap_example)
