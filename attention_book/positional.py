"""Positional information for attention, which by itself ignores token order.

Two ways to add position to token representations before attention:

- :class:`PositionalEncoding`: the fixed sinusoids of Vaswani et al. (2017);
- :class:`LearnedPositionalEmbedding`: one learned vector per position, as in BERT and ViT.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["LearnedPositionalEmbedding", "PositionalEncoding", "sinusoidal_table"]


def _check_positions(module: nn.Module, X: Tensor, offset: int) -> None:
    """Raise ``ValueError`` unless ``X`` fits the module's width and ``max_len``."""
    num_hiddens, max_len = module.num_hiddens, module.max_len
    if X.dim() != 3 or X.shape[-1] != num_hiddens:
        raise ValueError(
            f"X must have shape (batch, num_steps, num_hiddens={num_hiddens}), got {tuple(X.shape)}"
        )
    if offset < 0 or offset + X.shape[1] > max_len:
        raise ValueError(
            f"positions {offset}..{offset + X.shape[1] - 1} (offset={offset}, num_steps="
            f"{X.shape[1]} from X of shape {tuple(X.shape)}) exceed max_len={max_len}; "
            "build the module with a larger max_len"
        )


# --8<-- [start:sinusoidal_table]
def sinusoidal_table(max_len: int, num_hiddens: int, dtype: torch.dtype | None = None) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017).

    For position ``pos`` and ``i = 0, 1, ...``:

    - column ``2i`` holds ``sin(pos / 10000^(2i / num_hiddens))``,
    - column ``2i + 1`` holds ``cos(pos / 10000^(2i / num_hiddens))``.

    Each sine/cosine pair turns at its own frequency, from one radian per position (``i = 0``)
    down to about ``1 / 10000``. If ``num_hiddens`` is odd, the last column is a sine without
    its cosine partner (the formula above, cut at ``num_hiddens`` columns). The table is
    computed in float64 and then cast, so even late positions are accurate.

    Args:
        max_len: Number of positions (rows).
        num_hiddens: Number of features (columns).
        dtype: dtype of the result (default: PyTorch's default dtype).

    Returns:
        The table.

    Shapes:
        - returns: ``(max_len, num_hiddens)``
    """
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, num_hiddens, 2, dtype=torch.float64)  # (ceil(num_hiddens / 2),)
    angles = positions / torch.pow(10000.0, two_i / num_hiddens)  # (max_len, ceil(d / 2))
    table = torch.zeros(max_len, num_hiddens, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return table.to(dtype or torch.get_default_dtype())


# --8<-- [end:sinusoidal_table]


# --8<-- [start:PositionalEncoding]
class PositionalEncoding(nn.Module):
    """Add fixed sinusoidal position encodings, then apply dropout.

    The table ``P`` comes from :func:`sinusoidal_table`. It is a non-persistent buffer: it
    moves with the module (``.to(device)``) but is not saved in ``state_dict``, since it is a
    function of ``max_len`` and ``num_hiddens``. Odd ``num_hiddens`` is allowed; the last
    feature is then a sine without a cosine partner.

    Args:
        num_hiddens: Size of each token representation.
        dropout: Dropout probability applied after adding the encodings.
        max_len: Longest sequence the module can encode.

    Shapes:
        - X: ``(batch, num_steps, num_hiddens)``, ``offset + num_steps <= max_len``
        - P: ``(1, max_len, num_hiddens)``
        - output: ``(batch, num_steps, num_hiddens)``
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000):
        super().__init__()
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.dropout = nn.Dropout(dropout)
        table = sinusoidal_table(max_len, num_hiddens)
        self.register_buffer("P", table.unsqueeze(0), persistent=False)  # (1, max_len, d)

    def forward(self, X: Tensor, offset: int = 0) -> Tensor:
        """Add the encodings of positions ``offset, offset + 1, ...`` to ``X``.

        Args:
            X: Token representations.
            offset: Position of the first token (use it when decoding one step at a time).

        Returns:
            ``dropout(X + P[:, offset : offset + num_steps])``.

        Raises:
            ValueError: If ``X`` is not ``(batch, num_steps, num_hiddens)`` or the positions
                go past ``max_len``.
        """
        _check_positions(self, X, offset)
        P = self.P[:, offset : offset + X.shape[1]].to(X.dtype)  # (1, num_steps, num_hiddens)
        return self.dropout(X + P)


# --8<-- [end:PositionalEncoding]


# --8<-- [start:LearnedPositionalEmbedding]
class LearnedPositionalEmbedding(nn.Module):
    """Add a learned vector per position, then apply dropout (as in BERT and ViT).

    The table ``P`` is a parameter initialised from a normal distribution with standard
    deviation ``init_std`` (0.02, as in BERT and common ViT code), so positions start nearly
    indistinguishable and the model learns what distinguishes them.

    Args:
        num_hiddens: Size of each token representation.
        dropout: Dropout probability applied after adding the embeddings.
        max_len: Number of positions the table holds.
        init_std: Standard deviation of the initial values.

    Shapes:
        - X: ``(batch, num_steps, num_hiddens)``, ``offset + num_steps <= max_len``
        - P: ``(1, max_len, num_hiddens)``
        - output: ``(batch, num_steps, num_hiddens)``
    """

    def __init__(
        self,
        num_hiddens: int,
        dropout: float = 0.0,
        max_len: int = 1000,
        *,
        init_std: float = 0.02,
    ):
        super().__init__()
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.dropout = nn.Dropout(dropout)
        self.P = nn.Parameter(torch.randn(1, max_len, num_hiddens) * init_std)

    def forward(self, X: Tensor, offset: int = 0) -> Tensor:
        """Add the embeddings of positions ``offset, offset + 1, ...`` to ``X``.

        Args:
            X: Token representations.
            offset: Position of the first token.

        Returns:
            ``dropout(X + P[:, offset : offset + num_steps])``.

        Raises:
            ValueError: If ``X`` is not ``(batch, num_steps, num_hiddens)`` or the positions
                go past ``max_len``.
        """
        _check_positions(self, X, offset)
        return self.dropout(X + self.P[:, offset : offset + X.shape[1]])


# --8<-- [end:LearnedPositionalEmbedding]
