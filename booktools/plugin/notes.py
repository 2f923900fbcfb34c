"""The note before a block that trains: what it trains, and how long that took.

Which blocks train is read from their code (`attention_book.experiments.runs_started_by`): a
runnable block that calls a function of ``attention_book.experiments`` that starts a cached run
gets the note, with the time the run took when the cache computed it (`compute_seconds`, noted
by `cached` on the machine that built the page). Copied into a fresh session without the
cache, such a block trains first; with the cache, it loads. The page shows the note right
before the block; the chapter's notebook shows it before the cell.
"""

from __future__ import annotations

import json

from attention_book.experiments import runs_started_by
from attention_book.store import COMPUTE_TIMES, cache_dir, compute_seconds
from booktools.markdown import Fence, rewrite


def duration(seconds: float) -> str:
    """A duration in words: ``4 min 10 s``, or ``7 s``."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _cpus(record: dict) -> str:
    return f"{record['cpus']} CPU cores" if record.get("cpus") else "its CPUs"


def run_time(name: str) -> str:
    """A cached run's name and how long it took, from `compute_seconds`.

    Args:
        name: The run's name, or a prefix ending in ``*`` for a group of runs.

    Returns:
        The Markdown that names it with its time, or says it was not timed here.
    """
    if name.endswith("*"):
        prefix = name[:-1]
        path = cache_dir() / COMPUTE_TIMES
        try:
            times = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            times = {}
        records = [record for run, record in times.items() if run.startswith(prefix)]
        shown = f"the `{prefix}…` runs it uses"
        if not records:
            return f"{shown} (not timed here: the machine that built this page had them cached)"
        low = min(record["seconds"] for record in records)
        high = max(record["seconds"] for record in records)
        span = duration(low) if low == high else f"{duration(low)} to {duration(high)}"
        return f"{shown} ({span} each on the machine that built this page, {_cpus(records[0])})"
    record = compute_seconds(name)
    if record is None:
        return f"`{name}` (not timed here: the machine that built this page had it cached)"
    return (
        f"`{name}` ({duration(record['seconds'])} on the machine that built this page, "
        f"{_cpus(record)})"
    )


def note_for(fence: Fence) -> str | None:
    """The note for one block, indented like it, or None if it is not a block that trains.

    Args:
        fence: A fence of a page.

    Returns:
        The note's line of Markdown, or None.
    """
    if not fence.runnable:
        return None
    try:
        runs = runs_started_by(fence.code)
    except SyntaxError:
        return None  # not Python after all: ruff's check of the blocks reports it
    if not runs:
        return None
    trains = " and ".join(run_time(name) for name in runs)
    return (
        f"{fence.indent}> **The first run trains.** In a fresh session without the book's "
        f"cache, this block first trains {trains}; after that it loads the result from the "
        "cache in seconds."
    )


def first_run_notes(markdown: str) -> str:
    """Put a note before each Python block that may train: what it trains, and for how long.

    Args:
        markdown: A page.

    Returns:
        The page with the notes, each right before its block.
    """

    def with_note(fence: Fence, lines: list[str]) -> list[str] | None:
        note = note_for(fence)
        return None if note is None else [note, "", *lines]

    return rewrite(markdown, with_note)
