"""The caches of generation: what a decoder keeps of the tokens it has seen.

A decoder that generates one token at a time would run the whole prefix again at every step.
`KVCache` keeps, for every layer, the projected keys and values of the positions seen so far,
so that a step computes only the new token's and attends to the stored ones; it is what the GPT
of `attention_book.gpt` uses for softmax attention, with as many key/value heads as the model
has (fewer with grouped-query attention). Causal linear attention needs no keys at all:
`LinearAttentionCache` holds the running sums of its recurrent form, whose size does not grow
with the sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["KVCache", "LinearAttentionCache"]


# --8<-- [start:KVCache]
class KVCache:
    """The projected keys and values of every layer, preallocated for ``max_len`` positions.

    A layer calls `update` with the keys and values of its new positions and gets back all
    keys and values so far; the model calls `advance` once all layers have written. Keys are
    stored after the rotary embedding, if any, so they are never rotated again.

    Args:
        num_blks: Number of layers.
        batch_size: Number of sequences.
        num_kv_heads: Key/value heads per layer.
        max_len: Most positions the cache holds.
        head_dim: Features per head.
        dtype: dtype of the stored keys and values.
        device: Where to store them.

    Shapes:
        - keys, values: ``(num_blks, batch, num_kv_heads, max_len, head_dim)``
    """

    def __init__(
        self,
        num_blks: int,
        batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        shape = (num_blks, batch_size, num_kv_heads, max_len, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # positions written by every layer

    def update(self, layer: int, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new positions' keys and values of one layer; return all so far.

        Args:
            layer: Index of the layer.
            keys: Keys of the new positions.
            values: Values of the new positions.

        Returns:
            The layer's keys and values of positions ``0 .. length + n - 1``.

        Shapes:
            - keys, values: ``(batch, num_kv_heads, n, head_dim)``
            - returns: ``(batch, num_kv_heads, length + n, head_dim)`` twice

        Raises:
            ValueError: If the new positions do not fit in ``max_len``.
        """
        start, end = self.length, self.length + keys.shape[2]
        self._check_room(keys)
        self.keys[layer, :, :, start:end] = keys
        self.values[layer, :, :, start:end] = values
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, n: int) -> None:
        """Count ``n`` more positions as written (after every layer has called `update`)."""
        self.length += n

    # --8<-- [end:KVCache]
    # --8<-- [start:KVCache-sizes]
    @property
    def max_len(self) -> int:
        """Most positions the cache holds."""
        return self.keys.shape[3]

    @property
    def nbytes(self) -> int:
        """Bytes of the stored keys and values at full length.

        2 · layers · batch · kv_heads · max_len · head_dim · bytes per number.
        """
        return self.keys.nbytes + self.values.nbytes

    def _check_room(self, keys: Tensor) -> None:
        """Raise a ValueError if the new positions of `keys` do not fit in ``max_len``."""
        if self.length + keys.shape[2] > self.max_len:
            raise ValueError(
                f"the cache holds max_len={self.max_len} positions; {self.length} are written "
                f"and keys of shape {tuple(keys.shape)} bring {keys.shape[2]} more"
            )

    # --8<-- [end:KVCache-sizes]


# --8<-- [start:LinearAttentionCache]
class LinearAttentionCache:
    """The state of causal linear attention in every layer: what replaces the key/value cache.

    Each layer keeps, per head, the running sums ``S = sum_j phi(k_j) v_j^T`` and
    ``z = sum_j phi(k_j)`` of the positions seen so far
    (`attention_book.linear_attention.causal_linear_attention_step`). Their size does not
    depend on the number of positions.

    Args:
        num_blks: Number of layers.
        batch_size: Number of sequences.
        num_heads: Query heads per layer (the sums are kept per query head).
        head_dim: Features per head.
        dtype: dtype of the sums.
        device: Where to store them.

    Shapes:
        - sums: ``(num_blks, batch, num_heads, head_dim, head_dim)``
        - normalizers: ``(num_blks, batch, num_heads, head_dim)``
    """

    def __init__(
        self,
        num_blks: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        shape = (num_blks, batch_size, num_heads, head_dim)
        self.sums = torch.zeros(*shape, head_dim, dtype=dtype, device=device)
        self.normalizers = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # positions summed by every layer

    @property
    def nbytes(self) -> int:
        """Bytes of the state, whatever the number of positions."""
        return self.sums.nbytes + self.normalizers.nbytes

    def read(self, layer: int) -> tuple[Tensor, Tensor]:
        """The running sums of one layer, ``(S, z)``."""
        return self.sums[layer], self.normalizers[layer]

    def write(self, layer: int, state: tuple[Tensor, Tensor]) -> None:
        """Store the running sums of one layer after its new positions."""
        self.sums[layer], self.normalizers[layer] = state

    def advance(self, n: int) -> None:
        """Count ``n`` more positions as summed (after every layer has called `write`)."""
        self.length += n


# --8<-- [end:LinearAttentionCache]
