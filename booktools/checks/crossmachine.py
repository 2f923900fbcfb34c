"""Other machines, emulated: train the book's runs as other CPUs would, then referee and read them.

A training ends elsewhere on a CPU that rounds differently, and most readers have no AVX-512.
This command trains every declared run again under other arithmetic and seeds, each into a
store of its own (``.cache/crossmachine/<variant>/``), and for each variant:

1. runs the referee on its numbers (`attention_book.experiments.spread.check_headlines`);
2. runs the verdict tests (``tests/experiments/test_*_figures.py``: the tests that hold each
   sentence the build writes against the stored results) on its store;
3. prints a table, run × number × variant, with the range the referee allows, and the CPU
   seconds each run took when it was trained (``.cache/crossmachine/table.md`` keeps it).

The arithmetic is held by the variables that PyTorch, MKL and oneDNN read at start-up
(`SETTINGS`); the seed by ``ATTENTION_BOOK_SEED_OFFSET`` (`attention_book.store.seed_offset`).

Usage::

    python -m booktools.checks.crossmachine            # make crossmachine: AVX2 and plain kernels
    python -m booktools.checks.crossmachine --record   # all variants, then record their spread

``--record`` trains the five variants of `RECORDED` (the native arithmetic, AVX2, the plainest
kernels, and two more seeds under AVX2) and writes their numbers to
``tests/recorded/headlines.json``, keeping other machines' variants of the same version.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from attention_book.experiments.probes import declared_runs
from attention_book.experiments.spread import (
    HEADLINES,
    allowed_range,
    check_headlines,
    cpu_capability,
    record_headlines,
)
from attention_book.store import COMPUTE_TIMES
from booktools import ROOT

#: Where each variant's store, numbers and the table go.
OUT = ROOT / ".cache" / "crossmachine"

#: The CPU arithmetic of each setting: the variables PyTorch (its vector kernels), MKL (its
#: code path, bit for bit) and oneDNN (its instructions) read when they load.
SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "default": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
}
#: ``make crossmachine``: the two settings that differ from most development machines.
CHECKED = ("avx2", "default")
#: ``--record``: every setting, and two more seeds under the AVX2 arithmetic.
RECORDED = ("native", "avx2", "default", "avx2 seed+1", "avx2 seed+2")


def parse_variant(name: str) -> tuple[str, int]:
    """The setting and the seed offset of a variant named like ``"avx2"`` or ``"avx2 seed+1"``.

    Args:
        name: The variant's name.

    Returns:
        (setting, seed offset).

    Raises:
        ValueError: If the setting is unknown or the seed part is not ``seed+N``.
    """
    setting, _, seed = name.partition(" ")
    if setting not in SETTINGS:
        raise ValueError(f"variant {name!r}: the setting must be one of {sorted(SETTINGS)}")
    if seed and not (seed.startswith("seed+") and seed[5:].isdigit()):
        raise ValueError(f"variant {name!r}: the seed part must be like 'seed+1', got {seed!r}")
    return setting, int(seed[5:]) if seed else 0


def variant_label(name: str) -> str:
    """The name a variant is recorded under: "native" becomes this machine's kernels."""
    setting, offset = parse_variant(name)
    if setting != "native":
        return name
    return f"native {cpu_capability()}" + (f" seed+{offset}" if offset else "")


def environment(name: str) -> dict[str, str]:
    """The environment a variant trains and is tested in (its own store)."""
    setting, offset = parse_variant(name)
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS["avx2"] | SETTINGS["default"]}
    env |= SETTINGS[setting]
    env["ATTENTION_BOOK_CACHE"] = str(OUT / name.replace(" ", "-") / "store")
    env["ATTENTION_BOOK_SEED_OFFSET"] = str(offset)
    return env


def train(name: str, jobs: int) -> dict[str, Any]:
    """Train every declared run under one variant (what its store lacks) and read its numbers."""
    numbers = OUT / name.replace(" ", "-") / "trained.json"
    command = [sys.executable, "-m", "attention_book.experiments", "train", str(numbers)]
    print(f"crossmachine: training the declared runs, variant {name!r}", flush=True)
    subprocess.run([*command, "--jobs", str(jobs)], env=environment(name), check=True)
    trained = json.loads(numbers.read_text(encoding="utf-8"))
    # The CPU seconds each run took when it was computed (a run already stored only loads).
    times = Path(environment(name)["ATTENTION_BOOK_CACHE"]) / COMPUTE_TIMES
    computed = json.loads(times.read_text(encoding="utf-8")) if times.exists() else {}
    for run_name, entry in trained["runs"].items():
        entry["cpu_seconds"] = computed.get(run_name, {}).get("cpu_seconds", entry["cpu_seconds"])
    return trained


def verdict_tests(name: str) -> bool:
    """Run the tests that hold the build's sentences to the stored results, on a variant's."""
    tests = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "experiments").glob("test_*_figures.py")
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    print(f"crossmachine: the verdict tests on variant {name!r}", flush=True)
    return subprocess.run(command, env=environment(name), cwd=ROOT).returncode == 0


def table(trained: dict[str, dict[str, Any]], recorded: dict[str, Any]) -> str:
    """The Markdown table: one row per run and number, one column per variant."""
    runs = {run.name: run for run in declared_runs()}
    names = list(trained)
    lines = [
        "| run | number | " + " | ".join(names) + " | recorded | allowed |",
        "|---|---|" + "---|" * (len(names) + 2),
    ]
    trained_runs = list(trained[names[0]]["runs"])
    for run_name in trained_runs:
        run = runs[run_name]
        labels = trained[names[0]]["runs"][run_name].get("numbers", {})
        for label in labels:
            cells = [f"{trained[n]['runs'][run_name]['numbers'][label]:.4g}" for n in names]
            values = [
                v["numbers"][label]
                for v in recorded.get(run_name, {}).get("variants", {}).values()
                if label in v["numbers"]
            ]
            spread = f"{min(values):.4g} to {max(values):.4g}" if values else "none"
            low, high = allowed_range(values, run.tolerance) if values else (None, None)
            allowed = f"{low:.4g} to {high:.4g}" if values else "none"
            lines.append(
                f"| {run_name} | {label} | " + " | ".join(cells) + f" | {spread} | {allowed} |"
            )
    lines += ["", "| run | CPU seconds: " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for run_name in trained_runs:
        cells = [f"{trained[n]['runs'][run_name]['cpu_seconds']:.0f}" for n in names]
        lines.append(f"| {run_name} | " + " | ".join(cells) + " |")
    totals = [sum(r["cpu_seconds"] for r in trained[n]["runs"].values()) for n in names]
    lines.append("| **all** | " + " | ".join(f"{t:.0f}" for t in totals) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Train, referee and read the variants; print and save the table.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        0 if every variant passes the referee and the verdict tests, else 1.
    """
    parser = argparse.ArgumentParser(prog="python -m booktools.checks.crossmachine")
    parser.add_argument("--variants", help=f"comma-separated (default: {','.join(CHECKED)})")
    parser.add_argument("--record", action="store_true", help="record the spread first")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at a time")
    args = parser.parse_args(argv)
    default = RECORDED if args.record else CHECKED
    names = args.variants.split(",") if args.variants else list(default)
    for name in names:
        parse_variant(name)  # fail before training anything
    trained = {name: train(name, args.jobs) for name in names}
    runs = declared_runs()
    numbers = {
        variant_label(name): {r: e["numbers"] for r, e in t["runs"].items() if "numbers" in e}
        for name, t in trained.items()
    }
    if args.record:
        record_headlines(HEADLINES, runs, numbers)
        print(f"crossmachine: recorded {len(numbers)} variants in {HEADLINES}")
    recorded = json.loads(HEADLINES.read_text(encoding="utf-8"))
    failed = []
    for name, label in zip(names, numbers, strict=True):
        problems = check_headlines(recorded, runs, numbers[label])
        for problem in problems:
            print(f"[{name}] {problem}", file=sys.stderr)
        if problems:
            failed.append(f"{name}: referee")
        if not verdict_tests(name):
            failed.append(f"{name}: verdict tests")
    text = table(trained, recorded)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text(text, encoding="utf-8")
    print(text)
    print("crossmachine: " + ("failed: " + "; ".join(failed) if failed else "every variant passes"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
