"""A paged key/value cache: fixed-size blocks, a block table per sequence, a free list.

The GPT's `KVCache` (`attention_book.kv_cache`) reserves ``max_len`` positions for every
sequence up front, because it cannot know how long a sequence will grow. A server decoding
many sequences of unknown lengths wastes most of that reservation. PagedAttention (Kwon et al.,
2023) manages the cache the way an operating system manages memory: the keys and values live
in a pool of *blocks* of ``block_size`` positions; each sequence has a *block table* that lists
its blocks in order; a new block is taken from the *free list* only when a sequence fills its
last one, and a finished sequence gives its blocks back. At most ``block_size - 1`` positions
per sequence are ever reserved but unused.

Blocks can be shared. Sequences forked from one prompt (parallel samples, beam search) point at
the same blocks, each with a *reference count*; a sequence that writes into a block that
others still read first copies it (*copy-on-write*), so the shared prompt is stored once.

`paged_attention` reads a sequence's keys and values through its block table. Here the blocks
are gathered into a contiguous tensor before attention; vLLM's kernel reads them in place, one
block at a time, which is the exercise at the end of the chapter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_book.masking import causal_mask

__all__ = ["PagedKVCache", "paged_attention"]


# --8<-- [start:PagedKVCache]
class PagedKVCache:
    """Keys and values of many sequences in a shared pool of fixed-size blocks.

    Args:
        num_blocks: Blocks in the pool.
        block_size: Positions per block.
        num_blks: Number of layers (every layer stores its keys and values in the same block).
        num_kv_heads: Key/value heads per layer.
        head_dim: Features per head.
        dtype: dtype of the stored keys and values.
        device: Where to store them.

    Shapes:
        - keys, values: ``(num_blks, num_blocks, block_size, num_kv_heads, head_dim)``

    Raises:
        ValueError: If `num_blocks` or `block_size` is below 1.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_blks: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"num_blocks and block_size must be at least 1, got num_blocks={num_blocks} "
                f"and block_size={block_size}"
            )
        shape = (num_blks, num_blocks, block_size, num_kv_heads, head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self.ref_counts = [0] * num_blocks
        self.tables: dict[int, list[int]] = {}  # sequence id -> its blocks, in order
        self.lengths: dict[int, int] = {}  # sequence id -> positions written

    @property
    def num_blocks(self) -> int:
        """Blocks in the pool."""
        return len(self.ref_counts)

    @property
    def block_nbytes(self) -> int:
        """Bytes of one block: its keys and values in every layer."""
        return 2 * self.keys[:, 0].nbytes

    def blocks_in_use(self) -> int:
        """Blocks held by at least one sequence."""
        return self.num_blocks - len(self.free)

    def add_sequence(self, seq_id: int) -> None:
        """Start an empty sequence (no block is taken until it holds a position).

        Raises:
            ValueError: If `seq_id` is already in the cache.
        """
        if seq_id in self.tables:
            raise ValueError(f"seq_id={seq_id} is already in the cache")
        self.tables[seq_id], self.lengths[seq_id] = [], 0

    def fork(self, parent: int, child: int) -> None:
        """Start sequence `child` as a copy of `parent` that shares all its blocks.

        Nothing is copied: each shared block's reference count goes up, and the first write
        into a shared block copies it (`append_slots`).

        Raises:
            ValueError: If `parent` is not in the cache or `child` already is.
        """
        if parent not in self.tables or child in self.tables:
            raise ValueError(f"cannot fork parent={parent} into child={child}: {self._known()}")
        self.tables[child], self.lengths[child] = list(self.tables[parent]), self.lengths[parent]
        for block in self.tables[child]:
            self.ref_counts[block] += 1

    def append_slots(self, seq_id: int, n: int) -> Tensor:
        """Make room for `n` more positions of a sequence; return where each one goes.

        A block is taken from the free list each time the last one is full. A partly filled
        last block that another sequence shares is copied first (copy-on-write).

        Args:
            seq_id: The sequence.
            n: Number of new positions.

        Returns:
            The slot of each new position: ``block * block_size + offset`` in the flat pool.

        Shapes:
            - returns: ``(n,)``

        Raises:
            ValueError: If the sequence is unknown, or the pool has too few free blocks
                (`num_blocks` is too small for what is in use).
        """
        if seq_id not in self.tables:
            raise ValueError(f"seq_id={seq_id} is not in the cache: {self._known()}")
        table, start = self.tables[seq_id], self.lengths[seq_id]
        needed = -(-(start + n) // self.block_size) - len(table)  # ceil, minus blocks held
        shared_tail = start % self.block_size != 0 and self.ref_counts[table[-1]] > 1
        if needed + shared_tail > len(self.free):
            raise ValueError(
                f"out of blocks: seq_id={seq_id} needs {needed + shared_tail} more of "
                f"block_size={self.block_size}, {len(self.free)} of num_blocks={self.num_blocks} "
                "are free"
            )
        if shared_tail:  # copy-on-write: this sequence gets its own copy of the shared block
            table[-1] = self._copy_block(table[-1])
        for _ in range(needed):
            block = self.free.pop()
            self.ref_counts[block] = 1
            table.append(block)
        self.lengths[seq_id] = start + n
        positions = torch.arange(start, start + n)
        blocks = torch.tensor(table, dtype=torch.long)[positions // self.block_size]
        return blocks * self.block_size + positions % self.block_size

    def write(self, layer: int, slots: Tensor, keys: Tensor, values: Tensor) -> None:
        """Store the keys and values of new positions of one layer in their slots.

        Args:
            layer: Index of the layer.
            slots: Where each position goes (from `append_slots`).
            keys: Their keys.
            values: Their values.

        Shapes:
            - slots: ``(n,)``
            - keys, values: ``(num_kv_heads, n, head_dim)``
        """
        flat_keys = self.keys[layer].flatten(0, 1)  # a view: (num_blocks * block_size, h, d)
        flat_values = self.values[layer].flatten(0, 1)
        flat_keys[slots] = keys.transpose(0, 1)  # (n, num_kv_heads, head_dim), in place
        flat_values[slots] = values.transpose(0, 1)

    def read(self, layer: int, seq_id: int) -> tuple[Tensor, Tensor]:
        """A sequence's keys and values of one layer, gathered through its block table.

        Returns:
            Keys and values of positions ``0 .. length - 1``.

        Shapes:
            - returns: ``(num_kv_heads, length, head_dim)`` twice
        """
        table = torch.tensor(self.tables[seq_id], dtype=torch.long)
        length = self.lengths[seq_id]

        def gather(pool: Tensor) -> Tensor:
            blocks = pool[layer, table]  # (blocks, block_size, num_kv_heads, head_dim)
            return blocks.flatten(0, 1)[:length].transpose(0, 1)  # (h_kv, length, head_dim)

        return gather(self.keys), gather(self.values)

    def free_sequence(self, seq_id: int) -> None:
        """Forget a sequence: its blocks that no other sequence holds go back to the free list.

        Raises:
            ValueError: If `seq_id` is not in the cache.
        """
        if seq_id not in self.tables:
            raise ValueError(f"seq_id={seq_id} is not in the cache: {self._known()}")
        for block in reversed(self.tables.pop(seq_id)):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free.append(block)
        del self.lengths[seq_id]

    def _copy_block(self, block: int) -> int:
        """Copy a shared block into a free one, for one of its holders."""
        copy = self.free.pop()
        self.keys[:, copy] = self.keys[:, block]
        self.values[:, copy] = self.values[:, block]
        self.ref_counts[block] -= 1
        self.ref_counts[copy] = 1
        return copy

    def _known(self) -> str:
        return f"the cache holds sequences {sorted(self.tables)}"


# --8<-- [end:PagedKVCache]


# --8<-- [start:paged_attention]
def paged_attention(
    queries: Tensor, cache: PagedKVCache, layer: int, seq_id: int, scale: float | None = None
) -> Tensor:
    """Causal attention of a sequence's newest positions to all its positions, via the table.

    The queries are the last ``n`` positions of the sequence (their keys and values already
    written), so the causal mask is aligned bottom-right, as with the contiguous cache.

    Args:
        queries: Queries of the sequence's ``n`` newest positions.
        cache: The paged cache.
        layer: Index of the layer.
        seq_id: The sequence.
        scale: Factor of the dot products; default ``1 / sqrt(head_dim)``.

    Returns:
        The attention output of each query.

    Shapes:
        - queries: ``(num_heads, n, head_dim)``
        - returns: ``(num_heads, n, head_dim)``
    """
    keys, values = cache.read(layer, seq_id)  # (num_kv_heads, length, head_dim)
    group = queries.shape[0] // keys.shape[0]  # query heads per key/value head
    keys = keys.repeat_interleave(group, dim=0)  # (num_heads, length, head_dim)
    values = values.repeat_interleave(group, dim=0)
    mask = causal_mask(queries.shape[1], keys.shape[1], queries.device, alignment="bottom-right")
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)


# --8<-- [end:paged_attention]
