"""Figures of the home page and the getting-started pages."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from attention_book.plotting import show_heatmaps

__all__ = ["FIGURES", "home_attention_weights"]


def home_attention_weights() -> Figure:
    """Softmax attention weights of eight queries over eight keys, sharper as the scale grows.

    The queries and keys are the same random unit vectors; the dot products are multiplied
    by a scale before the softmax. A small scale spreads the weight over every key; a large
    one puts almost all of it on the key most similar to the query.
    """
    generator = torch.Generator().manual_seed(0)
    keys = torch.nn.functional.normalize(torch.randn(8, 16, generator=generator), dim=-1)
    scales = (1.0, 4.0, 16.0)
    weights = torch.stack([torch.softmax(s * keys @ keys.T, dim=-1) for s in scales])
    # (1, num_scales, num_queries, num_keys)
    return show_heatmaps(
        weights[None],
        xlabel="Keys",
        ylabel="Queries",
        titles=[f"scale {s:g}" for s in scales],
    )


#: The figures of this module.
FIGURES = (home_attention_weights,)
