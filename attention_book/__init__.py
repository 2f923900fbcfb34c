"""The Attention Book's package: every component the book teaches, one module per concept.

Its modules, in the order of the book (the API reference documents them in this order, and any
module not listed here after them):

- the scoring functions: `masking` (masks and the masked softmax: the only mask code) and
  `attention` (additive and scaled dot-product attention);
- attention pooling: `nadaraya_watson`;
- Bahdanau attention: `seq2seq` (the encoder-decoder and its attention decoder), `losses` (a
  translator's losses) and `decoding` (greedy decoding and beam search);
- `multihead` (multi-head and grouped-query attention) and `positional` (positional encodings);
  `playground` (a tiny GPT that learns to reverse or sort digits, the twin of the page's
  JavaScript trainer);
- the Transformer: `transformer` (the encoder), `transformer_sublayers` (what the encoder and
  the decoder share) and `transformer_decoder`;
- the Vision Transformer: `vit`, `windows` (Swin's windows) and `resnet` (its convolutional
  baseline);
- the optimizations chapter: `gpt`, `kv_cache`, `rotary`, `alibi` and `linear_attention`;
- attention beyond one device: `distributed`, `ring_attention`, `paged_cache` and `batching`;
- what the modules share: `validation` (the input checks), `store` (the result store) and
  `timing` (threads and timers);
- FlashAttention: `flash` (a subpackage: the tiled reference, the Triton kernels and their
  launchers) and `memory` (the tensor memory a function allocates, counted exactly);
- `data` (the offline datasets), `training` (the training loop, metrics and schedules) and
  `experiments` (the book's trainings and measurements, stored once);
- `plotting` and `figures`, which draw what the site shows.

The most used names are re-exported here, so ``from attention_book import MultiHeadAttention``
works; everything else is imported from its module.

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
