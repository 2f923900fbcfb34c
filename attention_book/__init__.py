"""The Attention Book's package: every component the book teaches, one module per concept.

The modules follow the book: `masking` and `attention` (scoring functions), `nadaraya_watson`
(attention pooling), `seq2seq` (Bahdanau attention), `multihead`, `positional`, `transformer`,
`vit` and `flash` (FlashAttention). `data` and `training` hold the offline datasets, the training
loop and the metrics; `plotting` and `figures` draw what the site shows. The most used names are
re-exported here, so ``from attention_book import MultiHeadAttention`` works; everything else is
imported from its module. Triton is optional: `flash` imports it only when its kernel runs.
"""

from attention_book.attention import AdditiveAttention, DotProductAttention
from attention_book.flash import flash_attention, naive_attention
from attention_book.masking import causal_mask, masked_softmax, valid_lens_to_mask
from attention_book.multihead import MultiHeadAttention, merge_heads, split_heads
from attention_book.nadaraya_watson import NWKernelRegression, attention_pooling, average_pooling
from attention_book.plotting import plot_lines, show_heatmaps
from attention_book.positional import LearnedPositionalEmbedding, PositionalEncoding
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
    beam_search,
    greedy_decode,
)
from attention_book.transformer import (
    AddNorm,
    PositionWiseFFN,
    TransformerDecoder,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
)
from attention_book.vit import PatchEmbedding, ViT, ViTBlock, ViTMLP

__version__ = "0.1.0"

__all__ = [
    "AddNorm",
    "AdditiveAttention",
    "DotProductAttention",
    "EncoderDecoder",
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
    "attention_pooling",
    "average_pooling",
    "beam_search",
    "causal_mask",
    "flash_attention",
    "greedy_decode",
    "masked_softmax",
    "merge_heads",
    "naive_attention",
    "plot_lines",
    "show_heatmaps",
    "split_heads",
    "valid_lens_to_mask",
]
