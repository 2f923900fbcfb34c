"""Masks for attention: masked softmax, valid lengths, boolean masks and causal masks.

Attention often has to ignore some keys: padding tokens at the end of a sequence, or future
tokens in a decoder. This module turns those rules into boolean masks and applies them inside
the softmax. One convention holds everywhere, the same as
`torch.nn.functional.scaled_dot_product_attention`: a boolean mask is ``True`` where a query
**may attend** to a key and ``False`` where it may not.

A row whose keys are all masked has nothing to attend to. Here such a row gets all-zero
weights, so the attention output for that query is a zero vector, and its gradient is zero too
(never NaN). The classic trick of filling masked scores with ``-1e6`` gives such a row uniform
weights instead, which silently averages padding; we do not use it.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["causal_mask", "masked_softmax", "valid_lens_to_mask"]


def _check_valid_lens(valid_lens: Tensor, batch_size: int, num_queries: int) -> Tensor:
    """Return ``valid_lens`` as an integer tensor after checking its dtype, shape and values."""
    if not isinstance(valid_lens, Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.is_floating_point() or valid_lens.is_complex() or valid_lens.dtype == torch.bool:
        raise ValueError(
            f"valid_lens must be an integer tensor, got dtype {valid_lens.dtype} "
            f"with shape {tuple(valid_lens.shape)}"
        )
    if valid_lens.dim() == 1:
        expected = (batch_size,)
    elif valid_lens.dim() == 2:
        expected = (batch_size, num_queries)
    else:
        expected = None
    if expected is None or tuple(valid_lens.shape) != expected:
        raise ValueError(
            f"valid_lens must have shape (batch,) = ({batch_size},) or "
            f"(batch, num_queries) = ({batch_size}, {num_queries}), "
            f"got {tuple(valid_lens.shape)}"
        )
    if valid_lens.numel() > 0 and bool((valid_lens < 0).any()):
        raise ValueError(
            f"valid_lens must be non-negative, got minimum {int(valid_lens.min())} "
            f"in a tensor of shape {tuple(valid_lens.shape)}"
        )
    return valid_lens


# --8<-- [start:valid_lens_to_mask]
def valid_lens_to_mask(valid_lens: Tensor, num_queries: int, num_keys: int) -> Tensor:
    """Turn valid lengths into a boolean mask (``True`` = may attend).

    Key ``j`` is visible to a query when ``j < valid_len``. A valid length larger than
    ``num_keys`` simply makes every key visible; a valid length of 0 masks every key.

    Args:
        valid_lens: Integer tensor of valid key counts, one per sequence or one per query.
        num_queries: Number of queries.
        num_keys: Number of keys.

    Returns:
        The boolean mask, ``True`` where a query may attend to a key.

    Shapes:
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``
        - returns: ``(batch, num_queries, num_keys)``

    Raises:
        ValueError: If ``valid_lens`` is not an integer tensor, has the wrong shape or holds a
            negative length.
    """
    if not isinstance(valid_lens, Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    batch_size = valid_lens.shape[0] if valid_lens.dim() > 0 else -1
    valid_lens = _check_valid_lens(valid_lens, batch_size, num_queries)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(-1, num_queries)  # (batch, num_queries)
    positions = torch.arange(num_keys, device=valid_lens.device)  # (num_keys,)
    return positions[None, None, :] < valid_lens[:, :, None]  # (batch, num_queries, num_keys)


# --8<-- [end:valid_lens_to_mask]


# --8<-- [start:causal_mask]
def causal_mask(
    num_queries: int,
    num_keys: int,
    device: torch.device | str | None = None,
    alignment: str = "top-left",
) -> Tensor:
    """Build a causal (no peeking ahead) boolean mask, ``True`` = may attend.

    Two alignments are in use when ``num_queries != num_keys``:

    - ``"top-left"``: query ``i`` attends keys ``j <= i``. The diagonal starts at the top-left
      corner. This is what ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``
      does.
    - ``"bottom-right"``: query ``i`` attends keys ``j <= i + num_keys - num_queries``. The
      diagonal ends at the bottom-right corner, so the last query sees every key. This is the
      convention of FlashAttention 2.1 and later, and the one you want when the queries are the
      last ``num_queries`` positions of a longer sequence (decoding with cached keys). When
      ``num_queries > num_keys`` the first rows are fully masked.

    For a square mask the two are the same lower-triangular matrix.

    Args:
        num_queries: Number of queries (rows).
        num_keys: Number of keys (columns).
        device: Where to create the mask.
        alignment: ``"top-left"`` or ``"bottom-right"``.

    Returns:
        The boolean causal mask.

    Shapes:
        - returns: ``(num_queries, num_keys)``

    Raises:
        ValueError: If ``alignment`` is not one of the two names, or a size is negative.
    """
    if num_queries < 0 or num_keys < 0:
        raise ValueError(
            f"num_queries and num_keys must be non-negative, got {num_queries} and {num_keys}"
        )
    if alignment == "top-left":
        diagonal = 0
    elif alignment == "bottom-right":
        diagonal = num_keys - num_queries
    else:
        raise ValueError(f"alignment must be 'top-left' or 'bottom-right', got {alignment!r}")
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=diagonal)  # (num_queries, num_keys)


# --8<-- [end:causal_mask]


def _check_attn_mask_dtype(attn_mask: Tensor) -> None:
    """Raise ``ValueError`` unless ``attn_mask`` is a boolean tensor."""
    if not isinstance(attn_mask, Tensor) or attn_mask.dtype != torch.bool:
        dtype = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask)
        raise ValueError(f"attn_mask must be a bool tensor (True = may attend), got {dtype}")


def _combined_mask(
    scores_shape: torch.Size,
    device: torch.device,
    valid_lens: Tensor | None,
    attn_mask: Tensor | None,
) -> Tensor | None:
    """Combine ``valid_lens`` and ``attn_mask`` into one boolean mask broadcastable to scores.

    Returns ``None`` when neither is given.
    """
    scores_shape = torch.Size(scores_shape)
    mask = None
    if valid_lens is not None:
        if len(scores_shape) < 3:
            raise ValueError(
                "valid_lens needs scores of shape (batch, [num_heads,] num_queries, num_keys), "
                f"got scores of shape {tuple(scores_shape)}"
            )
        batch_size, num_queries, num_keys = scores_shape[0], scores_shape[-2], scores_shape[-1]
        valid_lens = _check_valid_lens(valid_lens, batch_size, num_queries).to(device)
        if valid_lens.dim() == 1:
            valid_lens = valid_lens[:, None]  # (batch, 1): the same for every query
        positions = torch.arange(num_keys, device=device)
        mask = positions < valid_lens[:, :, None]  # (batch, num_queries or 1, num_keys)
        # Insert a size-1 axis for every dimension between batch and queries (e.g. num_heads).
        mask = mask.view(mask.shape[0], *([1] * (len(scores_shape) - 3)), *mask.shape[1:])
    if attn_mask is not None:
        _check_attn_mask_dtype(attn_mask)
        try:
            broadcast = torch.broadcast_shapes(attn_mask.shape, scores_shape)
        except RuntimeError:
            broadcast = None
        if broadcast != scores_shape:
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to scores of "
                f"shape {tuple(scores_shape)} (batch, [num_heads,] num_queries, num_keys)"
            )
        attn_mask = attn_mask.to(device)
        mask = attn_mask if mask is None else mask & attn_mask
    return mask


# --8<-- [start:masked_softmax]
def masked_softmax(
    scores: Tensor, valid_lens: Tensor | None = None, attn_mask: Tensor | None = None
) -> Tensor:
    """Softmax over the last axis that gives masked keys exactly zero weight.

    Keys can be hidden in two ways, and both may be given at once (a key is visible only if
    both allow it):

    - ``valid_lens``: per sequence or per query, keys at positions ``>= valid_len`` are hidden.
      When scores have a heads axis, the same lengths apply to every head.
    - ``attn_mask``: a boolean tensor, ``True`` where a query may attend to a key (the
      convention of ``torch.nn.functional.scaled_dot_product_attention``).

    A row in which every key is hidden gets all-zero weights, with zero gradient, never NaN.
    Half-precision scores (float16, bfloat16) are normalised in float32 and the result is cast
    back to the input dtype.

    Args:
        scores: Attention scores.
        valid_lens: Optional integer tensor of valid key counts.
        attn_mask: Optional boolean mask, ``True`` = may attend, broadcastable to ``scores``.

    Returns:
        Attention weights with the dtype of ``scores``; each row sums to 1, or to 0 if fully
        masked.

    Shapes:
        - scores: ``(batch, [num_heads,] num_queries, num_keys)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``
        - attn_mask: broadcastable to ``scores``, e.g. ``(num_queries, num_keys)``
        - returns: same as ``scores``

    Raises:
        ValueError: If ``valid_lens`` is not an integer tensor, has the wrong shape or holds a
            negative length, or if ``attn_mask`` is not boolean or does not broadcast.
    """
    low_precision = scores.dtype in (torch.float16, torch.bfloat16)
    compute_dtype = torch.float32 if low_precision else scores.dtype
    mask = _combined_mask(scores.shape, scores.device, valid_lens, attn_mask)
    if mask is None:
        return torch.softmax(scores, dim=-1, dtype=compute_dtype).to(scores.dtype)
    # Hidden keys get -inf, so exp() makes them exactly 0. A fully masked row would then be
    # all -inf, and softmax would divide 0 by 0; give such rows a finite fill (0) instead and
    # zero their weights afterwards. torch.where passes no gradient to hidden positions.
    row_has_key = mask.any(dim=-1, keepdim=True)  # (..., num_queries, 1)
    fill = torch.where(row_has_key, float("-inf"), 0.0).to(compute_dtype)
    masked_scores = torch.where(mask, scores.to(compute_dtype), fill)
    weights = torch.softmax(masked_scores, dim=-1)
    weights = weights.masked_fill(~mask, 0.0)  # zeros hidden keys and fully masked rows
    return weights.to(scores.dtype)


# --8<-- [end:masked_softmax]
