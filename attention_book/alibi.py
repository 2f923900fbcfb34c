"""ALiBi (Press et al., 2022): attention with linear biases instead of position embeddings.

ALiBi adds no position vector to the tokens and rotates nothing. It adds a bias to each causal
attention score that falls linearly with the distance between the query and the key:
``score(i, j) + m_h * (j - i)`` for key ``j <= i``, with one fixed slope ``m_h`` per head. The
slopes are not learned. For ``h`` heads, ``h`` a power of two, they are the geometric sequence
that starts at ``2^(-8/h)`` and has that same ratio: for 8 heads ``1/2, 1/4, ..., 1/256``.
Each head thus prefers recent keys, some heads sharply and others barely, and the bias is
defined for any distance, including distances longer than any seen in training.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention_book.masking import causal_mask

__all__ = ["alibi_bias", "alibi_slopes"]


# --8<-- [start:alibi_slopes]
def alibi_slopes(num_heads: int) -> Tensor:
    """The slope of each head: ``2^(-8/h), 2^(-16/h), ..., 2^(-8)`` for ``h`` heads.

    Press et al. (2022, section 3) define the slopes for a number of heads that is a power of
    two; other counts are refused.

    Args:
        num_heads: Number of heads ``h``, a power of two.

    Returns:
        The slopes, float64, largest first.

    Shapes:
        - returns: ``(num_heads,)``

    Raises:
        ValueError: If ``num_heads`` is not a positive power of two.
    """
    if not isinstance(num_heads, int) or num_heads < 1 or num_heads & (num_heads - 1):
        raise ValueError(f"num_heads must be a positive power of two, got {num_heads!r}")
    exponents = torch.arange(1, num_heads + 1, dtype=torch.float64)  # 1, 2, ..., h
    return 2.0 ** (-8.0 * exponents / num_heads)  # (num_heads,)


# --8<-- [end:alibi_slopes]


# --8<-- [start:alibi_bias]
def alibi_bias(
    num_queries: int,
    num_keys: int,
    num_heads: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The causal ALiBi bias of every head: ``-m_h * (i - j)`` for ``j <= i``, ``-inf`` above.

    The queries are the last ``num_queries`` positions of the keys (bottom-right alignment,
    as in decoding with a cache): query ``q`` sits at position ``i = num_keys - num_queries
    + q``. Added to the scaled scores, the ``-inf`` entries are the causal mask.

    Args:
        num_queries: Number of queries (the last positions); 0 gives an empty bias.
        num_keys: Number of keys, at least ``num_queries``.
        num_heads: Number of heads, a power of two (see `alibi_slopes`).
        device: Device of the result.
        dtype: Floating-point dtype of the result.

    Returns:
        The bias, to add to the scores before the softmax.

    Shapes:
        - returns: ``(num_heads, num_queries, num_keys)``

    Raises:
        ValueError: If ``num_queries`` is negative, ``num_keys`` below ``num_queries``,
            ``num_heads`` not a power of two, or ``dtype`` not a floating-point dtype.
    """
    if num_queries < 0 or num_keys < num_queries:
        raise ValueError(
            f"need 0 <= num_queries <= num_keys (the queries are the last keys), got "
            f"num_queries={num_queries} and num_keys={num_keys}"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    slopes = alibi_slopes(num_heads).to(device)  # (num_heads,)
    query_positions = torch.arange(num_keys - num_queries, num_keys, device=device)
    key_positions = torch.arange(num_keys, device=device)
    offset = key_positions[None, :] - query_positions[:, None]  # (num_queries, num_keys): j - i
    bias = slopes[:, None, None] * offset  # (num_heads, num_queries, num_keys): -m_h (i - j)
    visible = causal_mask(num_queries, num_keys, device, alignment="bottom-right")
    return bias.masked_fill(~visible, float("-inf")).to(dtype)


# --8<-- [end:alibi_bias]
