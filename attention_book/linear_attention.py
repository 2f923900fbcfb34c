"""Linear attention (Katharopoulos et al., 2020): attention in O(n) time through a feature map.

Softmax attention weights value ``j`` for query ``i`` by ``exp(q_i^T k_j / sqrt(d))``, a kernel
of the query and the key, and normalizes. Replace the kernel by a dot product of feature maps,
``phi(q_i)^T phi(k_j)``, and the weighted sum factors:

``out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))``.

The two sums do not depend on the query: they are computed once, in time linear in the number
of keys, and each query reads them in constant time. No ``n x n`` matrix is ever formed. With a
causal mask the sums run only up to ``j <= i``: running sums, which make the layer a recurrent
network whose state is a ``d x d_v`` matrix and a ``d`` vector (`causal_linear_attention_step`).

The feature map of Katharopoulos et al. is ``elu(x) + 1``, positive everywhere, so the
normalizer never vanishes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_book.validation import check_keys_values, check_leading_axes

__all__ = ["causal_linear_attention_step", "elu_feature_map", "linear_attention"]

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
) -> Tensor:
    """Attention with the kernel ``phi(q)^T phi(k)`` instead of ``exp(q^T k / sqrt(d))``.

    Non-causal: every query reads the same two sums over all keys, ``phi(K)^T V`` and
    ``phi(K)^T 1``. Causal (query ``i`` sees keys ``j <= i``, as many queries as keys): the sums
    become cumulative sums over the keys, computed for all positions at once here (memory
    ``n * d * d_v`` per sequence; `causal_linear_attention_step` is the same thing one
    position at a time, with memory independent of ``n``).

    Args:
        queries: Query vectors.
        keys: Key vectors, the same size ``d`` as the queries.
        values: Value vectors, one per key.
        causal: Whether query ``i`` sees only keys ``j <= i``.
        feature_map: ``phi``, applied to queries and keys; its outputs must be positive.
        eps: Added to the normalizer.

    Returns:
        The attention output, one value-sized vector per query.

    Shapes:
        - queries: ``(..., n, d)``
        - keys: ``(..., m, d)``
        - values: ``(..., m, d_v)``
        - returns: ``(..., n, d_v)``

    Raises:
        ValueError: If the shapes do not fit together, or ``causal`` with ``n != m``.
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
    # Running sums over positions: S_i = sum_{j<=i} phi(k_j) v_j^T, z_i = sum_{j<=i} phi(k_j).
    S = torch.cumsum(phi_k.unsqueeze(-1) * values.unsqueeze(-2), dim=-3)  # (..., n, d, d_v)
    z = torch.cumsum(phi_k, dim=-2)  # (..., n, d)
    numerator = (phi_q.unsqueeze(-2) @ S).squeeze(-2)  # (..., n, d_v)
    denominator = (phi_q * z).sum(dim=-1, keepdim=True)  # (..., n, 1)
    return numerator / (denominator + eps)


# --8<-- [end:linear_attention]


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
    """
    phi_q, phi_k = feature_map(query), feature_map(key)  # (..., d)
    if state is None:
        S = phi_k.unsqueeze(-1) * value.unsqueeze(-2)  # (..., d, d_v)
        z = phi_k
    else:
        S = state[0] + phi_k.unsqueeze(-1) * value.unsqueeze(-2)
        z = state[1] + phi_k
    numerator = (phi_q.unsqueeze(-2) @ S).squeeze(-2)  # (..., d_v)
    denominator = (phi_q * z).sum(dim=-1, keepdim=True)  # (..., 1)
    return numerator / (denominator + eps), (S, z)


# --8<-- [end:causal_linear_attention_step]
