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
    python -m booktools.checks.crossmachine --record --run vit   # one run (repeatable)

``--record`` trains the seven variants of `RECORDED` (seed 0 under the native arithmetic, AVX2
and the plainest kernels, and four more seeds under AVX2: five independent trainings) and
writes their numbers to ``tests/recorded/headlines.json``, keeping other machines' variants of
the same version.
``--run NAME`` trains, records and checks that run only (``make crossmachine RECORD=1
RUN=NAME``): the other runs' records are not touched, and the verdict tests are those of the
chapters whose figures show it. The variants train side by side, `--jobs` at a time, each
writing its progress to ``.cache/crossmachine/<variant>/train.log``. A variant is labelled with
the kernels its own process ran (``native AVX512``), not with those of the caller.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from attention_book.experiments.probes import declared_runs
from attention_book.experiments.spread import (
    HEADLINES,
    allowed_range,
    check_headlines,
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
#: ``--record``: every setting (seed 0 rounded three ways), and four more seeds under the AVX2
#: arithmetic: five independent trainings (`attention_book.experiments.spread.seed_of`).
RECORDED = (
    "native",
    "avx2",
    "default",
    "avx2 seed+1",
    "avx2 seed+2",
    "avx2 seed+3",
    "avx2 seed+4",
)


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


def variant_label(name: str, capability: str) -> str:
    """The name a variant is recorded under: the kernels its training process actually ran.

    Args:
        name: The variant (``"native"``, ``"avx2 seed+1"``).
        capability: What ``torch.backends.cpu.get_cpu_capability()`` said in the process that
            trained it (``trained.json``'s ``cpu``), not in the caller, whose own variables may
            hold it to other kernels.

    Returns:
        ``"native AVX512"`` for the native setting; the name itself for a setting that ran
        the kernels it names; otherwise the name followed by what ran (``"avx2 (ran
        DEFAULT)"``: a CPU without AVX2).
    """
    setting, offset = parse_variant(name)
    if setting == "native":
        return f"native {capability}" + (f" seed+{offset}" if offset else "")
    if capability.lower() != SETTINGS[setting]["ATEN_CPU_CAPABILITY"]:
        return f"{name} (ran {capability})"
    return name


def environment(name: str) -> dict[str, str]:
    """The environment a variant trains and is tested in (its own store)."""
    setting, offset = parse_variant(name)
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS["avx2"] | SETTINGS["default"]}
    env |= SETTINGS[setting]
    env["ATTENTION_BOOK_CACHE"] = str(OUT / name.replace(" ", "-") / "store")
    env["ATTENTION_BOOK_SEED_OFFSET"] = str(offset)
    return env


def train(name: str, jobs: int, runs: list[str] | None = None) -> dict[str, Any]:
    """Train the declared runs (or `runs`) under one variant, what its store lacks; read them.

    The training's output goes to the variant's ``train.log``.
    """
    folder = OUT / name.replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    numbers = folder / "trained.json"
    command = [sys.executable, "-m", "attention_book.experiments", "train", str(numbers)]
    command += ["--jobs", str(jobs), *(a for run in runs or () for a in ("--run", run))]
    print(f"crossmachine: training variant {name!r} (log: {folder / 'train.log'})", flush=True)
    with open(folder / "train.log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=environment(name), stdout=log, stderr=log)
    if done.returncode != 0:
        raise SystemExit(f"crossmachine: training variant {name!r} failed: see {log.name}")
    trained = json.loads(numbers.read_text(encoding="utf-8"))
    # The CPU seconds each run took when it was computed (a run already stored only loads).
    times = Path(environment(name)["ATTENTION_BOOK_CACHE"]) / COMPUTE_TIMES
    computed = json.loads(times.read_text(encoding="utf-8")) if times.exists() else {}
    for run_name, entry in trained["runs"].items():
        entry["cpu_seconds"] = computed.get(run_name, {}).get("cpu_seconds", entry["cpu_seconds"])
    print(f"crossmachine: variant {name!r} trained", flush=True)
    return trained


def train_variants(names: list[str], jobs: int, runs: list[str] | None) -> dict[str, Any]:
    """Train the variants side by side, `jobs` processes in all.

    With few runs (a contributor's one run), the variants share the cores; with every run,
    each variant's runs do.
    """
    few = runs is not None and len(runs) < jobs
    at_once = max(1, min(jobs, len(names))) if few else 1
    each = max(1, jobs // at_once)
    with ThreadPoolExecutor(at_once) as pool:
        trained = list(pool.map(lambda name: train(name, each, runs), names))
    return dict(zip(names, trained, strict=True))


def verdict_files(runs: list[str] | None = None) -> list[str]:
    """The verdict tests: all of them, or those of the chapters whose figures show `runs`.

    A verdict test file reads the figure modules it imports; it is chosen when one of those
    declares one of the runs (`attention_book.figures.declaration`).
    """
    from attention_book.figures import declaration

    files = sorted((ROOT / "tests" / "experiments").glob("test_*_figures.py"))
    if runs is None:
        return [str(p.relative_to(ROOT)) for p in files]
    chosen = []
    for path in files:
        modules = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom | ast.Import)
            for alias in node.names
        }
        figures = {m for m in modules if m and m.startswith("attention_book.figures.")}
        if any(set(runs) & set(declaration(m)["runs"]) for m in figures):
            chosen.append(str(path.relative_to(ROOT)))
    return chosen


def verdict_tests(name: str, files: list[str]) -> bool:
    """Run the tests that hold the build's sentences to the stored results, on a variant's."""
    if not files:
        print(f"crossmachine: no verdict test reads these runs (variant {name!r})", flush=True)
        return True
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
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
    parser.add_argument("--run", action="append", help="only this run (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="processes that train at once")
    parser.add_argument(
        "--tests", action="append", help="only these verdict test files (repeatable)"
    )
    args = parser.parse_args(argv)
    default = RECORDED if args.record else CHECKED
    names = args.variants.split(",") if args.variants else list(default)
    for name in names:
        parse_variant(name)  # fail before training anything
    runs = declared_runs()
    if args.run:
        unknown = sorted(set(args.run) - {run.name for run in runs})
        if unknown:
            parser.error(f"no declared run named {unknown} (runs: {[r.name for r in runs]})")
        runs = [run for run in runs if run.name in args.run]
    trained = train_variants(names, args.jobs, args.run)
    numbers = {
        variant_label(name, t["cpu"]): {
            r: e["numbers"] for r, e in t["runs"].items() if "numbers" in e
        }
        for name, t in trained.items()
    }
    if args.record:
        native = next((t["cpu"] for n, t in trained.items() if n.startswith("native")), None)
        record_headlines(HEADLINES, runs, numbers, capability=native)
        print(f"crossmachine: recorded {len(numbers)} variants of {len(runs)} runs in {HEADLINES}")
    recorded = json.loads(HEADLINES.read_text(encoding="utf-8"))
    failed = []
    files = args.tests or verdict_files(args.run)
    for name, label in zip(names, numbers, strict=True):
        problems = check_headlines(recorded, runs, numbers[label])
        for problem in problems:
            print(f"[{name}] {problem}", file=sys.stderr)
        if problems:
            failed.append(f"{name}: referee")
        if not verdict_tests(name, files):
            failed.append(f"{name}: verdict tests")
    text = table(trained, recorded)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text(text, encoding="utf-8")
    print(text)
    print("crossmachine: " + ("failed: " + "; ".join(failed) if failed else "every variant passes"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
