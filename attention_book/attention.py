"""Attention scoring functions: additive (Bahdanau) and scaled dot-product attention.

Both modules take queries, keys and values, score every query against every key, turn the
scores into weights with a masked softmax, and return the weighted average of the values.
They keep their last weights in ``attention_weights`` so that chapters can plot them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_book.masking import causal_mask, combine_masks, masked_softmax
from attention_book.validation import (
    check_bool_mask,
    check_dims,
    check_feature_size,
    check_keys_values,
    check_leading_axes,
)

__all__ = ["AdditiveAttention", "DotProductAttention"]


# --8<-- [start:AdditiveAttention]
class AdditiveAttention(nn.Module):
    """Additive attention (Bahdanau et al., 2015).

    A query and a key of different sizes are projected to ``num_hiddens`` features, added, and
    passed through tanh; a learned vector ``w_v`` turns the result into a score:

    ``score(q, k) = w_v^T tanh(W_q q + W_k k)``.

    The weights before dropout are kept in ``self.attention_weights``.

    Args:
        key_size: Size of each key vector.
        query_size: Size of each query vector.
        num_hiddens: Size of the hidden layer in which queries and keys are added.
        dropout: Dropout probability applied to the attention weights.

    Shapes:
        - queries: ``(batch, num_queries, query_size)``
        - keys: ``(batch, num_keys, key_size)``
        - values: ``(batch, num_keys, value_dim)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``
        - attn_mask: bool, broadcastable to ``(batch, num_queries, num_keys)``
        - output: ``(batch, num_queries, value_dim)``
        - attention_weights: ``(batch, num_queries, num_keys)``
    """

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        self.key_size = key_size
        self.query_size = query_size
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: Tensor | None = None

    def project_keys(self, keys: Tensor) -> Tensor:
        """Project keys to the hidden space, ``W_k k``: the part of the score without the query.

        Args:
            keys: Key vectors.

        Returns:
            The projected keys, to pass to `forward` with ``keys_projected=True``.

        Shapes:
            - keys: ``(batch, num_keys, key_size)``
            - returns: ``(batch, num_keys, num_hiddens)``
        """
        return self.W_k(keys)

    # --8<-- [end:AdditiveAttention]

    # --8<-- [start:AdditiveAttention_forward]
    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        *,
        keys_projected: bool = False,
    ) -> Tensor:
        """Attend from each query to the keys and average the values.

        Args:
            queries: Query vectors.
            keys: Key vectors, or their projections ``W_k k`` if ``keys_projected``.
            values: Value vectors, one per key.
            valid_lens: Optional number of valid keys per sequence or per query.
            attn_mask: Optional boolean mask, ``True`` = may attend.
            keys_projected: ``keys`` already went through `project_keys`, so they have
                ``num_hiddens`` features. A decoder that attends to the same keys at every
                step projects them once and passes them this way.

        Returns:
            The attention output, one value-sized vector per query.

        Raises:
            ValueError: If an input has the wrong number of dims, a feature size differs from
                ``query_size``/``key_size`` (``num_hiddens`` for projected keys), keys and
                values differ in length, the batch sizes differ, or a mask is malformed.
        """
        self._check_inputs(queries, keys, values, keys_projected)
        queries = self.W_q(queries)  # (batch, num_queries, num_hiddens)
        if not keys_projected:
            keys = self.project_keys(keys)  # (batch, num_keys, num_hiddens)
        # Add every query to every key by broadcasting:
        # (batch, num_queries, 1, num_hiddens) + (batch, 1, num_keys, num_hiddens)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)  # (batch, num_queries, num_keys)
        self.attention_weights = masked_softmax(scores, valid_lens, attn_mask)
        # (batch, num_queries, num_keys) @ (batch, num_keys, value_dim)
        return torch.bmm(self.dropout(self.attention_weights), values)

    # --8<-- [end:AdditiveAttention_forward]

    def _check_inputs(
        self, queries: Tensor, keys: Tensor, values: Tensor, keys_projected: bool
    ) -> None:
        """Refuse inputs of the wrong rank or size with a ValueError (see `forward`)."""
        check_dims("queries", queries, (3,), "(batch, num_queries, query_size)")
        check_dims("keys", keys, (3,), "(batch, num_keys, key_size)")
        check_dims("values", values, (3,), "(batch, num_keys, value_dim)")
        if queries.shape[-1] != self.query_size:
            raise ValueError(
                f"queries must have last dim query_size={self.query_size}, "
                f"got shape {tuple(queries.shape)}"
            )
        expected = self.W_k.out_features if keys_projected else self.key_size
        if keys.shape[-1] != expected:
            name = "num_hiddens" if keys_projected else "key_size"
            raise ValueError(
                f"keys must have last dim {name}={expected}, got shape {tuple(keys.shape)}"
            )
        check_keys_values(keys, values)
        check_leading_axes(queries, keys, values)


# --8<-- [start:DotProductAttention]
class DotProductAttention(nn.Module):
    """Scaled dot-product attention (Vaswani et al., 2017).

    ``score(q, k) = q^T k / sqrt(d)``, where ``d`` is the size of queries and keys. Dividing by
    ``sqrt(d)`` keeps the scores' variance near 1 however large ``d`` is, so the softmax does
    not saturate.

    Works on 3-D inputs ``(batch, n, d)`` and on 4-D inputs ``(batch, num_heads, n, d)``.

    Two paths compute the same function:

    - ``need_weights=True`` (the default): the explicit path written out below. It keeps the
      weights (before dropout) in ``self.attention_weights`` for plotting.
    - ``need_weights=False``: the fused path, ``torch.nn.functional.scaled_dot_product_attention``,
      which is faster and uses less memory but never materialises the weights, so
      ``self.attention_weights`` is set to ``None``. Fully masked rows still give zero output.
      With dropout in training mode the two paths draw different random masks.

    Empty inputs give what ``scaled_dot_product_attention`` gives, on both paths: a batch or a
    number of queries of 0 gives an empty output, and a query with no key to attend to (0 keys,
    a valid length of 0, a fully masked row) gets a zero vector and zero gradients.

    Choose the path in the constructor, or per call with the ``need_weights`` argument of
    ``forward``.

    Args:
        dropout: Dropout probability applied to the attention weights.
        need_weights: Default path: explicit with weights (``True``) or fused (``False``).

    Shapes:
        - queries: ``(batch, [num_heads,] num_queries, d)``
        - keys: ``(batch, [num_heads,] num_keys, d)``
        - values: ``(batch, [num_heads,] num_keys, value_dim)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``, shared by all heads
        - attn_mask: bool, broadcastable to ``(batch, [num_heads,] num_queries, num_keys)``
        - output: ``(batch, [num_heads,] num_queries, value_dim)``
        - attention_weights: ``(batch, [num_heads,] num_queries, num_keys)``
    """

    def __init__(self, dropout: float = 0.0, *, need_weights: bool = True):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.need_weights = need_weights
        self.attention_weights: Tensor | None = None

    # --8<-- [end:DotProductAttention]

    # --8<-- [start:DotProductAttention_forward]
    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool | None = None,
    ) -> Tensor:
        """Attend from each query to the keys and average the values.

        Args:
            queries: Query vectors.
            keys: Key vectors, the same size ``d`` as the queries.
            values: Value vectors, one per key.
            valid_lens: Optional number of valid keys per sequence or per query.
            attn_mask: Optional boolean mask, ``True`` = may attend.
            is_causal: If ``True``, query ``i`` may attend only keys ``j <= i`` (top-left
                alignment, as ``scaled_dot_product_attention(is_causal=True)``); combined with
                the other masks.
            need_weights: Overrides the constructor's choice of path for this call.

        Returns:
            The attention output, one value-sized vector per query.

        Raises:
            ValueError: If the inputs do not have 3 or 4 dims (all the same), queries and keys
                differ in size ``d`` or have ``d = 0``, keys and values differ in length, the
                leading axes differ, or a mask is malformed.
        """
        self._check_inputs(queries, keys, values, attn_mask)
        need_weights = self.need_weights if need_weights is None else need_weights
        if not need_weights:  # PyTorch's fused kernel, which keeps no weights
            return self._fused(queries, keys, values, valid_lens, attn_mask, is_causal)
        if is_causal:  # query i may attend keys j <= i (and what attn_mask allows)
            attn_mask = self._with_causal_mask(attn_mask, queries, keys)
        d = queries.shape[-1]
        # (batch, [num_heads,] num_queries, d) @ (batch, [num_heads,] d, num_keys)
        scores = torch.matmul(queries, keys.transpose(-2, -1)) / math.sqrt(d)
        self.attention_weights = masked_softmax(scores, valid_lens, attn_mask)
        # (batch, [num_heads,] num_queries, num_keys) @ (batch, [num_heads,] num_keys, value_dim)
        return torch.matmul(self.dropout(self.attention_weights), values)

    # --8<-- [end:DotProductAttention_forward]

    @staticmethod
    def _check_inputs(
        queries: Tensor, keys: Tensor, values: Tensor, attn_mask: Tensor | None
    ) -> None:
        """Refuse inputs of the wrong rank or size with a ValueError (see `forward`)."""
        layout = "(batch, [num_heads,] n, d)"
        check_dims("queries", queries, (3, 4), layout)
        check_dims("keys", keys, (queries.dim(),), layout + " like queries")
        check_dims("values", values, (queries.dim(),), layout + " like queries")
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"queries and keys must have the same size d (last dim), got queries of shape "
                f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}"
            )
        check_feature_size("queries", queries)
        check_keys_values(keys, values)
        check_leading_axes(queries, keys, values)
        if attn_mask is not None:
            check_bool_mask(attn_mask)

    @staticmethod
    def _with_causal_mask(attn_mask: Tensor | None, queries: Tensor, keys: Tensor) -> Tensor:
        """``attn_mask`` and the top-left causal mask: query ``i`` may attend keys ``j <= i``."""
        causal = causal_mask(queries.shape[-2], keys.shape[-2], device=queries.device)
        return causal if attn_mask is None else attn_mask & causal

    # --8<-- [start:DotProductAttention_fused]
    def _fused(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        """The same attention through PyTorch's fused kernel (no weights are kept)."""
        self.attention_weights = None
        dropout_p = self.dropout.p if self.training else 0.0
        if valid_lens is None and attn_mask is None:  # the kernel's own (top-left) causal mask
            return F.scaled_dot_product_attention(
                queries, keys, values, dropout_p=dropout_p, is_causal=is_causal
            )
        if is_causal:
            attn_mask = self._with_causal_mask(attn_mask, queries, keys)
        scores_shape = (*queries.shape[:-1], keys.shape[-2])  # (..., num_queries, num_keys)
        mask = combine_masks(scores_shape, queries.device, valid_lens, attn_mask)
        # Let fully masked rows attend everywhere inside the kernel, then zero their output:
        # no backend can produce NaN for them, and their gradient is zero.
        row_has_key = mask.any(dim=-1, keepdim=True)  # (..., num_queries, 1)
        output = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=mask | ~row_has_key, dropout_p=dropout_p
        )
        return output.masked_fill(~row_has_key, 0.0)

    # --8<-- [end:DotProductAttention_fused]
