"""The Transformer of Vaswani et al. (2017): encoder and decoder built from attention.

The model is split over three modules, read in this order; each name is imported from the
module that defines it:

- `attention_book.transformer_sublayers`: `PositionWiseFFN` and `AddNorm`, the residual
  connection with layer normalization (post-norm as in the paper, or pre-norm with
  ``norm_first=True``, the name PyTorch uses);
- this module: `TransformerEncoderBlock` and `TransformerEncoder`;
- `attention_book.transformer_decoder`: `TransformerDecoderBlock`, `TransformerDecoder` and
  the key/value cache of step-by-step decoding (`DecoderState`).

With the same weights, each block computes exactly what ``torch.nn.TransformerEncoderLayer``
and ``torch.nn.TransformerDecoderLayer`` compute; the tests check it. An encoder and a decoder
make a translation model with `attention_book.seq2seq.EncoderDecoder`.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from attention_book.multihead import MultiHeadAttention
from attention_book.positional import PositionalEncoding
from attention_book.transformer_sublayers import AddNorm, PositionWiseFFN, token_embedding
from attention_book.validation import check_hidden_states, check_tokens

__all__ = ["TransformerEncoder", "TransformerEncoderBlock"]


# --8<-- [start:TransformerEncoderBlock]
class TransformerEncoderBlock(nn.Module):
    """One encoder block: multi-head self-attention, then a position-wise FFN.

    Each sublayer sits in an `AddNorm` (post-norm by default, pre-norm with
    ``norm_first=True``). With the same weights and ``use_bias=True`` it computes what
    ``nn.TransformerEncoderLayer(batch_first=True, norm_first=norm_first)`` computes.

    Args:
        num_hiddens: Model width, the size of every position's vector.
        ffn_num_hiddens: Hidden width of the FFN.
        num_heads: Number of attention heads.
        dropout: Dropout on attention weights, inside the FFN and on each sublayer's output.
        use_bias: Whether the attention projections have biases.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.
        activation: FFN activation, ``"relu"`` or ``"gelu"``.

    Shapes:
        - X: ``(batch, num_steps, num_hiddens)``
        - valid_lens: ``(batch,)`` or ``(batch, num_steps)``
        - returns: ``(batch, num_steps, num_hiddens)``
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
        *,
        norm_first: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.num_hiddens = num_hiddens
        self.self_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first=norm_first)
        self.ffn = PositionWiseFFN(
            num_hiddens, ffn_num_hiddens, num_hiddens, activation=activation, dropout=dropout
        )
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first=norm_first)

    # --8<-- [end:TransformerEncoderBlock]

    # --8<-- [start:TransformerEncoderBlock-forward]
    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        """Run the block: self-attention, then the FFN, each inside its `AddNorm`.

        Args:
            X: Input vectors, one per position.
            valid_lens: Optional number of real (non-padding) positions per sequence; keys past
                it get zero attention weight.

        Returns:
            Output vectors, one per position.

        Raises:
            ValueError: If ``X`` does not have shape (batch, num_steps, num_hiddens).
        """
        check_hidden_states("X", X, self.num_hiddens)  # X: (batch, num_steps, num_hiddens)
        H = self.addnorm1.sublayer_input(X)  # X in post-norm, LayerNorm(X) in pre-norm
        X = self.addnorm1(X, self.self_attention(H, H, H, valid_lens))  # every position
        H = self.addnorm2.sublayer_input(X)
        return self.addnorm2(X, self.ffn(H))  # (batch, num_steps, num_hiddens)

    # --8<-- [end:TransformerEncoderBlock-forward]


class TransformerEncoder(nn.Module):
    """The Transformer encoder: embedding, positional encoding and a stack of blocks.

    Token embeddings (`token_embedding`) are multiplied by ``sqrt(num_hiddens)`` before the
    sinusoidal positional encoding is added, so that both have a similar scale. In pre-norm a
    final LayerNorm follows the last block (each pre-norm block leaves its output
    unnormalized).

    After each call, ``attention_weights[i]`` holds block ``i``'s self-attention weights.

    Args:
        vocab_size: Number of tokens in the source vocabulary.
        num_hiddens: Model width.
        ffn_num_hiddens: Hidden width of each FFN.
        num_heads: Number of attention heads.
        num_blks: Number of encoder blocks.
        dropout: Dropout rate used throughout.
        use_bias: Whether the attention projections have biases.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.
        activation: FFN activation, ``"relu"`` or ``"gelu"``.
        max_len: Longest sequence the positional encoding covers.

    Shapes:
        - X: ``(batch, num_steps)`` token indices
        - valid_lens: ``(batch,)`` or ``(batch, num_steps)``
        - returns: ``(batch, num_steps, num_hiddens)``
        - attention_weights[i]: ``(batch, num_heads, num_steps, num_steps)``
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        use_bias: bool = False,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        max_len: int = 1000,
    ) -> None:
        super().__init__()
        self.num_hiddens = num_hiddens
        self.embedding = token_embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.blks = nn.ModuleList(
            TransformerEncoderBlock(
                num_hiddens,
                ffn_num_hiddens,
                num_heads,
                dropout,
                use_bias,
                norm_first=norm_first,
                activation=activation,
            )
            for _ in range(num_blks)
        )
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else nn.Identity()
        self.attention_weights: list[Tensor | None] = [None] * num_blks

    # --8<-- [start:TransformerEncoder-forward]
    def forward(self, X: Tensor, valid_lens: Tensor | None = None) -> Tensor:
        """Encode a batch of token sequences.

        Args:
            X: Source token indices.
            valid_lens: Optional number of real (non-padding) tokens per sequence.

        Returns:
            One vector per source position.

        Raises:
            ValueError: If ``X`` is not a 2-D integer tensor.
        """
        check_tokens("X", X)  # X: (batch, num_steps) token indices
        X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))  # scaled + p_t
        for i, blk in enumerate(self.blks):
            X = blk(X, valid_lens)  # (batch, num_steps, num_hiddens)
            self.attention_weights[i] = blk.self_attention.attention_weights
        return self.final_norm(X)  # LayerNorm in pre-norm, identity in post-norm

    # --8<-- [end:TransformerEncoder-forward]
