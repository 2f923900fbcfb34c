"""Rotary position embedding (RoPE, Su et al., 2021): position as a rotation of queries and keys.

Instead of adding a position vector to the token's representation, RoPE rotates each query and
key after their projection. The features are taken in pairs ``(x[2i], x[2i+1])``, and the pair
``i`` of a vector at position ``p`` is turned by the angle ``p * theta_i`` with
``theta_i = base^(-2i / head_dim)``: the frequencies of the sinusoidal encoding. A rotation
keeps the vector's norm, and the dot product of a query rotated by ``p * theta`` and a key
rotated by ``r * theta`` depends on the positions only through ``p - r``: attention scores
see relative positions.

This module pairs neighbouring features (``2i``, ``2i + 1``), as the RoFormer paper writes the
rotation. Some implementations (GPT-NeoX, Hugging Face's Llama) pair feature ``i`` with feature
``i + head_dim / 2`` instead; the two are the same up to a fixed permutation of the features.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["apply_rotary", "rotary_angles"]


# --8<-- [start:rotary_angles]
def rotary_angles(positions: Tensor, head_dim: int, base: float = 10000.0) -> Tensor:
    """The rotation angle of every feature pair at every position, ``p * base^(-2i / head_dim)``.

    Computed in float64, so that late positions keep their precision.

    Args:
        positions: Integer positions.
        head_dim: Number of features (even); there are ``head_dim // 2`` pairs.
        base: The base of the geometric frequencies (10000, as the sinusoidal encoding).

    Returns:
        The angles, in radians, float64.

    Shapes:
        - positions: ``(n,)``
        - returns: ``(n, head_dim // 2)``

    Raises:
        ValueError: If ``head_dim`` is odd or not positive, or ``positions`` is not 1-D.
    """
    if head_dim <= 0 or head_dim % 2 != 0:
        raise ValueError(f"head_dim must be even and positive (features in pairs), got {head_dim}")
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (n,), got {tuple(positions.shape)}")
    two_i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
    inv_freq = base ** (-two_i / head_dim)  # (head_dim // 2,): theta_i
    return positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (n, head_dim // 2)


# --8<-- [end:rotary_angles]


# --8<-- [start:apply_rotary]
def apply_rotary(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate each feature pair ``(x[2i], x[2i+1])`` of position ``p`` by ``p * theta_i``.

    Args:
        x: Queries or keys, split into heads or not; the last axis holds the features.
        positions: Integer position of each of the ``n`` rows.
        base: The base of the geometric frequencies.

    Returns:
        The rotated tensor, with the shape and dtype of ``x``.

    Shapes:
        - x: ``(..., n, head_dim)``, ``head_dim`` even
        - positions: ``(n,)``
        - returns: ``(..., n, head_dim)``

    Raises:
        ValueError: If ``x`` has fewer than 2 dims, an odd last dim, or ``positions`` does
            not hold one integer per row.
    """
    if x.dim() < 2 or x.shape[-1] % 2 != 0:
        raise ValueError(
            f"x must have shape (..., n, head_dim) with head_dim even, got {tuple(x.shape)}"
        )
    integer = not (positions.is_floating_point() or positions.is_complex())
    if not integer or positions.dtype == torch.bool or positions.shape != (x.shape[-2],):
        raise ValueError(
            f"positions must be integers of shape (n,) = ({x.shape[-2]},) for x of shape "
            f"{tuple(x.shape)}, got dtype {positions.dtype} and shape {tuple(positions.shape)}"
        )
    angles = rotary_angles(positions.to(x.device), x.shape[-1], base)  # (n, head_dim // 2)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = angles.cos().to(compute), angles.sin().to(compute)
    pairs = x.to(compute).unflatten(-1, (-1, 2))  # (..., n, head_dim // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., n, head_dim // 2) each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)  # (..., n, head_dim)


# --8<-- [end:apply_rotary]
