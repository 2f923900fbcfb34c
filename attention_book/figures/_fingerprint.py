"""What a figure shows, as numbers and words: the fingerprint that keeps its ``VERSION`` honest.

The build keys a figure by what its module declares (`attention_book.figures.declaration`),
not by its source, so an edit that changes a drawing must bump the module's ``VERSION``. The
recorded fingerprints (``tests/recorded/figures.json``, ``make probes``) catch an edit that
did not: ``tests/experiments/test_figure_versions.py`` draws every recorded figure again and
compares what it shows now with what was recorded for the same version, as the probes do for
trained runs.

A figure's fingerprint holds, for each of its axes, its title and axis labels, every text on
it, and the data of every line, collection, image and patch (tensor checksums, compared within
a tolerance: `attention_book.experiments.probes.differences`); a Markdown fragment or a dict of
values is its text. Figures that read a trained result, or whose numbers change from one
drawing to the next (timings), are recorded with the reason they are not compared.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

#: A figure that takes longer than this to draw is left to its declared version (seconds).
SLOWEST = 2.0


def _array(values: Any) -> Any:
    from attention_book.experiments.probes import fingerprint as checksum

    array = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)
    return checksum(torch.from_numpy(np.nan_to_num(array, nan=-7.0)))


def fingerprint(result: Any) -> Any:
    """What a drawn figure (or a fragment, or values) shows, as JSON values.

    Args:
        result: What a figure function returned: a matplotlib Figure, `Frames`, a Markdown
            string or a dict of values.

    Returns:
        Its texts and the checksums of its data, for `probes.differences`.
    """
    from attention_book.figures import Frames

    if isinstance(result, Frames):
        return {"labels": result.labels, "frames": [fingerprint(f) for f in result.figures]}
    if not isinstance(result, Figure):
        return result
    axes = []
    for ax in result.axes:
        axes.append({
            "title": ax.get_title(),
            "labels": [ax.get_xlabel(), ax.get_ylabel()],
            "texts": [text.get_text() for text in ax.texts],
            "lines": [_array(line.get_xydata()) for line in ax.get_lines()],
            "collections": [
                _array(np.concatenate([np.ravel(c.get_offsets()), np.ravel(c.get_array())])
                       if c.get_array() is not None else np.ravel(c.get_offsets()))
                for c in ax.collections
            ],
            "images": [_array(image.get_array()) for image in ax.images],
            "patches": _array([p.get_extents().bounds for p in ax.patches] or [[0.0]]),
        })  # fmt: skip
    return {"axes": axes, "texts": [text.get_text() for text in result.texts]}


def _drawn(name: str, results_dir: Path | None) -> tuple[Any, float, list[str]]:
    """A figure's fingerprint, the CPU seconds it took to draw, and what it read of the store.

    Run in a fresh process for each figure, so that nothing another figure computed (and a
    module keeps for the process) hides what this one reads.
    """
    from attention_book import store
    from attention_book.figures import draw

    start = time.process_time()
    drawn = json.loads(json.dumps(fingerprint(draw(name, results_dir))))
    return drawn, time.process_time() - start, sorted(set(store.READ))


def fingerprints(names: list[str], results_dir: Path | None) -> dict[str, Any]:
    """Record what these figures show, each with its module's version, or why it is not.

    Each figure that reads no trained run is drawn twice, each time in a fresh process (what a
    module measures once per process is measured again); one that reads the result store (a
    measurement kept there, on this machine's arithmetic) is recorded as reading it, one whose
    fingerprint changes between the two drawings (a timing) as varying, one slower than
    `SLOWEST` as slow.

    Args:
        names: Figure names.
        results_dir: The benchmark results, for the figures that show them.

    Returns:
        ``{name: {"module", "version", "fingerprint"} or {"module", "version", "unchecked"}}``.
    """
    import importlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from attention_book.experiments.probes import differences
    from attention_book.figures import declaration, figure_functions

    functions = figure_functions()
    found, candidates = {}, []
    for name in names:
        module = functions[name].__module__
        found[name] = {"module": module, "version": importlib.import_module(module).VERSION}
        if declaration(module)["runs"]:
            found[name]["unchecked"] = "reads trained runs (their keys are declared)"
        else:
            candidates.append(name)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=context, max_tasks_per_child=1) as pool:
        drawings = list(pool.map(_drawn, candidates * 2, [results_dir] * 2 * len(candidates)))
    for number, name in enumerate(candidates):
        (drawn, seconds, read), (again, _, _) = drawings[number], drawings[number + len(candidates)]
        if read:
            found[name]["unchecked"] = f"reads {', '.join(read)} from the result store"
        elif differences(drawn, again):
            found[name]["unchecked"] = "its numbers change from one drawing to the next"
        elif seconds > SLOWEST:
            found[name]["unchecked"] = f"slow to draw ({seconds:.0f} s)"
        else:
            found[name]["fingerprint"] = drawn
    return found


def version_problems(recorded: dict[str, Any]) -> list[str]:
    """Figures missing from the record, or recorded for a version their module no longer has.

    Args:
        recorded: The recorded fingerprints (`fingerprints`).

    Returns:
        One line per problem, saying what to run; empty when the record is complete.
    """
    import importlib

    from attention_book.figures import figure_functions

    functions = figure_functions()
    problems = [f"{name}: recorded, but no figure has this name" for name in recorded
                if name not in functions]  # fmt: skip
    for name, function in functions.items():
        version = importlib.import_module(function.__module__).VERSION
        if name not in recorded:
            problems.append(f"{name}: no fingerprint recorded (run `make probes`)")
        elif recorded[name]["version"] != version:
            problems.append(
                f"{name}: recorded for VERSION {recorded[name]['version']} of "
                f"{function.__module__}, which is {version} now (run `make probes`)"
            )
    return problems


def drawing_problems(name: str, entry: dict[str, Any], results_dir: Path | None) -> list[str]:
    """What a figure shows now that differs from its recorded fingerprint.

    Args:
        name: The figure.
        entry: Its record (with a ``fingerprint``).
        results_dir: The benchmark results, for the figures that show them.

    Returns:
        One line per difference, the first saying what to do; empty when they agree.
    """
    from attention_book.experiments.probes import differences
    from attention_book.figures import draw

    now = json.loads(json.dumps(fingerprint(draw(name, results_dir))))
    found = differences(entry["fingerprint"], now)
    if not found:
        return []
    return [
        f"{name} shows something else than was recorded for VERSION {entry['version']} of "
        f"{entry['module']}: if the change is meant, bump that VERSION (the build keys the "
        "figure by it) and record again with `make probes`",
        *found[:10],
    ]
