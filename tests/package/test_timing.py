"""Timings as distributions (attention_book.timing): in turns, every repeat kept, ranges read."""

from __future__ import annotations

import itertools

import pytest

from attention_book.timing import apart, interleaved_seconds, spread


def test_computations_are_timed_in_turns_after_one_warm_up_each():
    calls = []
    clock = itertools.count().__next__  # each reading one "second" after the last
    computations = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = interleaved_seconds(computations, repeats=3, clock=clock)
    assert calls == ["a", "b"] + ["a", "b"] * 3  # the warm-up, then A, B, A, B, ...
    assert times == {"a": [1, 1, 1], "b": [1, 1, 1]}
    calls.clear()
    interleaved_seconds(computations, repeats=2, clock=clock, warm_up=False)
    assert calls == ["a", "b", "a", "b"]


def test_bad_requests_are_refused_by_name():
    with pytest.raises(ValueError, match="repeats must be at least 1, got 0"):
        interleaved_seconds({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError, match="computations must name at least one"):
        interleaved_seconds({}, repeats=3)
    with pytest.raises(ValueError, match="samples must hold at least one timing"):
        spread([])
    with pytest.raises(ValueError, match="apart needs at least one timing of each"):
        apart([], [1.0])


def test_spread_is_the_median_and_the_range():
    assert spread([3.0, 1.0, 2.0, 10.0, 2.5]) == (2.5, 1.0, 10.0)


def test_two_timings_are_apart_only_when_their_ranges_do_not_overlap():
    assert apart([1.0, 1.2], [1.3, 1.5]) == -1  # faster in every repeat
    assert apart([1.3, 1.5], [1.0, 1.2]) == 1
    assert apart([1.0, 1.4], [1.3, 1.5]) == 0  # the medians differ, the ranges overlap
    assert apart([1.0], [1.0]) == 0


def test_quick_work_taken_in_turns_is_timed_in_a_loop_long_enough_for_the_clock():
    ticks = iter(range(10_000))

    def clock() -> float:  # each reading a millisecond after the last: a call takes 1 ms
        return next(ticks) * 1e-3

    done = []
    times = interleaved_seconds(
        {"a": lambda: done.append(1)}, repeats=2, clock=clock, min_seconds=0.02
    )
    calls = (len(done) - 2) // 2  # after the warm-up and the call that sizes the loop
    assert calls == 20  # 20 calls of a millisecond fill 0.02 s
    assert len(done) == 2 + 2 * 20
    assert times == {"a": [1e-3 / 20, 1e-3 / 20]}  # counted per call
    with pytest.raises(ValueError, match="min_seconds must be at least 0, got -1"):
        interleaved_seconds({"a": lambda: None}, repeats=1, min_seconds=-1)
