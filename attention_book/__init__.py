"""The Attention Book's package: every component the book teaches, one module per concept.

The modules follow the book: `masking` (the only mask code) and `attention` (scoring
functions), `nadaraya_watson` (attention pooling), `seq2seq` and `decoding` (Bahdanau
attention, greedy and beam search), `multihead`, `positional`, `transformer`, `vit`, `flash`
(FlashAttention), and `gpt`, `rotary` and `linear_attention` (the optimizations chapter).
`validation` holds the input checks they share. `data`, `training` and
`experiments` hold the offline datasets, the training loop, the metrics and the book's cached
experiments; `plotting` and `figures` draw what the site shows. The most used names are
re-exported here, so ``from attention_book import MultiHeadAttention`` works; everything else is
imported from its module.

Importing the package loads PyTorch and nothing heavier: Triton is imported only when a Triton
kernel runs, and matplotlib only when a plotting helper (`plot_lines`, `show_heatmaps`) is first
used.
"""

import importlib

from attention_book.attention import AdditiveAttention, DotProductAttention
from attention_book.decoding import beam_search, greedy_decode
from attention_book.flash import flash_attention, naive_attention
from attention_book.gpt import GPT
from attention_book.linear_attention import linear_attention
from attention_book.masking import (
    causal_mask,
    masked_softmax,
    sliding_window_mask,
    valid_lens_to_mask,
)
from attention_book.multihead import (
    GroupedQueryAttention,
    MultiHeadAttention,
    merge_heads,
    split_heads,
)
from attention_book.nadaraya_watson import NWKernelRegression, attention_pooling, average_pooling
from attention_book.positional import LearnedPositionalEmbedding, PositionalEncoding
from attention_book.rotary import apply_rotary
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from attention_book.transformer import TransformerEncoder, TransformerEncoderBlock
from attention_book.transformer_decoder import TransformerDecoder, TransformerDecoderBlock
from attention_book.transformer_sublayers import AddNorm, PositionWiseFFN
from attention_book.vit import PatchEmbedding, ViT, ViTBlock, ViTMLP

__version__ = "0.1.0"

# Re-exported names whose module imports matplotlib: loaded on first use (PEP 562).
_LAZY = {"plot_lines": "attention_book.plotting", "show_heatmaps": "attention_book.plotting"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "GPT",
    "AddNorm",
    "AdditiveAttention",
    "DotProductAttention",
    "EncoderDecoder",
    "GroupedQueryAttention",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "NWKernelRegression",
    "PatchEmbedding",
    "PositionWiseFFN",
    "PositionalEncoding",
    "Seq2SeqAttentionDecoder",
    "Seq2SeqDecoder",
    "Seq2SeqEncoder",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerEncoderBlock",
    "ViT",
    "ViTBlock",
    "ViTMLP",
    "__version__",
    "apply_rotary",
    "attention_pooling",
    "average_pooling",
    "beam_search",
    "causal_mask",
    "flash_attention",
    "greedy_decode",
    "linear_attention",
    "masked_softmax",
    "merge_heads",
    "naive_attention",
    "plot_lines",
    "show_heatmaps",
    "sliding_window_mask",
    "split_heads",
    "valid_lens_to_mask",
]
