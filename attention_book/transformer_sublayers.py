"""What the Transformer's encoder and decoder share besides attention.

Every block of the Transformer of Vaswani et al. (2017) runs one or two attention sublayers
and one position-wise feed-forward network, and wraps each sublayer in a residual connection
with layer normalization. `PositionWiseFFN` is the feed-forward network; `AddNorm` is the
wrapper, in either order in use:

- **post-norm** (the paper): ``X = LayerNorm(X + Dropout(Sublayer(X)))``;
- **pre-norm** (most models since GPT-2): ``X = X + Dropout(Sublayer(LayerNorm(X)))``, with one
  more LayerNorm after the last block.

`token_embedding` is the embedding table both stacks start with. The encoder
(`attention_book.transformer`) and the decoder (`attention_book.transformer_decoder`) are built
from these.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["AddNorm", "PositionWiseFFN", "token_embedding"]

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _check_activation(activation: str) -> None:
    """Raise ``ValueError`` unless ``activation`` names one of `_ACTIVATIONS`."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")


def _check_same_shape(X: Tensor, Y: Tensor) -> None:
    """Raise ``ValueError`` unless the residual stream ``X`` and the sublayer's ``Y`` match."""
    if X.shape != Y.shape:
        raise ValueError(
            f"X and Y must have the same shape, got X {tuple(X.shape)} and Y {tuple(Y.shape)}"
        )


# --8<-- [start:token_embedding]
def token_embedding(vocab_size: int, num_hiddens: int) -> nn.Embedding:
    """An embedding table whose rows, once multiplied by ``sqrt(num_hiddens)``, have unit scale.

    Both stacks multiply their embeddings by ``sqrt(num_hiddens)`` (Vaswani et al., 2017,
    section 3.4) before adding the sinusoidal encoding, whose entries lie in [-1, 1]. The
    weights start from a normal distribution of standard deviation ``num_hiddens ** -0.5``,
    as in the authors' tensor2tensor code, so each scaled coordinate starts with variance 1.
    With PyTorch's default (standard deviation 1) the scaled embeddings would start
    ``sqrt(num_hiddens)`` times larger and drown the positions.

    Args:
        vocab_size: Number of tokens.
        num_hiddens: Size of each embedding.

    Returns:
        The embedding layer.
    """
    embedding = nn.Embedding(vocab_size, num_hiddens)
    nn.init.normal_(embedding.weight, std=num_hiddens**-0.5)
    return embedding


# --8<-- [end:token_embedding]


# --8<-- [start:PositionWiseFFN]
class PositionWiseFFN(nn.Module):
    """The feed-forward sublayer: the same two-layer MLP applied at every position.

    ``FFN(x) = W_2 activation(W_1 x + b_1) + b_2``. Because it acts on the last axis only, every
    position is transformed independently, with shared weights: equal inputs give equal rows.

    Args:
        ffn_num_input: Size of each input vector (the model width, ``num_hiddens``).
        ffn_num_hiddens: Width of the hidden layer (``4 * num_hiddens`` in the paper).
        ffn_num_outputs: Size of each output vector.
        activation: ``"relu"`` (the paper) or ``"gelu"`` (BERT, GPT, ViT).
        dropout: Dropout after the activation (PyTorch's layers put it there too).

    Shapes:
        - X: ``(..., ffn_num_input)``, usually ``(batch, num_steps, ffn_num_input)``
        - returns: ``(..., ffn_num_outputs)``
    """

    def __init__(
        self,
        ffn_num_input: int,
        ffn_num_hiddens: int,
        ffn_num_outputs: int,
        *,
        activation: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_activation(activation)  # "relu" or "gelu"
        self.dense1 = nn.Linear(ffn_num_input, ffn_num_hiddens)  # W_1, b_1
        self.activation = _ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)  # W_2, b_2

    def forward(self, X: Tensor) -> Tensor:
        """Transform every position independently.

        Args:
            X: Input vectors, one per position.

        Returns:
            The transformed vectors.
        """
        return self.dense2(self.dropout(self.activation(self.dense1(X))))  # (..., outputs)


# --8<-- [end:PositionWiseFFN]


# --8<-- [start:AddNorm]
class AddNorm(nn.Module):
    """A residual connection and a layer normalization around one sublayer.

    Called as ``add_norm(X, Y)`` with ``Y = Sublayer(...)`` it returns
    ``LayerNorm(X + Dropout(Y))``, the post-norm order of the paper.

    With ``norm_first=True`` the LayerNorm moves to the sublayer's input instead: the block asks
    ``add_norm.sublayer_input(X)`` for ``LayerNorm(X)``, runs the sublayer on it, and
    ``add_norm(X, Y)`` returns ``X + Dropout(Y)``. A block can thus be written once for both
    orders::

        H = add_norm.sublayer_input(X)     # X (post-norm) or LayerNorm(X) (pre-norm)
        X = add_norm(X, sublayer(H))

    Args:
        norm_shape: Shape normalized by the LayerNorm, usually ``num_hiddens``.
        dropout: Dropout applied to the sublayer's output before the residual sum.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.
        bias: Whether the LayerNorm has a learnable bias.

    Shapes:
        - X, Y: ``(batch, num_steps, num_hiddens)``
        - returns: ``(batch, num_steps, num_hiddens)``
    """

    def __init__(
        self,
        norm_shape: int | tuple[int, ...],
        dropout: float,
        *,
        norm_first: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape, bias=bias)

    def sublayer_input(self, X: Tensor) -> Tensor:
        """Return what the sublayer should read: ``LayerNorm(X)`` in pre-norm, else ``X``.

        Args:
            X: The residual stream entering the sublayer.

        Returns:
            The sublayer's input.
        """
        return self.ln(X) if self.norm_first else X

    def forward(self, X: Tensor, Y: Tensor) -> Tensor:
        """Add the sublayer's output ``Y`` to the residual stream ``X``.

        Args:
            X: The residual stream entering the sublayer.
            Y: The sublayer's output.

        Returns:
            ``X + Dropout(Y)`` in pre-norm, ``LayerNorm(X + Dropout(Y))`` in post-norm.

        Raises:
            ValueError: If ``X`` and ``Y`` have different shapes.
        """
        _check_same_shape(X, Y)  # both (batch, num_steps, num_hiddens)
        if self.norm_first:
            return X + self.dropout(Y)  # pre-norm: the stream is not normalized
        return self.ln(X + self.dropout(Y))  # post-norm: normalize the sum


# --8<-- [end:AddNorm]
