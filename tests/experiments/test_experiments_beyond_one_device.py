"""The chapter's measurements that need no process and no trained model: counted work, workload."""

import pytest

from attention_book.experiments.beyond_one_device import (
    WORKLOAD_MAX_NEW,
    WORKLOAD_REQUESTS,
    beyond_causal_pairs,
    beyond_workload,
)


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_causal_pairs_add_up_to_the_lower_triangle(layout, world_size):
    seq_len = 64
    pairs = beyond_causal_pairs(layout, world_size, seq_len)
    assert sum(map(sum, pairs)) == seq_len * (seq_len + 1) // 2


def test_zigzag_gives_every_rank_the_same_work_at_every_step():
    pairs = beyond_causal_pairs("zigzag", 4, 64)
    assert len({tuple(rank) for rank in pairs}) == 1  # every rank alike
    assert len(set(pairs[0][1:])) == 1  # every step after the first alike


def test_contiguous_split_waits_for_the_last_rank():
    world_size, seq_len = 4, 1024
    pairs = beyond_causal_pairs("contiguous", world_size, seq_len)
    critical = sum(max(column) for column in zip(*pairs, strict=True))
    mean = sum(map(sum, pairs)) / world_size
    assert abs(critical / mean - (2 - 1 / world_size)) < 0.01  # 2 - 1/P for long sequences
    assert pairs[0][1:] == [0] * (world_size - 1)  # rank 0 idles after its first step


def test_workload_has_prompts_of_many_lengths():
    requests = beyond_workload()
    assert len(requests) == WORKLOAD_REQUESTS
    assert {r.max_new_tokens for r in requests} == {WORKLOAD_MAX_NEW}
    lengths = sorted(len(r.prompt) for r in requests)
    assert lengths[0] >= 1 and lengths[-1] > 10 * lengths[0]


def test_the_overlap_times_a_warm_step_without_counting_memory(monkeypatch):
    """Issue 41: the step was read from the memory-counted passes, several times too slow."""
    from attention_book.experiments import beyond_one_device

    calls = []

    def ring(world_size, shape, dtype, layout, causal, memory, warm_up=False):
        calls.append({"layout": layout, "causal": causal, "memory": memory, "warm_up": warm_up})
        return [{"steps": [(0.004, 0.0)] * world_size}] * world_size

    def costs():
        raise AssertionError("the overlap must not read the memory-counted passes")

    monkeypatch.setattr(beyond_one_device, "_run_ring", ring)
    monkeypatch.setattr(beyond_one_device, "beyond_ring_costs", costs)
    monkeypatch.setattr(beyond_one_device, "run_workers", lambda *args, **kw: [[0.001]] * 4)
    overlap = beyond_one_device.beyond_ring_overlap.__wrapped__(4, 9)
    assert calls == [{"layout": "contiguous", "causal": False, "memory": False, "warm_up": True}]
    assert overlap == pytest.approx({"step_seconds": 0.004, "hop_seconds": 0.001, "hidden": 0.2})
