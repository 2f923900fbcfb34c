"""The referee's yardstick: how far each headline number moves with the machine and the seed.

A training run on another CPU rounds differently, and a rounding difference in step one grows
into another end point: the same code gives test BLEU a point or more apart on two machines.
So a headline number is not one value but a spread, measured by training every declared run
again under other arithmetic and other seeds (``make crossmachine RECORD=1``, see
`booktools.checks.crossmachine`):

- the arithmetic: PyTorch's vector kernels (``ATEN_CPU_CAPABILITY``), MKL's code path
  (``MKL_CBWR``) and oneDNN's instructions (``ONEDNN_MAX_CPU_ISA``) held to AVX2, or to the
  plainest code each has, emulate the CPUs most readers have on any machine;
- the seed: every training's seed shifted by 1 to 4 (`attention_book.store.seed_offset`),
  under the AVX2 arithmetic: with seed 0 under AVX2, five independent trainings, which a
  comparison reads apart from the rounding (`seed_pairs`, `rounding_values`, and the words of
  `seed_comparison`).

``tests/recorded/headlines.json`` keeps each variant's numbers. The rule that turns them into
a tolerance (`allowed_range`): a fresh number may fall anywhere between the smallest and the
largest recorded value, widened on each side by half that range (and by at least the run's
declared ``tolerance``, its smallest meaningful step). Five variants underestimate the true
spread; half again is the margin for that. The referee (`check_headlines`, run by the build)
holds every stored result to it, and says by how much a number left it.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from attention_book.experiments.probes import declared_runs
from attention_book.store import Run, is_cached

__all__ = [
    "HEADLINES",
    "SEED_SETTING",
    "allowed_range",
    "check_headlines",
    "cpu_capability",
    "headline_numbers",
    "record_headlines",
    "recorded_pairs",
    "recorded_values",
    "rounding_values",
    "seed_comparison",
    "seed_of",
    "seed_pairs",
    "train",
]

#: The recorded spreads, in the repository (``make crossmachine RECORD=1`` writes them).
HEADLINES = Path(__file__).resolve().parents[2] / "tests" / "recorded" / "headlines.json"


def cpu_capability() -> str:
    """The vector instructions PyTorch's CPU kernels use here: "AVX512", "AVX2", "DEFAULT"...

    Returns:
        ``torch.backends.cpu.get_cpu_capability()``.
    """
    return torch.backends.cpu.get_cpu_capability()


def headline_numbers(runs: list[Run], *, train: bool = False) -> dict[str, dict[str, float]]:
    """The headline numbers of the full results, for the runs that declare some.

    Args:
        runs: The runs.
        train: Compute the results that are not in the store; by default they are skipped.

    Returns:
        ``{name: {label: number}}``.
    """
    found = {}
    for run in runs:
        if run.headline is None:
            continue
        if not train and ((key := run.key()) is None or not is_cached(run.name, key)):
            continue
        found[run.name] = {label: float(v) for label, v in run.headline(run.result()).items()}
    return found


def allowed_range(values: list[float], tolerance: float) -> tuple[float, float]:
    """Where a fresh number may fall, given its recorded variants: the referee's rule.

    Args:
        values: The number in each recorded variant (arithmetic and seed).
        tolerance: The least margin on each side (the run's smallest meaningful step).

    Returns:
        ``(low, high)``: the recorded range, widened on each side by half its width, or by
        `tolerance` where that is more.

    Raises:
        ValueError: If `values` is empty or `tolerance` is negative.
    """
    if not values:
        raise ValueError("values must hold at least one recorded number, got none")
    if tolerance < 0:
        raise ValueError(f"tolerance must be at least 0, got {tolerance}")
    low, high = min(values), max(values)
    margin = max((high - low) / 2, tolerance)
    return low - margin, high + margin


def check_headlines(
    recorded: Mapping[str, Any], runs: list[Run], now: Mapping[str, Mapping[str, float]]
) -> list[str]:
    """The referee: compare fresh headline numbers with their recorded spread.

    Args:
        recorded: The recorded file's content (`record_headlines` wrote it).
        runs: The declared runs.
        now: The fresh numbers, ``{name: {label: number}}`` (`headline_numbers`).

    Returns:
        One message per number outside its `allowed_range`, or per run whose version has no
        recorded numbers, each saying by how much and what to do; empty if all agree.
    """
    problems = []
    for name, numbers in now.items():
        run = next((r for r in runs if r.name == name), None)
        if run is None:
            problems.append(f"{name}: not a declared run (its numbers come from older code)")
            continue
        theirs = recorded.get(name)
        if theirs is None or theirs.get("version") != run.version:
            problems.append(
                f"{name}: no headline numbers recorded for {run.version_name} {run.version}: "
                "train it under the other arithmetic and seeds and record their spread (make "
                "crossmachine RECORD=1), then check the chapter's prose against it"
            )
            continue
        variants = theirs["variants"]
        for label, value in numbers.items():
            values = [v["numbers"][label] for v in variants.values() if label in v["numbers"]]
            if not values:
                problems.append(
                    f"{name}: {label} has no recorded value (make crossmachine RECORD=1)"
                )
                continue
            low, high = allowed_range(values, run.tolerance)
            if low <= value <= high:
                continue
            edge, side = (low, "below") if value < low else (high, "above")
            problems.append(
                f"{name}: {label} is {value:.4g}, {abs(value - edge):.3g} {side} what it may be "
                f"({low:.4g} to {high:.4g}: the {len(values)} recorded variants span "
                f"{min(values):.4g} to {max(values):.4g}, widened by half that range, at least "
                f"±{run.tolerance:g}; here {cpu_capability()} kernels, recorded on "
                f"{theirs.get('recorded_on', 'another machine')}).\n  {_advice(run)}"
            )
    return problems


def _advice(run: Run) -> str:
    return (
        f"If you changed what {run.name} computes, bump {run.version_name} in "
        f"{run.module or 'its module'}, re-record its probe (make probes) and its spread (make "
        "crossmachine RECORD=1), and read the chapter's sentences against the new numbers. If "
        "you changed nothing it computes, this machine trains it to a number the recorded "
        "arithmetic and seeds never reached: run make crossmachine here, and add this "
        "machine's numbers as a variant (make crossmachine RECORD=1 keeps the recorded ones) "
        "once the chapter's verdicts hold for them."
    )


#: The arithmetic under which the recorded seeds are independent trainings: ``"avx2"`` is seed 0,
#: ``"avx2 seed+N"`` seed N. The other variants (``"native ..."``, ``"default"``) are seed 0 under
#: other rounding: the same training, rounded differently, not another draw.
SEED_SETTING = "avx2"


def seed_of(variant: str) -> int | None:
    """The seed of a recorded variant that is an independent training, or None for rounding.

    Args:
        variant: A recorded variant's name (``"avx2 seed+3"``, ``"native AVX512"``).

    Returns:
        The seed offset (0 for ``"avx2"``), or None for a variant of other arithmetic.
    """
    setting, _, seed = variant.partition(" ")
    if setting != SEED_SETTING:
        return None
    if not seed:
        return 0
    return int(seed[5:]) if seed.startswith("seed+") and seed[5:].isdigit() else None


def seed_pairs(first: tuple[str, str], second: tuple[str, str]) -> list[tuple[float, float]]:
    """Two recorded numbers side by side in every independent seed that recorded both.

    Args:
        first: (run name, label) of the first number.
        second: (run name, label) of the second.

    Returns:
        One (first, second) pair per seed, in the order of the seeds.
    """
    a, b = recorded_values(first[0]), recorded_values(second[0])
    seeds = sorted(
        (seed, variant)
        for variant in a
        if (seed := seed_of(variant)) is not None
        and variant in b
        and first[1] in a[variant]
        and second[1] in b[variant]
    )
    return [(a[variant][first[1]], b[variant][second[1]]) for _, variant in seeds]


def rounding_values(name: str, label: str) -> dict[str, float]:
    """One number of seed 0 in every recorded arithmetic: how far rounding alone moves it.

    Args:
        name: The run.
        label: The headline number.

    Returns:
        ``{variant: number}`` for seed 0 under each arithmetic (``"avx2"`` included).
    """
    found = {}
    for variant, numbers in recorded_values(name).items():
        setting, _, seed = variant.partition(" ")
        zero = seed_of(variant) == 0 or (setting in ("native", "default") and "seed+" not in seed)
        if zero and label in numbers:
            found[variant] = numbers[label]
    return found


def seed_comparison(pairs: Sequence[tuple[float, float]]) -> tuple[int, str]:
    """The book's words for a comparison of two configurations over independent seeds.

    The rule, stated on the notation page: the first is ahead (or behind) "in every seed" when
    every seed's difference has the same sign; "on average, not in every seed" when the signs
    differ but the mean difference is more than twice its standard error (the differences'
    standard deviation over the square root of their number); otherwise "the seeds cannot
    tell them apart".

    Args:
        pairs: (first, second) in each seed.

    Returns:
        (1 if the first is ahead, -1 if behind, 0 if the seeds cannot tell), and the words.

    Raises:
        ValueError: If `pairs` is empty.
    """
    if not pairs:
        raise ValueError("pairs must hold at least one seed's numbers, got none")
    differences = [a - b for a, b in pairs]
    if all(d > 0 for d in differences) or all(d < 0 for d in differences):
        return (1 if differences[0] > 0 else -1), "in every seed"
    mean = statistics.fmean(differences)
    if len(differences) > 1:
        error = statistics.stdev(differences) / math.sqrt(len(differences))
        if abs(mean) > 2 * error:
            return (1 if mean > 0 else -1), "on average, not in every seed"
    return 0, "the seeds cannot tell them apart"


def recorded_values(name: str, path: Path = HEADLINES) -> dict[str, dict[str, float]]:
    """The recorded headline numbers of one run, by variant, for a sentence that reads them.

    Args:
        name: The run's name.
        path: The recorded file.

    Returns:
        ``{variant: {label: number}}``; empty if the run has none recorded.
    """
    try:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    variants = recorded.get(name, {}).get("variants", {})
    return {variant: dict(entry["numbers"]) for variant, entry in variants.items()}


def recorded_pairs(first: tuple[str, str], second: tuple[str, str]) -> list[tuple[float, float]]:
    """Two recorded numbers side by side, in every variant that recorded both.

    A sentence that compares two numbers reads these to say whether the comparison holds in
    every recorded training, not only in the build's own.

    Args:
        first: (run name, label) of the first number.
        second: (run name, label) of the second.

    Returns:
        One (first, second) pair per variant, in the file's order of variants.
    """
    a, b = recorded_values(first[0]), recorded_values(second[0])
    return [
        (a[v][first[1]], b[v][second[1]])
        for v in a
        if v in b and first[1] in a[v] and second[1] in b[v]
    ]


def record_headlines(
    path: Path,
    runs: list[Run],
    variants: Mapping[str, Mapping[str, Mapping[str, float]]],
    *,
    capability: str | None = None,
) -> dict[str, Any]:
    """Write the headline numbers of every variant to `path`.

    A run recorded at its current ``VERSION`` keeps the variants of earlier recordings that
    are not recorded again (another machine's); at a new ``VERSION`` only these are kept.

    Args:
        path: The JSON file of recorded headline numbers.
        runs: The declared runs.
        variants: ``{variant: {run name: {label: number}}}``, e.g. from `headline_numbers`
            of each variant's store.
        capability: The kernels the recording machine's native variant ran (``"AVX512"``);
            by default those of this process (`cpu_capability`), which the caller's variables
            may hold to other kernels.

    Returns:
        The file's new content.
    """
    try:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        recorded = {}
    for run in runs:
        fresh = {v: {"numbers": dict(n[run.name])} for v, n in variants.items() if run.name in n}
        if not fresh:
            continue
        old = recorded.get(run.name, {})
        kept = old.get("variants", {}) if old.get("version") == run.version else {}
        recorded[run.name] = {
            "version": run.version,
            "recorded_on": f"{capability or cpu_capability()} kernels, torch {torch.__version__}",
            "variants": {**kept, **fresh},
        }
    text = json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    Path(path).write_text(text, encoding="utf-8")
    return recorded


def _train_one(name: str) -> dict[str, Any]:
    """Compute (or load) one declared run's full result, in a worker process."""
    run = next(run for run in declared_runs() if run.name == name)
    cpu, wall = time.process_time(), time.perf_counter()
    result = run.result()
    found = {
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "wall_seconds": round(time.perf_counter() - wall, 1),
    }
    if run.headline is not None:
        found["numbers"] = {label: float(v) for label, v in run.headline(result).items()}
    return found


def train(runs: list[Any], jobs: int = 1) -> dict[str, Any]:
    """Compute the full result of every run in `runs`, `jobs` at a time, in declared order.

    A run that needs another's result (the timings decode with the main Transformer) waits
    for it on the store's lock, or computes it; its seconds then include that work, so the
    declared order puts each run after those it reads.

    Args:
        runs: Declared runs.
        jobs: Worker processes.

    Returns:
        ``{"cpu": ..., "runs": {name: {"cpu_seconds", "wall_seconds", "numbers"}}}``; a run
        already in the store counts the seconds of loading it.
    """
    context = multiprocessing.get_context("spawn")  # no torch state shared with the parent
    names = [run.name for run in runs]
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        found = dict(zip(names, pool.map(_train_one, names), strict=True))
    for name, entry in found.items():
        print(f"{name}: {entry['cpu_seconds']:.0f} s CPU", file=sys.stderr)
    return {"cpu": cpu_capability(), "runs": found}
