"""Timing and threads: how the book's experiments run and time their computations on a CPU.

The book's models are small: their matrix products gain little from a second thread, and on a
shared machine threads that wait for each other lose much more. So the experiments train and
time on one thread (`torch_threads`), and a timing takes the fastest or the median of several
repeats (`best_seconds`, `median_seconds`), by the wall clock or by the CPU time of the calling
thread (`time.thread_time`), which the other processes of a loaded machine do not inflate.
Computations that a page compares are timed in turns (`interleaved_seconds`), every repeat
kept: a comparison gives the median and the range of each (`spread`), and two whose ranges
overlap are within noise of each other (`apart`).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch

__all__ = [
    "apart",
    "best_seconds",
    "interleaved_seconds",
    "median_seconds",
    "spread",
    "torch_threads",
]


@contextlib.contextmanager
def torch_threads(num_threads: int = 1) -> Iterator[None]:
    """Run the block with PyTorch on `num_threads` threads, and restore the count after.

    Args:
        num_threads: Threads for PyTorch's operators inside the block.

    Raises:
        ValueError: If `num_threads` is less than 1.

    Example:
        >>> with torch_threads(1):  # doctest: +SKIP
        ...     history = fit(model, loader, loss_fn, num_epochs=3)
    """
    if num_threads < 1:
        raise ValueError(f"num_threads must be at least 1, got {num_threads}")
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def best_seconds(
    compute: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The shortest of `repeats` runs of ``compute()``: the least disturbed one.

    Args:
        compute: What to time, called without arguments.
        repeats: How many times to run it (at least 1).
        clock: ``time.perf_counter`` (wall clock) or ``time.thread_time`` (CPU time of this
            thread).

    Returns:
        Seconds.

    Raises:
        ValueError: If `repeats` is less than 1.
    """
    return min(_seconds(compute, repeats, clock))


def median_seconds(
    compute: Callable[[], object],
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
    *,
    warm_up: bool = True,
    min_seconds: float = 0.0,
) -> float:
    """The median time of `repeats` runs of ``compute()``, after one untimed run.

    The untimed first run pays for what happens once (allocations, a kernel's first call).
    Work that takes a fraction of a millisecond is timed in a loop: each timed run calls
    ``compute()`` as many times as the first run says fill `min_seconds`, and counts the time
    per call, so that the clock's resolution and the machine's jitter weigh little.

    Args:
        compute: What to time, called without arguments.
        repeats: How many timed runs (at least 1).
        clock: ``time.perf_counter`` (wall clock) or ``time.thread_time`` (CPU time of this
            thread).
        warm_up: Run ``compute()`` once before timing.
        min_seconds: The least time of one timed run; 0 times single calls.

    Returns:
        Seconds per call.

    Raises:
        ValueError: If `repeats` is less than 1 or `min_seconds` is negative.
    """
    if warm_up and min_seconds >= 0:  # a bad min_seconds fails before any work
        compute()
    calls = _calls_to_fill(compute, min_seconds, clock)
    if calls == 1:
        return statistics.median(_seconds(compute, repeats, clock))
    return statistics.median(_seconds(_loop(compute, calls), repeats, clock)) / calls


def _calls_to_fill(
    compute: Callable[[], object], min_seconds: float, clock: Callable[[], float]
) -> int:
    """How many calls of `compute` fill `min_seconds`, read off one timed call (1 for 0)."""
    if min_seconds < 0:
        raise ValueError(f"min_seconds must be at least 0, got {min_seconds}")
    if min_seconds == 0:
        return 1
    start = clock()
    compute()
    return max(1, math.ceil(min_seconds / max(clock() - start, 1e-9)))


def _loop(compute: Callable[[], object], calls: int) -> Callable[[], None]:
    """`compute` called `calls` times in a row."""

    def loop() -> None:
        for _ in range(calls):
            compute()

    return loop


def _seconds(compute: Callable[[], object], repeats: int, clock: Callable[[], float]) -> list:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times = []
    for _ in range(repeats):
        start = clock()
        compute()
        times.append(clock() - start)
    return times


def interleaved_seconds(
    computations: Mapping[str, Callable[[], object]],
    repeats: int,
    clock: Callable[[], float] = time.thread_time,
    *,
    warm_up: bool = True,
    min_seconds: float = 0.0,
) -> dict[str, list[float]]:
    """Time several computations in turns (A, B, A, B, ...), after one untimed run of each.

    Taking turns spreads whatever disturbs the machine (another process, a frequency change)
    over all of them alike, where timing A's repeats and then B's would give it to one. The
    result keeps every repeat, so that a comparison can show its spread (`spread`) and say
    when two are within noise (`apart`). Work that takes a fraction of a millisecond is timed
    in a loop, as `median_seconds` times it: each run calls it as many times as one call says
    fill `min_seconds`, and counts the time per call.

    Args:
        computations: What to time, by name, each called without arguments.
        repeats: Timed runs of each (at least 1).
        clock: ``time.thread_time`` (CPU time of this thread: the work, which other
            processes do not inflate) or ``time.perf_counter`` (wall clock: the waiting).
        warm_up: Run each once, in the same order, before timing.
        min_seconds: The least time of one timed run; 0 times single calls.

    Returns:
        ``{name: [seconds per call of each repeat]}``, in the order of `computations`.

    Raises:
        ValueError: If `repeats` is less than 1, `min_seconds` is negative or `computations`
            is empty.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if not computations:
        raise ValueError("computations must name at least one computation, got none")
    if warm_up:
        for compute in computations.values():
            compute()
    calls = {name: _calls_to_fill(c, min_seconds, clock) for name, c in computations.items()}
    runs = {name: _loop(compute, calls[name]) for name, compute in computations.items()}
    times: dict[str, list[float]] = {name: [] for name in computations}
    for _ in range(repeats):
        for name, run in runs.items():
            start = clock()
            run()
            times[name].append((clock() - start) / calls[name])
    return times


def spread(samples: Sequence[float]) -> tuple[float, float, float]:
    """The median of repeated timings and their range.

    Args:
        samples: The seconds of each repeat.

    Returns:
        ``(median, lowest, highest)``.

    Raises:
        ValueError: If `samples` is empty.
    """
    if not samples:
        raise ValueError("samples must hold at least one timing, got none")
    return statistics.median(samples), min(samples), max(samples)


def apart(first: Sequence[float], second: Sequence[float]) -> int:
    """Whether two sets of timings are apart: every one of one below every one of the other.

    The book's rule for a timing comparison: two computations whose ranges overlap are
    "within noise" of each other, whatever their medians say.

    Args:
        first: The seconds of each repeat of one computation.
        second: Those of the other.

    Returns:
        -1 if `first` is faster in every repeat than `second` in any, 1 if slower, 0 if their
        ranges overlap (within noise).

    Raises:
        ValueError: If either is empty.
    """
    if not first or not second:
        raise ValueError("apart needs at least one timing of each")
    if max(first) < min(second):
        return -1
    if min(first) > max(second):
        return 1
    return 0
