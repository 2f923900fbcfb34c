"""Masks for attention: masked softmax, valid lengths, boolean masks and causal masks.

Attention often has to ignore some keys: padding tokens at the end of a sequence, or future
tokens in a decoder. This module turns those rules into boolean masks and applies them inside
the softmax; it is the only place in the package that builds masks. One convention holds
everywhere, the same as `torch.nn.functional.scaled_dot_product_attention`: a boolean mask is
``True`` where a query **may attend** to a key and ``False`` where it may not.

A row whose keys are all masked has nothing to attend to. Here such a row gets all-zero
weights, so the attention output for that query is a zero vector, and its gradient is zero too
(never NaN). The classic trick of filling masked scores with ``-1e6`` gives such a row uniform
weights instead, which silently averages padding; we do not use it.

Causal alignment. A causal mask lets query ``i`` see only keys that are not in its future. When
there are as many queries as keys this is the lower triangle, and there is nothing to choose.
When ``num_queries != num_keys``, two conventions are in use:

- **top-left**: query ``i`` sees keys ``j <= i``; the diagonal starts in the top-left corner.
  This is ``scaled_dot_product_attention(is_causal=True)`` and the ``is_causal`` flag of the
  book's `DotProductAttention` and `MultiHeadAttention`.
- **bottom-right**: query ``i`` sees keys ``j <= i + num_keys - num_queries``; the diagonal ends
  in the bottom-right corner, so the last query sees every key. This is FlashAttention's
  convention since version 2.1, and the right one when the queries are the last positions of a
  longer sequence (decoding with cached keys). The book's `flash_attention` uses it, and so does
  the Transformer decoder when it decodes new positions after cached ones.

`causal_mask` builds either one; `attention_mask` builds the bottom-right one block by block for
the tiled FlashAttention code. `sliding_window_mask` is a causal mask (bottom-right) that also
hides keys more than a window behind the query, and `block_sparse_mask` expands a block layout
(local windows, global blocks) into a token-level mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention_book.validation import check_bool_mask, check_valid_lens

__all__ = [
    "attention_mask",
    "block_sparse_mask",
    "causal_mask",
    "combine_masks",
    "masked_softmax",
    "sliding_window_mask",
    "valid_lens_to_mask",
]


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
    valid_lens = check_valid_lens(valid_lens, batch_size, num_queries)
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

    ``alignment`` says where the diagonal sits when ``num_queries != num_keys`` (see the module
    docstring): ``"top-left"`` lets query ``i`` attend keys ``j <= i``, as
    ``scaled_dot_product_attention(is_causal=True)`` does; ``"bottom-right"`` lets it attend keys
    ``j <= i + num_keys - num_queries``, as FlashAttention 2.1 and later do (when
    ``num_queries > num_keys`` its first rows are fully masked). For a square mask the two are
    the same lower-triangular matrix.

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


# --8<-- [start:attention_mask]
def attention_mask(
    q_len: int,
    k_len: int,
    causal: bool = False,
    valid_lens: Tensor | None = None,
    query_offset: int = 0,
    key_offset: int = 0,
    num_queries: int | None = None,
    num_keys: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor | None:
    """Which (query, key) pairs of a block take part in attention: ``True`` = may attend.

    Causal masking here is aligned **bottom-right** (see the module docstring): query ``i`` sees
    key ``j`` when ``j <= i + (k_len - q_len)``. With `query_offset`/`key_offset` and
    `num_queries`/`num_keys` the function returns the mask of one block (rows
    ``query_offset ...``, columns ``key_offset ...``), which is how the tiled FlashAttention
    code asks for it.

    Args:
        q_len: Number of queries of the whole sequence.
        k_len: Number of keys of the whole sequence.
        causal: Whether to apply the bottom-right causal mask.
        valid_lens: Number of real keys per sequence; later keys are padding.
        query_offset: Index of the block's first query.
        key_offset: Index of the block's first key.
        num_queries: Number of queries in the block (default: all from `query_offset`).
        num_keys: Number of keys in the block (default: all from `key_offset`).
        device: Device of the returned mask.

    Returns:
        A boolean mask, or None when every pair may attend.

    Shapes:
        - valid_lens: ``(batch,)``
        - returns: ``(batch or 1, 1, num_queries, num_keys)``
    """
    num_queries = q_len - query_offset if num_queries is None else num_queries
    num_keys = k_len - key_offset if num_keys is None else num_keys
    keys = torch.arange(key_offset, key_offset + num_keys, device=device)
    mask = None
    if causal:
        queries = torch.arange(query_offset, query_offset + num_queries, device=device)
        # (1, 1, num_queries, num_keys)
        mask = (keys[None, :] <= queries[:, None] + (k_len - q_len))[None, None]
    if valid_lens is not None:
        # (batch, 1, 1, num_keys)
        padding = keys[None, None, None, :] < valid_lens.to(device)[:, None, None, None]
        mask = padding if mask is None else mask & padding
    return mask


# --8<-- [end:attention_mask]


# --8<-- [start:combine_masks]
def combine_masks(
    scores_shape: torch.Size,
    device: torch.device,
    valid_lens: Tensor | None,
    attn_mask: Tensor | None,
) -> Tensor | None:
    """Combine ``valid_lens`` and ``attn_mask`` into one boolean mask broadcastable to scores.

    Args:
        scores_shape: Shape of the scores the mask applies to.
        device: Device of the returned mask.
        valid_lens: Optional integer valid key counts, per sequence or per query.
        attn_mask: Optional boolean mask, ``True`` = may attend.

    Returns:
        The combined boolean mask, or ``None`` when neither is given.

    Shapes:
        - scores_shape: ``(batch, [num_heads,] num_queries, num_keys)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``
        - attn_mask: broadcastable to ``scores_shape``
        - returns: broadcastable to ``scores_shape``

    Raises:
        ValueError: If ``valid_lens`` or ``attn_mask`` is malformed (see `masked_softmax`).
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
        valid_lens = check_valid_lens(valid_lens, batch_size, num_queries).to(device)
        if valid_lens.dim() == 1:
            valid_lens = valid_lens[:, None]  # (batch, 1): the same for every query
        positions = torch.arange(num_keys, device=device)
        mask = positions < valid_lens[:, :, None]  # (batch, num_queries or 1, num_keys)
        # Insert a size-1 axis for every dimension between batch and queries (e.g. num_heads).
        mask = mask.view(mask.shape[0], *([1] * (len(scores_shape) - 3)), *mask.shape[1:])
    if attn_mask is not None:
        check_bool_mask(attn_mask)
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


# --8<-- [end:combine_masks]


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
    mask = combine_masks(scores.shape, scores.device, valid_lens, attn_mask)
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


# --8<-- [start:sliding_window_mask]
def sliding_window_mask(
    num_queries: int,
    num_keys: int,
    window: int,
    device: torch.device | str | None = None,
) -> Tensor:
    """A causal sliding-window (local) mask, ``True`` = may attend.

    Query ``i`` sits at position ``p = i + num_keys - num_queries`` of the keys (bottom-right
    alignment, see the module docstring: with fewer queries than keys, the queries are the last
    positions) and sees the ``window`` keys ``p - window < j <= p``: itself and the
    ``window - 1`` before it. With ``window >= num_keys`` it is the bottom-right `causal_mask`.

    Args:
        num_queries: Number of queries (rows).
        num_keys: Number of keys (columns).
        window: Number of keys each query sees, itself included (at least 1).
        device: Where to create the mask.

    Returns:
        The boolean mask.

    Shapes:
        - returns: ``(num_queries, num_keys)``

    Raises:
        ValueError: If ``window < 1`` or a size is negative.
    """
    if num_queries < 0 or num_keys < 0:
        raise ValueError(
            f"num_queries and num_keys must be non-negative, got {num_queries} and {num_keys}"
        )
    if window < 1:
        raise ValueError(f"window must be at least 1 (the query's own key), got {window}")
    positions = torch.arange(num_queries, device=device) + (num_keys - num_queries)
    keys = torch.arange(num_keys, device=device)
    offset = positions[:, None] - keys[None, :]  # (num_queries, num_keys): p - j
    return (offset >= 0) & (offset < window)


# --8<-- [end:sliding_window_mask]


# --8<-- [start:block_sparse_mask]
def block_sparse_mask(layout: Tensor, block_size: int) -> Tensor:
    """Expand a block layout into a token-level mask, ``True`` = may attend.

    Block-sparse attention decides visibility per block of ``block_size`` queries and
    ``block_size`` keys: ``layout[I, J]`` says whether query block ``I`` sees key block ``J``.
    Local windows (Swin's non-overlapping windows are a block-diagonal layout), a few global
    blocks (Longformer, BigBird) and strided patterns are all layouts.

    Args:
        layout: Boolean layout, one entry per (query block, key block).
        block_size: Tokens per block, the same for queries and keys.

    Returns:
        The token-level mask.

    Shapes:
        - layout: ``(num_query_blocks, num_key_blocks)``
        - returns: ``(num_query_blocks * block_size, num_key_blocks * block_size)``

    Raises:
        ValueError: If ``layout`` is not a 2-D boolean tensor or ``block_size < 1``.
    """
    if not isinstance(layout, Tensor) or layout.dtype != torch.bool or layout.dim() != 2:
        shape = tuple(layout.shape) if isinstance(layout, Tensor) else type(layout)
        raise ValueError(
            f"layout must be a bool tensor of shape (num_query_blocks, num_key_blocks), got {shape}"
        )
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    # (num_query_blocks * block_size, num_key_blocks * block_size)
    return layout.repeat_interleave(block_size, dim=0).repeat_interleave(block_size, dim=1)


# --8<-- [end:block_sparse_mask]
