"""Running one function on several processes of a `torch.distributed` group, on one machine.

`run_workers` starts ``world_size`` processes, joins them into a process group with the
``gloo`` backend (PyTorch's CPU backend: tensors travel over TCP, here over the loopback
interface), runs the same function in each, and returns what each one returned, in rank order.
It is how the book runs ring attention on a machine without GPUs, and how its tests do.

Three things make it safe to call from a test, a page or a notebook:

- **Every wait has a deadline.** The group is created with a timeout, which bounds every
  collective and point-to-point wait inside a worker, and the parent gives up after `timeout`
  seconds with a `WorkerError`.
- **A dead worker is reported, not waited for.** The parent watches the processes while it
  waits for their results: one that exits (killed by a signal, or by an exception) before it
  reported makes the parent raise at once, naming its rank and how it ended.
- **Nothing outlives the call.** Whatever happens, the workers still running are terminated
  (then killed) before `run_workers` returns or raises.

A worker's result travels back pickled (tensors included, copied), so it may be any picklable
object. With the ``fork`` start method (the default where the platform has it) the worker
function and its arguments are inherited, so any function works; with ``spawn`` they must be
picklable, which a function defined at the top level of a module is.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["WorkerError", "free_port", "run_workers"]

POLL_SECONDS = 0.02  # how often the parent looks at its workers while it waits


class WorkerError(RuntimeError):
    """A worker raised, died or did not answer in time; the message says which and how."""


def free_port() -> int:
    """A TCP port of the loopback interface that is free now (the system picks it).

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --8<-- [start:run_workers]
def run_workers(
    worker: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 60.0,
    start_method: str | None = None,
    threads: int = 1,
) -> list[Any]:
    """Run ``worker(*args)`` in `world_size` processes of a gloo group; return their results.

    Inside the worker, ``torch.distributed`` is initialized: ``dist.get_rank()`` and
    ``dist.get_world_size()`` say who it is, and sends, receives and collectives work. Each
    process runs PyTorch on `threads` threads.

    Args:
        worker: The function every process runs.
        world_size: Number of processes (at least 1).
        *args: Arguments passed to `worker` in every process.
        timeout: Seconds the whole run may take; also the timeout of the group, which bounds
            every wait inside the workers.
        start_method: ``"fork"`` (the default where available: fast to start) or ``"spawn"``.
        threads: PyTorch threads per process.

    Returns:
        What each rank's `worker` returned, in rank order.

    Raises:
        ValueError: If `world_size` or `threads` is below 1, or `timeout` is not positive.
        WorkerError: If a worker raised (its traceback is in the message), died before it
            reported (its exit code or signal is in the message), or the run took longer
            than `timeout`.
    """
    if world_size < 1 or threads < 1 or timeout <= 0:
        raise ValueError(
            f"world_size and threads must be at least 1 and timeout positive, got "
            f"world_size={world_size}, threads={threads}, timeout={timeout}"
        )
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context(
        start_method or ("fork" if "fork" in methods else "spawn")
    )
    results: queue.Queue = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_process_main,
            args=(worker, args, rank, world_size, port, timeout, threads, results),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    try:
        for process in processes:
            process.start()
        return _collect(processes, results, timeout)
    finally:  # whatever happened: no process outlives the call
        _tear_down(processes)
        results.close()


# --8<-- [end:run_workers]


def _process_main(
    worker: Callable[..., Any],
    args: tuple,
    rank: int,
    world_size: int,
    port: int,
    timeout: float,
    threads: int,
    results: queue.Queue,
) -> None:
    """One worker process: join the group, run `worker`, report its result or its error."""
    try:
        torch.set_num_threads(threads)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        outcome = (rank, True, pickle.dumps(worker(*args)))
    except BaseException:  # reported to the parent, which raises it
        outcome = (rank, False, traceback.format_exc())
    results.put(outcome)
    # The result is in the queue; the group is not torn down collectively (a peer may be
    # gone), the process simply ends and the parent reaps it.


def _collect(processes: list, results: queue.Queue, timeout: float) -> list[Any]:
    """Wait for every rank's result while watching for workers that died first."""
    world_size, received = len(processes), {}
    deadline = time.monotonic() + timeout
    while len(received) < world_size:
        try:
            rank, ok, payload = results.get(timeout=POLL_SECONDS)
        except queue.Empty:
            dead = _dead_worker(processes, received, results)
            if dead is not None:
                raise WorkerError(dead) from None
            if time.monotonic() > deadline:
                missing = sorted(set(range(world_size)) - received.keys())
                raise WorkerError(
                    f"workers {missing} of {world_size} did not report within timeout={timeout} s"
                ) from None
            continue
        if not ok:
            # A peer that died makes the others fail on their next transfer: name the dead
            # one first, it is the cause.
            time.sleep(5 * POLL_SECONDS)
            dead = _dead_worker(processes, {**received, rank: None}, None, only_failed=True)
            error = f"worker {rank} of {world_size} raised:\n{payload}"
            if dead is not None:
                last_line = payload.strip().splitlines()[-1]
                error = f"{dead}; then worker {rank} raised {last_line}"
            raise WorkerError(error)
        received[rank] = pickle.loads(payload)
    return [received[rank] for rank in range(world_size)]


def _dead_worker(
    processes: list, received: dict, results: queue.Queue | None, only_failed: bool = False
) -> str | None:
    """Describe a worker that exited before it reported, or None if there is none.

    With `only_failed`, a worker that exited normally (its result may still be queued) is not
    counted: only a signal or a nonzero exit code.
    """
    for rank, process in enumerate(processes):
        code = process.exitcode
        if rank in received or code is None or (only_failed and code == 0):
            continue
        if results is not None:
            time.sleep(POLL_SECONDS)  # a result put just before exiting may still be in flight
            if not results.empty():
                return None
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited ({code})"
        return (
            f"worker {rank} of {len(processes)} {how} before it reported a result "
            f"(process {process.pid})"
        )
    return None


def _tear_down(processes: list) -> None:
    """Terminate the workers still running, kill those that do not stop, reap them all."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is None:  # never started
            continue
        process.join(timeout=2)
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
            process.join(timeout=2)
