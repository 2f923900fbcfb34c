"""The launcher of worker processes: results in rank order, and every failure reported in time.

Each test starts real processes (fork, gloo over loopback); together they take a few seconds.
"""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from attention_book.distributed import WorkerError, free_port, run_workers


def rank_and_sum(offset):
    """Every rank contributes rank + offset; all-reduce checks the group is really joined."""
    value = torch.tensor([float(dist.get_rank() + offset)])
    dist.all_reduce(value)
    return dist.get_rank(), dist.get_world_size(), value.item(), torch.get_num_threads()


def raise_on_rank_one():
    if dist.get_rank() == 1:
        raise ArithmeticError("rank one failed on purpose")
    return dist.get_rank()


def kill_rank_one_mid_ring():
    """Rank 1 dies from SIGKILL after the first send; rank 0 then waits on a receive."""
    rank = dist.get_rank()
    block = torch.full((4,), float(rank))
    dist.send(block, 1 - rank) if rank == 0 else dist.recv(block, 0)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.recv(block, 1)  # never arrives: the launcher must not wait for the group timeout
    return rank


def sleep_forever():
    time.sleep(600)


def test_results_come_back_in_rank_order_from_a_joined_group():
    results = run_workers(rank_and_sum, 3, 10)
    assert [r[:2] for r in results] == [(0, 3), (1, 3), (2, 3)]
    assert {r[2] for r in results} == {10 + 11 + 12}
    assert {r[3] for r in results} == {1}  # one PyTorch thread per process by default


def test_a_worker_that_raises_is_reported_with_its_traceback():
    with pytest.raises(WorkerError, match=r"worker 1 of 2 raised:(.|\n)*rank one failed"):
        run_workers(raise_on_rank_one, 2, timeout=30)


def test_a_worker_killed_mid_ring_is_reported_within_seconds_and_nothing_hangs():
    start = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1 of 2 was killed by SIGKILL before it reported"):
        run_workers(kill_rank_one_mid_ring, 2, timeout=60)
    assert time.monotonic() - start < 15  # not the 60 s of the group's timeout
    assert not [c for c in __import__("multiprocessing").active_children() if c.is_alive()]


def test_a_run_past_its_timeout_fails_and_its_workers_are_gone():
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"workers \[0, 1\] of 2 did not report within timeout"):
        run_workers(sleep_forever, 2, timeout=2)
    assert time.monotonic() - start < 15
    assert not [c for c in __import__("multiprocessing").active_children() if c.is_alive()]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "world_size=0"),
        ({"world_size": 2, "threads": 0}, "threads=0"),
        ({"world_size": 2, "timeout": 0}, "timeout=0"),
    ],
)
def test_bad_arguments_fail_before_any_process_starts(kwargs, message):
    world_size = kwargs.pop("world_size")
    with pytest.raises(ValueError, match=message):
        run_workers(rank_and_sum, world_size, 0, **kwargs)


def test_free_port_is_a_port_of_loopback_nobody_holds():
    port = free_port()
    assert 0 < port < 65536
