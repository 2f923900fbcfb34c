"""Ring attention: one sequence split over P processes, keys and values passed around a ring.

FlashAttention computes attention one block of keys at a time and merges the partial results
with their log-sum-exp, so the order and the place in which blocks are visited does not matter
(`attention_book.flash`). Ring attention (Liu et al., 2023) takes that literally. The sequence
is cut into P parts, one per process (a *rank*); each rank keeps its queries, and the key/value
blocks travel around a ring of point-to-point sends: at step ``t`` rank ``r`` holds the block of
rank ``(r - t) mod P``, attends to it, merges, and passes it on to rank ``r + 1``. After P steps
every query has seen every key, and no rank ever held more than two blocks of keys and values.

The backward pass goes around the ring again: each rank recomputes its share of the gradients
block by block from the saved log-sum-exp (`tiled_attention_backward`), and the gradients of a
key/value block travel with the block, collecting every rank's share, until one last send
returns them to the block's owner.

Causal attention needs a choice of who holds what. Cut into P contiguous parts, the last rank's
queries see every key and the first rank's almost none: at each step some ranks compute a full
block while others skip theirs, and the step lasts as long as the slowest rank. The *zig-zag*
layout cuts the sequence into 2P chunks and gives rank ``r`` chunks ``r`` and ``2P - 1 - r``, one
early and one late: every rank then computes the same amount at every step (the layout of
Megatron-LM's context parallelism, proposed for ring attention in the ring-flash-attention
repository).

The functions run inside a process group of ``torch.distributed`` (`attention_book.distributed`
starts one on a CPU with the gloo backend); with one process, or none, they run alone.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from attention_book.flash.reference import tiled_attention_backward, tiled_attention_forward

__all__ = [
    "LAYOUTS",
    "RingAttention",
    "RingComm",
    "gather_sequence",
    "merge_attention",
    "ring_attention",
    "ring_attention_backward",
    "ring_attention_forward",
    "ring_bytes_formula",
    "sequence_chunks",
    "split_sequence",
]

LAYOUTS = ("contiguous", "zigzag")


# --8<-- [start:layouts]
def sequence_chunks(layout: str, rank: int, world_size: int) -> tuple[int, ...]:
    """The chunks of the sequence that a rank holds, in the order it stores them.

    ``"contiguous"`` cuts the sequence into `world_size` chunks and gives rank ``r`` chunk ``r``;
    ``"zigzag"`` cuts it into ``2 * world_size`` chunks and gives rank ``r`` chunks ``r`` and
    ``2 * world_size - 1 - r``.

    Args:
        layout: ``"contiguous"`` or ``"zigzag"``.
        rank: The rank, from 0 to ``world_size - 1``.
        world_size: Number of ranks.

    Returns:
        The chunk indices.

    Raises:
        ValueError: If `layout` is unknown or `rank` is not a rank of `world_size`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0 .. world_size - 1 = {world_size - 1}, got {rank}")
    return (rank,) if layout == "contiguous" else (rank, 2 * world_size - 1 - rank)


def split_sequence(x: Tensor, world_size: int, layout: str = "contiguous") -> list[Tensor]:
    """Cut a tensor along its sequence axis into one part per rank.

    Args:
        x: Queries, keys, values or gradients.
        world_size: Number of ranks.
        layout: ``"contiguous"`` or ``"zigzag"`` (see `sequence_chunks`).

    Returns:
        One tensor per rank, its chunks concatenated in the order of `sequence_chunks`.

    Shapes:
        - x: ``(..., seq_len, head_dim)``
        - returns: `world_size` tensors of shape ``(..., seq_len / world_size, head_dim)``

    Raises:
        ValueError: If `world_size` is below 1, or the number of chunks (`world_size`, twice
            that for ``"zigzag"``) does not divide the sequence length.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    num_chunks = world_size * len(sequence_chunks(layout, 0, world_size))
    if x.dim() < 2 or x.shape[-2] % num_chunks != 0:
        raise ValueError(
            f"world_size={world_size} with layout={layout!r} cuts the sequence into "
            f"{num_chunks} equal chunks, which needs a sequence length divisible by "
            f"{num_chunks}; got x of shape {tuple(x.shape)} (sequence axis -2)"
        )
    chunks = x.chunk(num_chunks, dim=-2)
    return [
        torch.cat([chunks[i] for i in sequence_chunks(layout, rank, world_size)], dim=-2)
        for rank in range(world_size)
    ]


def gather_sequence(parts: list[Tensor], layout: str = "contiguous") -> Tensor:
    """Put the ranks' parts back in sequence order: the inverse of `split_sequence`.

    Args:
        parts: One tensor per rank, in rank order.
        layout: The layout they were split with.

    Returns:
        The whole sequence.

    Shapes:
        - parts: ``(..., seq_len / world_size, head_dim)`` each
        - returns: ``(..., seq_len, head_dim)``
    """
    world_size = len(parts)
    placed = {}
    for rank, part in enumerate(parts):
        owned = sequence_chunks(layout, rank, world_size)
        for index, chunk in zip(owned, part.chunk(len(owned), dim=-2), strict=True):
            placed[index] = chunk
    return torch.cat([placed[i] for i in sorted(placed)], dim=-2)


# --8<-- [end:layouts]


# --8<-- [start:merge_attention]
def merge_attention(
    out: Tensor, lse: Tensor, block_out: Tensor, block_lse: Tensor
) -> tuple[Tensor, Tensor]:
    """Merge attention over two disjoint sets of keys, given each one's output and log-sum-exp.

    With ``L = log(exp(lse) + exp(block_lse))``, attention over the union of the keys is
    ``exp(lse - L) * out + exp(block_lse - L) * block_out``: the online softmax of the
    FlashAttention chapter, one block at a time. A row that saw no key on one side has a
    log-sum-exp of ``-inf`` there and weight 0; a row that saw none on either side stays 0.

    Args:
        out: Attention output over the first set of keys.
        lse: Its log-sum-exp per query.
        block_out: Attention output over the second set.
        block_lse: Its log-sum-exp per query.

    Returns:
        The output and log-sum-exp over both sets.

    Shapes:
        - out, block_out: ``(batch, num_heads, num_queries, head_dim)``
        - lse, block_lse: ``(batch, num_heads, num_queries)``
        - returns: the same two shapes
    """
    merged = torch.logaddexp(lse, block_lse)
    safe = torch.where(torch.isinf(merged), 0.0, merged)  # rows that saw no key at all
    out = (
        torch.exp(lse - safe)[..., None] * out + torch.exp(block_lse - safe)[..., None] * block_out
    )
    return out, merged


# --8<-- [end:merge_attention]


# --8<-- [start:tiles]
def _tiles(q_chunks: tuple[int, ...], k_chunks: tuple[int, ...], causal: bool):
    """The (query chunk, key chunk) pairs to compute, and whether each needs the causal mask.

    Chunks have equal lengths, so a key chunk is entirely before a query chunk (no mask), the
    same chunk (the causal triangle), or entirely after it (skipped when causal).
    """
    for i, a in enumerate(q_chunks):
        for j, b in enumerate(k_chunks):
            if not causal or b < a:
                yield i, j, False
            elif b == a:
                yield i, j, True


def _block_attention(q, k, v, q_chunks, k_chunks, causal, scale, out, lse):
    """Attend the local queries to one key/value block, chunk by chunk, merging as it goes."""
    q_parts, k_parts = q.chunk(len(q_chunks), dim=-2), k.chunk(len(k_chunks), dim=-2)
    v_parts, rows = v.chunk(len(k_chunks), dim=-2), q.shape[-2] // len(q_chunks)
    for i, j, diagonal in _tiles(q_chunks, k_chunks, causal):
        tile_out, tile_lse = tiled_attention_forward(
            q_parts[i], k_parts[j], v_parts[j], causal=diagonal, scale=scale
        )  # (batch, num_heads, rows, head_dim), (batch, num_heads, rows)
        part = slice(i * rows, (i + 1) * rows)
        out[..., part, :], lse[..., part] = merge_attention(
            out[..., part, :], lse[..., part], tile_out.to(out.dtype), tile_lse
        )


# --8<-- [end:tiles]


# --8<-- [start:RingComm]
@dataclass
class RingComm:
    """Sends to the next rank and receives from the previous one, counting what it sends.

    Attributes:
        timeout: Seconds any receive or send may wait before it raises.
        bytes_sent: Bytes of every tensor this rank has sent so far.
        steps: ``(compute_seconds, wait_seconds)`` of each forward step: the CPU time of the
            attention of the step, and the wall time spent waiting for its transfers.
    """

    timeout: float = 30.0
    bytes_sent: int = 0
    steps: list[tuple[float, float]] = field(default_factory=list)

    @property
    def rank(self) -> int:
        """This process's rank (0 without a process group)."""
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def world_size(self) -> int:
        """Number of ranks (1 without a process group)."""
        return dist.get_world_size() if dist.is_initialized() else 1

    def shift(self, tensors: list[Tensor]) -> Callable[[], list[Tensor]]:
        """Start sending `tensors` to the next rank and receiving theirs from the previous one.

        Args:
            tensors: What to pass on.

        Returns:
            A function that waits for both transfers (at most `timeout` seconds each) and
            returns the received tensors, shaped like `tensors`, on their device.
        """
        after, before = (self.rank + 1) % self.world_size, (self.rank - 1) % self.world_size
        sent = [t.contiguous() for t in tensors]  # kept alive until the transfers end
        received = [torch.empty_like(t) for t in sent]  # on the tensors' device
        # One batch: NCCL starts the sends and receives together (one after the other, every
        # rank would send first and wait), on its own stream; gloo runs them as it would alone.
        works = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, t, after, tag=i) for i, t in enumerate(sent)]
            + [dist.P2POp(dist.irecv, t, before, tag=i) for i, t in enumerate(received)]
        )
        self.bytes_sent += sum(t.nbytes for t in tensors)

        def wait() -> list[Tensor]:
            for work in works:
                work.wait(timeout=datetime.timedelta(seconds=self.timeout))
            del sent[:]  # the sends are done: drop this rank's copies
            return received

        return wait

    def step(
        self,
        block: list[Tensor],
        attend: Callable[[list[Tensor]], None],
        last: bool = False,
        overlap: bool = True,
    ) -> list[Tensor]:
        """One step of the ring: pass `block` on while `attend(block)` runs; the block received.

        The step is timed into `steps`: the CPU time of `attend`, and the wall time spent
        waiting for the transfers (before `attend` without `overlap`, after it with).

        Args:
            block: The tensors this rank holds now.
            attend: This rank's computation with them.
            last: The last step: nothing is passed on, and `block` is returned.
            overlap: Start the transfer before `attend` and wait for it after (True), or wait
                for it first.

        Returns:
            The tensors received from the previous rank (`block` at the last step).
        """
        wait, received, waited = None if last else self.shift(block), block, 0.0
        if wait is not None and not overlap:
            start = time.perf_counter()
            received, waited = wait(), time.perf_counter() - start
        start = time.thread_time()
        attend(block)
        computed = time.thread_time() - start
        if wait is not None and overlap:
            start = time.perf_counter()
            received, waited = wait(), time.perf_counter() - start
        self.steps.append((computed, waited))
        return received


# --8<-- [end:RingComm]


# --8<-- [start:ring_forward]
def ring_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    comm: RingComm | None = None,
    overlap: bool = True,
) -> tuple[Tensor, Tensor]:
    """This rank's share of attention: its queries against every rank's keys and values.

    At each of the P steps the rank attends its queries to the key/value block it holds and
    merges the result (`merge_attention`); with `overlap`, the block is already on its way to
    the next rank while that happens, and the next one on its way here.

    Args:
        q: This rank's queries (its part of `split_sequence`).
        k: This rank's keys.
        v: This rank's values.
        layout: How the sequence was split: ``"contiguous"`` or ``"zigzag"``.
        causal: Causal attention over the whole sequence.
        scale: Factor of the dot products; default ``1 / sqrt(head_dim)``.
        comm: The ring (a new `RingComm` if None); it counts the bytes and times the steps.
        overlap: Start each transfer before the step's computation (True), or finish it first.

    Returns:
        This rank's output and the log-sum-exp of its queries.

    Shapes:
        - q, k, v: ``(batch, num_heads, seq_len / P, head_dim)``
        - returns: ``(batch, num_heads, seq_len / P, head_dim)`` and
          ``(batch, num_heads, seq_len / P)``
    """
    comm = RingComm() if comm is None else comm
    rank, world_size = comm.rank, comm.world_size
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros(q.shape, dtype=dtype, device=q.device)  # merged so far
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=dtype, device=q.device)
    q_chunks, block = sequence_chunks(layout, rank, world_size), [k, v]
    for step in range(world_size):
        owner = (rank - step) % world_size  # whose keys and values this rank holds now
        k_chunks = sequence_chunks(layout, owner, world_size)

        def attend(block, k_chunks=k_chunks):  # merge this block's attention into out, lse
            _block_attention(q, *block, q_chunks, k_chunks, causal, scale, out, lse)

        # Pass the block on to the next rank while attending to it; take the previous rank's.
        block = comm.step(block, attend, last=step == world_size - 1, overlap=overlap)
    return out.to(q.dtype), lse


# --8<-- [end:ring_forward]


# --8<-- [start:ring_backward]
def ring_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    comm: RingComm | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """This rank's gradients, with the key/value gradients carried around the ring.

    The key/value block and the gradients collected for it so far travel together; each rank
    adds its share (recomputed from the saved `lse`, as in FlashAttention's backward pass).
    After P steps a rank holds the complete gradients of the next rank's block, and one more
    send delivers them.

    Args:
        q: This rank's queries.
        k: This rank's keys.
        v: This rank's values.
        out: This rank's output of the forward pass.
        lse: Its log-sum-exp.
        grad_out: Gradient of the loss with respect to `out`.
        layout: How the sequence was split.
        causal: Causal attention, as in the forward pass.
        scale: Factor of the dot products; default ``1 / sqrt(head_dim)``.
        comm: The ring (a new `RingComm` if None).

    Returns:
        The gradients of this rank's queries, keys and values.

    Shapes:
        - q, k, v, out, grad_out: ``(batch, num_heads, seq_len / P, head_dim)``
        - lse: ``(batch, num_heads, seq_len / P)``
        - returns: the shapes of q, k and v
    """
    comm = RingComm() if comm is None else comm
    rank, world_size = comm.rank, comm.world_size
    q_chunks = sequence_chunks(layout, rank, world_size)
    q_parts, o_parts = q.chunk(len(q_chunks), dim=-2), out.chunk(len(q_chunks), dim=-2)
    do_parts, lse_parts = grad_out.chunk(len(q_chunks), dim=-2), lse.chunk(len(q_chunks), dim=-1)
    grad_q = torch.zeros_like(q)
    block = [k, v, torch.zeros_like(k), torch.zeros_like(v)]  # keys, values, their gradients
    for step in range(world_size):
        owner = (rank - step) % world_size
        k_chunks = sequence_chunks(layout, owner, world_size)
        keys, values, grad_k, grad_v = block
        k_parts, v_parts = keys.chunk(len(k_chunks), dim=-2), values.chunk(len(k_chunks), dim=-2)
        rows, cols = q_parts[0].shape[-2], k_parts[0].shape[-2]
        for i, j, diagonal in _tiles(q_chunks, k_chunks, causal):
            dq, dk, dv = tiled_attention_backward(
                q_parts[i], k_parts[j], v_parts[j], o_parts[i], lse_parts[i], do_parts[i],
                causal=diagonal, scale=scale,
            )  # fmt: skip
            grad_q[..., i * rows : (i + 1) * rows, :] += dq
            grad_k[..., j * cols : (j + 1) * cols, :] += dk
            grad_v[..., j * cols : (j + 1) * cols, :] += dv
        if step < world_size - 1:
            block = comm.shift(block)()
        elif world_size > 1:  # the gradients of the next rank's block are complete: deliver
            grad_k, grad_v = comm.shift([grad_k, grad_v])()
    return grad_q, grad_k, grad_v


# --8<-- [end:ring_backward]


# --8<-- [start:RingAttention]
class RingAttention(torch.autograd.Function):
    """Autograd wrapper of the ring: saves this rank's q, k, v, output and log-sum-exp.

    ``out = RingAttention.apply(q, k, v, layout, causal, scale, comm)`` takes the arguments of
    `ring_attention_forward`; its backward pass is `ring_attention_backward`, which every rank
    of the group must run too.

    Shapes:
        - q, k, v: ``(batch, num_heads, seq_len / P, head_dim)``
        - returns: ``(batch, num_heads, seq_len / P, head_dim)``
    """

    @staticmethod
    def forward(q, k, v, layout, causal, scale, comm):  # noqa: D102
        return ring_attention_forward(q, k, v, layout, causal, scale, comm)

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: D102
        q, k, v, layout, causal, scale, comm = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = {"layout": layout, "causal": causal, "scale": scale, "comm": comm}
        ctx.mark_non_differentiable(lse)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        grads = ring_attention_backward(q, k, v, out, lse, grad_out, **ctx.options)
        return (*grads, None, None, None, None)


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    comm: RingComm | None = None,
) -> Tensor:
    """Ring attention of this rank's queries, differentiable; every rank calls it together.

    Args:
        q: This rank's queries.
        k: This rank's keys.
        v: This rank's values.
        layout: ``"contiguous"`` or ``"zigzag"``: how the sequence was split.
        causal: Causal attention over the whole sequence.
        scale: Factor of the dot products; default ``1 / sqrt(head_dim)``.
        comm: The ring, which counts bytes and times steps (a new one if None).

    Returns:
        This rank's part of the attention output.

    Shapes:
        - q, k, v: ``(batch, num_heads, seq_len / P, head_dim)``
        - returns: ``(batch, num_heads, seq_len / P, head_dim)``

    Raises:
        ValueError: If `layout` is unknown or q, k and v differ in shape.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not (q.dim() == 4 and q.shape == k.shape == v.shape):
        raise ValueError(
            f"q, k and v must have the same shape (batch, num_heads, seq_len / P, head_dim), "
            f"got {tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        )
    out, _ = RingAttention.apply(q, k, v, layout, causal, scale, comm or RingComm())
    return out


# --8<-- [end:RingAttention]


def ring_bytes_formula(block_bytes: int, world_size: int) -> dict[str, int]:
    """Bytes one rank sends in a forward and a backward pass of ring attention.

    Forward: its keys and values travel ``P - 1`` hops, so each rank sends ``2 (P - 1)`` blocks.
    Backward: keys, values and their two gradients travel ``P - 1`` hops, and the gradients one
    more to reach their owner: ``4 (P - 1) + 2`` blocks (none for ``P = 1``).

    Args:
        block_bytes: Bytes of one rank's keys (or values): batch · heads · seq_len / P ·
            head_dim · bytes per number.
        world_size: Number of ranks P.

    Returns:
        "forward" and "backward" bytes per rank.
    """
    hops = world_size - 1
    return {
        "forward": 2 * hops * block_bytes,
        "backward": (4 * hops + (2 if world_size > 1 else 0)) * block_bytes,
    }
