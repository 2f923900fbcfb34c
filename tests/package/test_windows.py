"""Swin's windows: the partition, its inverse, what window attention lets a patch see."""

import pytest
import torch

from attention_book.windows import window_merge, window_partition


def test_window_partition_cuts_the_grid_into_its_windows_and_merges_back():
    X = torch.arange(2 * 4 * 6 * 3).reshape(2, 4, 6, 3)  # (batch, height, width, channels)
    windows = window_partition(X, 2)
    assert windows.shape == (2 * 2 * 3, 4, 3)
    # Window 1 of image 0 is the 2x2 block at rows 0-1, columns 2-3, row-major inside.
    torch.testing.assert_close(windows[1], X[0, 0:2, 2:4].reshape(4, 3))
    # Window 3 of image 0 starts the second row of windows: rows 2-3, columns 0-1.
    torch.testing.assert_close(windows[3], X[0, 2:4, 0:2].reshape(4, 3))
    torch.testing.assert_close(windows[6], X[1, 0:2, 0:2].reshape(4, 3))  # image 1
    assert torch.equal(window_merge(windows, 4, 6), X)
    assert torch.equal(window_partition(X, 1).reshape(X.shape), X)  # 1x1 windows: no change


def test_window_attention_lets_a_patch_see_only_its_own_window():
    from attention_book.multihead import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).double()
    X = torch.randn(1, 4, 4, 8, dtype=torch.float64)
    windows = window_partition(X, 2)
    with torch.no_grad():
        before = window_merge(layer(windows, windows, windows), 4, 4)
        changed = X.clone()
        changed[0, 3, 3] += 1.0  # a patch of the bottom-right window
        windows = window_partition(changed, 2)
        after = window_merge(layer(windows, windows, windows), 4, 4)
    moved = (after - before).abs().amax(dim=-1)[0] > 0  # (height, width)
    expected = torch.zeros(4, 4, dtype=torch.bool)
    expected[2:, 2:] = True
    assert torch.equal(moved, expected)


def test_window_functions_reject_bad_shapes():
    with pytest.raises(ValueError, match=r"window_size must divide.*window_size=3.*\(1, 4, 6, 2\)"):
        window_partition(torch.zeros(1, 4, 6, 2), 3)
    with pytest.raises(ValueError, match=r"X must have shape \(batch, height, width, channels\)"):
        window_partition(torch.zeros(4, 6, 2), 2)
    with pytest.raises(ValueError, match=r"\(6, 5, 2\) do not tile a 4 x 6 grid"):
        window_merge(torch.zeros(6, 5, 2), 4, 6)  # 5 is not a square number of patches
    with pytest.raises(ValueError, match=r"\(5, 4, 2\) do not tile a 4 x 6 grid"):
        window_merge(torch.zeros(5, 4, 2), 4, 6)  # 6 windows per image, 5 given
    with pytest.raises(ValueError, match=r"windows must have shape"):
        window_merge(torch.zeros(4, 2), 4, 6)
