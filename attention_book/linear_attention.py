"""Linear attention (Katharopoulos et al., 2020): attention in O(n) time through a feature map.

Softmax attention weights value ``j`` for query ``i`` by ``exp(q_i^T k_j / sqrt(d))``, a kernel
of the query and the key, and normalizes. Replace the kernel by a dot product of feature maps,
``phi(q_i)^T phi(k_j)``, and the weighted sum factors:

``out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))``.

The two sums do not depend on the query: they are computed once, in time linear in the number
of keys, and each query reads them in constant time. No ``n x n`` matrix is ever formed. With a
causal mask the sums run only up to ``j <= i``: running sums, which make the layer a recurrent
network whose state is a ``d x d_v`` matrix and a ``d`` vector (`causal_linear_attention_step`).
For training, `causal_linear_chunks` computes the same sums for all positions at once, a chunk
of positions at a time, so that neither time nor memory grows faster than ``n``.

The feature map of Katharopoulos et al. is ``elu(x) + 1``, positive everywhere, so the
normalizer never vanishes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_book.validation import check_keys_values, check_leading_axes

__all__ = [
    "causal_linear_attention_step",
    "causal_linear_chunks",
    "elu_feature_map",
    "linear_attention",
]

FeatureMap = Callable[[Tensor], Tensor]


# --8<-- [start:elu_feature_map]
def elu_feature_map(x: Tensor) -> Tensor:
    """The feature map of Katharopoulos et al. (2020): ``elu(x) + 1``, positive everywhere.

    Args:
        x: Queries or keys.

    Returns:
        ``phi(x)``, elementwise, same shape.
    """
    return F.elu(x) + 1


# --8<-- [end:elu_feature_map]


def _check(queries: Tensor, keys: Tensor, values: Tensor) -> None:
    if queries.dim() < 2 or queries.dim() != keys.dim() or keys.dim() != values.dim():
        raise ValueError(
            "queries, keys and values must have the same number of dims (..., n, d), got shapes "
            f"{tuple(queries.shape)}, {tuple(keys.shape)} and {tuple(values.shape)}"
        )
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same size d (last dim), got queries of shape "
            f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}"
        )
    check_keys_values(keys, values)
    check_leading_axes(queries, keys, values)


# --8<-- [start:linear_attention]
def linear_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    causal: bool = False,
    *,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
    chunk_size: int = 64,
) -> Tensor:
    """Attention with the kernel ``phi(q)^T phi(k)`` instead of ``exp(q^T k / sqrt(d))``.

    Non-causal: every query reads the same two sums over all keys, ``phi(K)^T V`` and
    ``phi(K)^T 1``. Causal (query ``i`` sees keys ``j <= i``, as many queries as keys): the
    sums run only up to ``i``. They are computed chunk by chunk (`causal_linear_chunks`),
    which never stores an ``n x n`` matrix nor one ``d x d_v`` sum per position;
    `causal_linear_attention_step` is the same computation one position at a time.

    Args:
        queries: Query vectors.
        keys: Key vectors, the same size ``d`` as the queries.
        values: Value vectors, one per key.
        causal: Whether query ``i`` sees only keys ``j <= i``.
        feature_map: ``phi``, applied to queries and keys; its outputs must be positive.
        eps: Added to the normalizer.
        chunk_size: Positions per chunk of the causal computation.

    Returns:
        The attention output, one value-sized vector per query.

    Shapes:
        - queries: ``(..., n, d)``
        - keys: ``(..., m, d)``
        - values: ``(..., m, d_v)``
        - returns: ``(..., n, d_v)``

    Raises:
        ValueError: If the shapes do not fit together, ``causal`` with ``n != m``, or
            ``chunk_size < 1``.
    """
    _check(queries, keys, values)
    phi_q, phi_k = feature_map(queries), feature_map(keys)  # (..., n, d), (..., m, d)
    if not causal:
        kv = phi_k.transpose(-2, -1) @ values  # (..., d, d_v): sum_j phi(k_j) v_j^T
        z = phi_k.sum(dim=-2)  # (..., d): sum_j phi(k_j)
        numerator = phi_q @ kv  # (..., n, d_v)
        denominator = (phi_q * z.unsqueeze(-2)).sum(dim=-1, keepdim=True)  # (..., n, 1)
        return numerator / (denominator + eps)
    if queries.shape[-2] != keys.shape[-2]:
        raise ValueError(
            f"causal linear attention needs as many queries as keys, got queries of shape "
            f"{tuple(queries.shape)} and keys of shape {tuple(keys.shape)}"
        )
    numerator, denominator = causal_linear_chunks(phi_q, phi_k, values, chunk_size)
    return numerator / (denominator + eps)


# --8<-- [end:linear_attention]


# --8<-- [start:causal_linear_chunks]
def causal_linear_chunks(
    phi_q: Tensor, phi_k: Tensor, values: Tensor, chunk_size: int = 64
) -> tuple[Tensor, Tensor]:
    """The numerator and normalizer of causal linear attention, one chunk of positions at a time.

    Within a chunk of ``C`` positions the weights ``phi(q_i)^T phi(k_j)``, ``j <= i``, are
    written out (a ``C x C`` matrix, masked); the keys of all earlier chunks enter through
    their sums ``S = sum_j phi(k_j) v_j^T`` and ``z = sum_j phi(k_j)``, one per chunk. Time
    ``O(n C d + n d d_v)`` and memory ``O(n C + (n / C) d d_v)``: linear in ``n``.

    Args:
        phi_q: Feature-mapped queries.
        phi_k: Feature-mapped keys, one per query.
        values: Values, one per key.
        chunk_size: Positions per chunk ``C``.

    Returns:
        ``sum_{j<=i} (phi(q_i)^T phi(k_j)) v_j`` and ``sum_{j<=i} phi(q_i)^T phi(k_j)``.

    Shapes:
        - phi_q, phi_k: ``(..., n, d)``
        - values: ``(..., n, d_v)``
        - returns: ``(..., n, d_v)`` and ``(..., n, 1)``

    Raises:
        ValueError: If ``chunk_size < 1``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    n = phi_q.shape[-2]
    pad = -n % chunk_size  # zero keys and values at the end add nothing to any sum
    if pad:
        phi_q, phi_k, values = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, values))
    # (..., num_chunks, C, d) and (..., num_chunks, C, d_v)
    q, k, v = (x.unflatten(-2, (-1, chunk_size)) for x in (phi_q, phi_k, values))
    # Earlier chunks: the sums over every chunk before this one (exclusive prefix sums).
    S = torch.cumsum(k.transpose(-2, -1) @ v, dim=-3)  # (..., num_chunks, d, d_v)
    z = torch.cumsum(k.sum(dim=-2), dim=-2)  # (..., num_chunks, d)
    S = torch.cat([torch.zeros_like(S[..., :1, :, :]), S[..., :-1, :, :]], dim=-3)
    z = torch.cat([torch.zeros_like(z[..., :1, :]), z[..., :-1, :]], dim=-2)
    numerator = q @ S  # (..., num_chunks, C, d_v)
    denominator = (q * z.unsqueeze(-2)).sum(dim=-1, keepdim=True)  # (..., num_chunks, C, 1)
    # This chunk: the weights of keys j <= i, written out.
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    weights = (q @ k.transpose(-2, -1)).masked_fill(~causal, 0.0)  # (..., num_chunks, C, C)
    numerator = numerator + weights @ v
    denominator = denominator + weights.sum(dim=-1, keepdim=True)
    # (..., n, d_v) and (..., n, 1), without the padding
    return numerator.flatten(-3, -2)[..., :n, :], denominator.flatten(-3, -2)[..., :n, :]


# --8<-- [end:causal_linear_chunks]


# --8<-- [start:causal_linear_attention_step]
def causal_linear_attention_step(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    *,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """One step of causal linear attention as a recurrent network.

    The state ``(S, z)`` holds the running sums of ``phi(k_j) v_j^T`` and ``phi(k_j)`` over the
    positions seen so far. A step adds the new key and value to them and reads them with the
    new query: constant time and memory per token, however long the sequence.

    Args:
        query: The query of the new position.
        key: Its key.
        value: Its value.
        state: ``(S, z)`` after the previous positions, or None at the first position.
        feature_map: ``phi``.
        eps: Added to the normalizer.

    Returns:
        The output at this position and the new state.

    Shapes:
        - query, key: ``(..., d)``
        - value: ``(..., d_v)``
        - state: ``((..., d, d_v), (..., d))``
        - output: ``(..., d_v)``

    Raises:
        ValueError: If the shapes do not fit together.
    """
    if query.shape != key.shape or key.shape[:-1] != value.shape[:-1]:
        raise ValueError(
            "query and key must have the same shape (..., d) and value the shape (..., d_v), "
            f"got {tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}"
        )
    phi_q, phi_k = feature_map(query), feature_map(key)  # (..., d)
    S = phi_k.unsqueeze(-1) * value.unsqueeze(-2)  # (..., d, d_v): phi(k) v^T
    z = phi_k
    if state is not None:
        expected = (tuple(S.shape), tuple(z.shape))
        if (tuple(state[0].shape), tuple(state[1].shape)) != expected:
            raise ValueError(
                f"state must have shapes (..., d, d_v) = {expected[0]} and (..., d) = "
                f"{expected[1]}, got {tuple(state[0].shape)} and {tuple(state[1].shape)}"
            )
        S, z = state[0] + S, state[1] + z
    numerator = (phi_q.unsqueeze(-2) @ S).squeeze(-2)  # (..., d_v)
    denominator = (phi_q * z).sum(dim=-1, keepdim=True)  # (..., 1)
    return numerator / (denominator + eps), (S, z)


# --8<-- [end:causal_linear_attention_step]
