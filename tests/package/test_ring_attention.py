"""Ring attention equals single-process attention, forward and backward, on 2 and 4 processes.

Every case (plain and zig-zag split, causal or not) runs in one launch per world size, in
float64, against the book's naive attention and PyTorch's scaled_dot_product_attention; the
bytes each rank sends are compared with the formula. A few seconds for both launches.
"""

import os
import signal
import time

import pytest
import torch
import torch.nn.functional as F

from attention_book.distributed import WorkerError, run_workers
from attention_book.flash.reference import naive_attention
from attention_book.ring_attention import (
    RingComm,
    gather_sequence,
    merge_attention,
    ring_attention,
    ring_attention_forward,
    ring_bytes_formula,
    sequence_chunks,
    split_sequence,
)

CASES = [(layout, causal) for layout in ("contiguous", "zigzag") for causal in (False, True)]
BATCH, HEADS, SEQ_LEN, HEAD_DIM = 2, 3, 40, 8


def inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    shape = (BATCH, HEADS, SEQ_LEN, HEAD_DIM)
    return [torch.randn(shape, dtype=torch.float64, generator=generator) for _ in range(4)]


def every_case(q, k, v, grad_out):
    """One rank's outputs and gradients for every case, and the bytes it sent."""
    rank, world_size = RingComm().rank, RingComm().world_size
    results = {}
    for layout, causal in CASES:
        parts = [split_sequence(t, world_size, layout)[rank] for t in (q, k, v, grad_out)]
        q_r, k_r, v_r = (t.clone().requires_grad_() for t in parts[:3])
        comm = RingComm(timeout=20)
        out = ring_attention(q_r, k_r, v_r, layout=layout, causal=causal, comm=comm)
        forward_bytes = comm.bytes_sent
        out.backward(parts[3])
        results[layout, causal] = {
            "out": out.detach(), "grads": (q_r.grad, k_r.grad, v_r.grad),
            "bytes": (forward_bytes, comm.bytes_sent - forward_bytes),
        }  # fmt: skip
    return results


@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_attention_equals_single_process_attention(world_size):
    q, k, v, grad_out = inputs()
    ranks = run_workers(every_case, world_size, q, k, v, grad_out, timeout=60)
    block_bytes = BATCH * HEADS * (SEQ_LEN // world_size) * HEAD_DIM * 8
    formula = ring_bytes_formula(block_bytes, world_size)
    for layout, causal in CASES:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        expected = naive_attention(*leaves, causal=causal)
        expected_grads = torch.autograd.grad(expected, leaves, grad_out)
        sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = gather_sequence([r[layout, causal]["out"] for r in ranks], layout)
        assert (out - expected).abs().max() < 1e-12, (layout, causal)
        assert (out - sdpa).abs().max() < 1e-12, (layout, causal)
        for i, want in enumerate(expected_grads):
            got = gather_sequence([r[layout, causal]["grads"][i] for r in ranks], layout)
            assert (got - want).abs().max() < 1e-12, (layout, causal, "qkv"[i])
        sent = {r[layout, causal]["bytes"] for r in ranks}
        assert sent == {(formula["forward"], formula["backward"])}, (layout, causal)


def test_one_process_without_a_group_is_attention():
    q, k, v, _ = inputs(1)
    for layout, causal in CASES:
        out, lse = ring_attention_forward(q, k, v, layout, causal)
        expected, expected_lse = naive_attention(q, k, v, causal=causal, return_lse=True)
        assert torch.allclose(out, expected, atol=1e-12) and torch.allclose(lse, expected_lse)


def test_ring_bytes_formula_counts_blocks():
    assert ring_bytes_formula(100, 1) == {"forward": 0, "backward": 0}
    assert ring_bytes_formula(100, 2) == {"forward": 200, "backward": 600}
    assert ring_bytes_formula(100, 4) == {"forward": 600, "backward": 1400}


def test_merge_attention_of_two_halves_is_attention_over_all_keys():
    q, k, v, _ = inputs(2)
    left = naive_attention(q, k[..., :15, :], v[..., :15, :], return_lse=True)
    right = naive_attention(q, k[..., 15:, :], v[..., 15:, :], return_lse=True)
    out, lse = merge_attention(*left, *right)
    expected, expected_lse = naive_attention(q, k, v, return_lse=True)
    assert torch.allclose(out, expected, atol=1e-12) and torch.allclose(lse, expected_lse)


def test_merge_attention_keeps_rows_that_saw_no_key_at_zero():
    out, lse = torch.zeros(1, 1, 2, 4), torch.full((1, 1, 2), float("-inf"))
    block_out, block_lse = torch.ones(1, 1, 2, 4), torch.tensor([[[float("-inf"), 0.5]]])
    merged, merged_lse = merge_attention(out, lse, block_out * 0, block_lse)
    assert not merged.isnan().any() and merged_lse[0, 0, 0] == float("-inf")
    merged, _ = merge_attention(out, lse, block_out, block_lse)
    assert merged[0, 0, 1].tolist() == [1.0] * 4  # all weight on the only side that saw keys


def test_zigzag_gives_each_rank_an_early_and_a_late_chunk():
    assert [sequence_chunks("zigzag", r, 4) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert [sequence_chunks("contiguous", r, 4) for r in range(4)] == [(0,), (1,), (2,), (3,)]
    x = torch.arange(16.0).reshape(1, 1, 16, 1)
    parts = split_sequence(x, 4, "zigzag")
    assert parts[0].flatten().tolist() == [0.0, 1.0, 14.0, 15.0]
    assert torch.equal(gather_sequence(parts, "zigzag"), x)


@pytest.mark.parametrize(
    ("world_size", "layout", "message"),
    [
        (3, "contiguous", "world_size=3 with layout='contiguous' cuts the sequence into 3"),
        (4, "zigzag", "world_size=4 with layout='zigzag' cuts the sequence into 8"),
        (0, "contiguous", "world_size must be at least 1, got 0"),
        (2, "striped", "layout must be one of"),
    ],
)
def test_split_sequence_names_what_does_not_divide(world_size, layout, message):
    x = torch.zeros(1, 1, 20, 4)
    with pytest.raises(ValueError, match=message):
        split_sequence(x, world_size, layout)


def test_ring_attention_rejects_bad_layout_and_shapes():
    q = torch.zeros(1, 1, 8, 4)
    with pytest.raises(ValueError, match="layout must be one of"):
        ring_attention(q, q, q, layout="ring")
    with pytest.raises(ValueError, match=r"same shape.*\(1, 1, 8, 4\), \(1, 1, 6, 4\)"):
        ring_attention(q, q[..., :6, :], q)


class DyingComm(RingComm):
    """A ring whose rank 1 is killed by SIGKILL as it starts its second send."""

    def shift(self, tensors):
        if self.rank == 1 and self.bytes_sent > 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().shift(tensors)


def ring_with_a_dying_rank(q, k, v):
    world_size, rank = RingComm().world_size, RingComm().rank
    q, k, v = (split_sequence(t, world_size)[rank] for t in (q, k, v))
    return ring_attention(q, k, v, comm=DyingComm(timeout=60))


def test_a_rank_killed_mid_ring_is_reported_without_waiting_for_timeouts():
    q, k, v, _ = inputs()
    start = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1 of 4 was killed by SIGKILL"):
        run_workers(ring_with_a_dying_rank, 4, q, k, v, timeout=60)
    assert time.monotonic() - start < 15


def test_forward_memory_is_the_formula_of_the_chapter():
    # One process, no group: the accumulator and its log-sum-exp, one merge at its peak (the
    # tile's output and log-sum-exp, two weighted terms and their sum, the merged log-sum-exp
    # and its safe copy): 5 blocks and 4 log-sum-exps. Received blocks come on top with P > 1.
    # (The merge is the peak when a block holds more than a tile's 128 x 128 scores.)
    from attention_book.memory import measure_tensor_memory

    q, k, v = (torch.randn(1, 2, 1024, 64) for _ in range(3))
    _, peak, _ = measure_tensor_memory(ring_attention_forward, q, k, v)
    block, lse = q.nbytes, q.nbytes // q.shape[-1]
    assert peak == 5 * block + 4 * lse


def overlapped_or_not(q, k, v):
    """This rank's forward with and without overlapping the transfers, and the steps timed."""
    rank, world_size = RingComm().rank, RingComm().world_size
    parts = [split_sequence(t, world_size, "zigzag")[rank] for t in (q, k, v)]
    results = {}
    for overlap in (True, False):
        comm = RingComm(timeout=20)
        out, lse = ring_attention_forward(
            *parts, layout="zigzag", causal=True, comm=comm, overlap=overlap
        )
        results[overlap] = {"out": out, "lse": lse, "steps": comm.steps, "bytes": comm.bytes_sent}
    return results


def test_overlapping_the_transfers_changes_no_number_and_times_every_step():
    q, k, v, _ = inputs(seed=3)
    ranks = run_workers(overlapped_or_not, 2, q, k, v, timeout=60)
    for rank in ranks:
        assert torch.equal(rank[True]["out"], rank[False]["out"])
        assert torch.equal(rank[True]["lse"], rank[False]["lse"])
        for overlap in (True, False):
            steps = rank[overlap]["steps"]
            assert len(steps) == 2 and all(c >= 0 and w >= 0 for c, w in steps)
            assert steps[-1][1] == 0.0  # the last step passes nothing on and waits for nothing
            assert rank[overlap]["bytes"] == sum(t.nbytes for t in (q, k)) // 2  # one block
