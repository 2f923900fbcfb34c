"""Figures of the deep dive "Where the trained model looks": attention, head by head.

Every attention weight of the Transformer that `attention_book.experiments.transformer` trains,
on one test sentence (the one the Bahdanau chapter's alignment figure shows): the encoder's
self-attention, the decoder's masked self-attention and the encoder-decoder attention, block by
block and head by head, and the last block's cross-attention beside Bahdanau's alignment.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attention_book.data.text import tokenize
from attention_book.experiments.bahdanau import bahdanau_trained_models, bahdanau_translate
from attention_book.experiments.transformer import transformer_trained_model
from attention_book.figures import Frames
from attention_book.plotting import BOOK_STYLE, show_heatmaps

__all__ = [
    "FIGURES",
    "transformer_alignment_comparison",
    "transformer_attention_explorer",
    "transformer_cross_attention",
    "transformer_decoder_self_attention",
    "transformer_encoder_attention",
]


def _example_index(pairs) -> int:
    """The Bahdanau chapter's rule: the longest source of at most 22 tokens with a date, time."""
    lengths = [len(tokenize(source)) for source, _ in pairs]
    candidates = [
        (n, -i) for i, ((s, _), n) in enumerate(zip(pairs, lengths, strict=True))
        if n <= 22 and " at " in s and ", 20" in s
    ]  # fmt: skip
    return -max(candidates)[1]


@torch.no_grad()
def _attention_maps() -> dict:
    """Every attention weight of the trained Transformer on the example test sentence.

    The model translates greedily, then reads its own translation with teacher forcing (which
    reproduces the greedy run), so every target position comes out at once.
    """
    model, data = transformer_trained_model()
    source = data.test_pairs[_example_index(data.test_pairs)][0]
    (translation,) = bahdanau_translate(model, data, [source])
    src, src_valid_len = data.encode_sources([source])
    inputs = torch.tensor([[data.tgt_vocab.bos, *translation.tokens]])
    model(src[:, : int(src_valid_len)], inputs, src_valid_len)
    words = data.tgt_vocab.to_tokens(translation.tokens)
    weights = {
        "encoder": model.encoder.attention_weights,
        "decoder_self": model.decoder.self_attention_weights,
        "cross": model.decoder.cross_attention_weights,
    }
    maps = {name: torch.stack(w)[:, 0] for name, w in weights.items()}  # (blks, heads, n_q, n_k)
    tokens = {"source": [*tokenize(source), "<eos>"], "inputs": ["<bos>", *words]}
    return maps | tokens | {"outputs": [*words, "<eos>"], "sentence": source}


def _layer_head_grid(weights, xlabels, ylabels, xlabel, ylabel) -> Figure:
    num_blks, num_heads = weights.shape[:2]
    size = 0.115 * max(len(xlabels), len(ylabels)) + 0.6
    titles = [f"head {h + 1}" for h in range(num_heads)]
    labels = {"xticklabels": xlabels, "yticklabels": ylabels}
    fig = show_heatmaps(weights, xlabel, ylabel, titles, figsize=(size, size), **labels)
    for index, ax in enumerate(fig.axes[: num_blks * num_heads]):
        ax.tick_params(labelsize=5.5)
        if index % num_heads == 0:
            ax.set_ylabel(f"block {index // num_heads + 1}: {ylabel}", fontsize=8)
    return fig


def transformer_encoder_attention() -> Figure:
    """Encoder self-attention of the trained Transformer, every block and head."""
    maps = _attention_maps()
    return _layer_head_grid(maps["encoder"], maps["source"], maps["source"], "keys", "queries")


def transformer_decoder_self_attention() -> Figure:
    """Masked decoder self-attention of the trained Transformer, every block and head."""
    maps = _attention_maps()
    return _layer_head_grid(maps["decoder_self"], maps["inputs"], maps["inputs"], "keys", "queries")


def transformer_cross_attention() -> Figure:
    """Encoder-decoder attention of the trained Transformer, every block and head."""
    maps = _attention_maps()
    return _layer_head_grid(maps["cross"], maps["source"], maps["outputs"], "source", "generated")


def transformer_attention_explorer() -> Frames:
    """One heatmap per attention, block and head of the trained Transformer (a picker)."""
    maps = _attention_maps()
    kinds = (
        ("encoder self-attention", "encoder", maps["source"], maps["source"], "keys", "queries"),
        ("masked decoder self-attention", "decoder_self", maps["inputs"], maps["inputs"],
         "keys", "queries"),
        ("encoder-decoder attention", "cross", maps["source"], maps["outputs"], "source",
         "generated"),
    )  # fmt: skip
    size = 0.16 * max(len(maps["source"]), len(maps["outputs"])) + 1.6
    labels, figures = [], []
    for title, key, xlabels, ylabels, xlabel, ylabel in kinds:
        num_blks, num_heads = maps[key].shape[:2]
        for block in range(num_blks):
            for head in range(num_heads):
                label = f"{title}, block {block + 1}, head {head + 1}"
                with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
                    fig = Figure(figsize=(size + 0.8, size))
                    ax = fig.add_subplot()
                    ax.imshow(maps[key][block, head].float().numpy(), cmap="Reds", vmin=0, vmax=1)
                    ax.set_xticks(range(len(xlabels)), xlabels, rotation=90, fontsize=7)
                    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=7)
                    ax.set(title=label, xlabel=xlabel, ylabel=ylabel)
                    ax.title.set_fontsize(9)
                    fig.tight_layout()
                labels.append(label)
                figures.append(fig)
    return Frames("attention, block and head", labels, figures, start=len(figures) - 1)


def transformer_alignment_comparison() -> Figure:
    """Bahdanau's alignment beside the Transformer's last-block cross-attention (head mean)."""
    maps = _attention_maps()
    _, attention, data = bahdanau_trained_models()
    (translation,) = bahdanau_translate(attention, data, [maps["sentence"]])
    source = maps["source"]
    panels = [
        ("GRU + Bahdanau attention", translation.attention_weights[:, : len(source)],
         data.tgt_vocab.to_tokens(translation.tokens)),
        ("Transformer, last block, mean of the heads", maps["cross"][-1].mean(dim=0),
         maps["outputs"]),
    ]  # fmt: skip
    height = 0.2 * max(len(rows) for _, _, rows in panels) + 1.4
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        fig = Figure(figsize=(2 * (0.2 * len(source) + 1.2), height))
        axes = fig.subplots(1, 2)
        for ax, (title, weights, rows) in zip(axes, panels, strict=True):
            ax.imshow(weights.float().numpy(), cmap="Reds", vmin=0, vmax=1)
            ax.set_xticks(range(len(source)), source, rotation=90, fontsize=7)
            ax.set_yticks(range(len(rows)), rows, fontsize=7)
            ax.set(title=title, xlabel="source (English)")
        axes[0].set_ylabel("generated (French)")
        fig.tight_layout()
    return fig


FIGURES = (
    transformer_encoder_attention,
    transformer_decoder_self_attention,
    transformer_cross_attention,
    transformer_attention_explorer,
    transformer_alignment_comparison,
)
