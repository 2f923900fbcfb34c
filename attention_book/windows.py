"""Swin's windows (Liu et al., 2021): self-attention inside square windows of patches.

A ViT lets every patch attend to every other, at a cost that grows with the square of the
number of patches. The Swin Transformer cuts the grid of patches into non-overlapping
``M x M`` windows and attends inside each window only, so the cost grows linearly with the
number of patches; `window_partition` cuts a grid into its windows (stacked along the batch
axis, so any attention layer applies to them unchanged) and `window_merge` puts them back.
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = ["window_merge", "window_partition"]


# --8<-- [start:window_partition]
def window_partition(X: Tensor, window_size: int) -> Tensor:
    """Cut a grid of patch vectors into non-overlapping square windows (Swin's W-MSA).

    Self-attention inside each window, with the windows stacked along the batch axis, is
    the window attention of Liu et al. (2021): a patch attends only to the
    ``window_size ** 2`` patches of its own window.

    Args:
        X: Patch vectors on their grid.
        window_size: Side ``M`` of a window, in patches; must divide height and width.

    Returns:
        One sequence of ``M * M`` patch vectors per window, windows in row-major order.

    Shapes:
        - X: ``(batch, height, width, channels)``
        - returns: ``(batch * (height // M) * (width // M), M * M, channels)``

    Raises:
        ValueError: If ``X`` is not 4-D or ``window_size`` does not divide its grid.
    """
    if X.dim() != 4:
        raise ValueError(
            f"X must have shape (batch, height, width, channels), got {tuple(X.shape)}"
        )
    batch, height, width, channels = X.shape
    M = window_size
    if M < 1 or height % M or width % M:
        raise ValueError(
            f"window_size must divide height and width, got window_size={window_size} "
            f"for X of shape {tuple(X.shape)}"
        )
    X = X.reshape(batch, height // M, M, width // M, M, channels)
    X = X.transpose(2, 3)  # (batch, rows of windows, cols of windows, M, M, channels)
    return X.reshape(-1, M * M, channels)  # (batch * num_windows, M * M, channels)


def window_merge(windows: Tensor, height: int, width: int) -> Tensor:
    """Put windows cut by `window_partition` back on their grid (its inverse).

    Args:
        windows: One sequence of ``M * M`` patch vectors per window.
        height: Height of the grid, in patches.
        width: Width of the grid, in patches.

    Returns:
        The patch vectors on their grid.

    Shapes:
        - windows: ``(batch * (height // M) * (width // M), M * M, channels)``
        - returns: ``(batch, height, width, channels)``

    Raises:
        ValueError: If the windows do not tile a ``height`` x ``width`` grid.
    """
    if windows.dim() != 3:
        raise ValueError(
            "windows must have shape (batch * num_windows, M * M, channels), "
            f"got {tuple(windows.shape)}"
        )
    num_windows, area, channels = windows.shape
    M = math.isqrt(area)
    tiles = area == M * M > 0 and height > 0 and width > 0 and height % M == width % M == 0
    if not tiles or num_windows % ((height // M) * (width // M)):
        raise ValueError(
            f"windows of shape {tuple(windows.shape)} do not tile a {height} x {width} grid "
            "(need (batch * num_windows, M * M, channels) with M dividing both sides)"
        )
    X = windows.reshape(-1, height // M, width // M, M, M, channels)
    return X.transpose(2, 3).reshape(-1, height, width, channels)  # (batch, h, w, channels)


# --8<-- [end:window_partition]
