"""What an edit costs under each way of keying results: declared versions or content keys.

Four edits, each applied to a copy of the package (nothing here changes the repository):

- a docstring of ``masking.py`` reworded;
- a comment added to ``masking.py``;
- a refactor of ``masking.py`` that computes the same (a local variable renamed);
- a real change: Adam's ``eps`` in the Bahdanau experiment's training, with its ``VERSION``
  bumped for the declared keys.

For each, and for each way of keying, it finds what a warm ``make test`` would train and draw
again:

- **declared**: a run's key is its configuration, its module's ``VERSION`` and its inputs
  (`attention_book.store.declared_key`); the keys are read with ``python -m
  attention_book.experiments keys`` on the edited copy, and the runs whose key changed are
  trained again. The probe test (which keeps the versions honest) runs on every ``make
  test``; its time is measured here with ``--probe-seconds``.
- **content**: a run's key would be a hash of the code it runs (its experiment module and
  every package module that reaches, docstrings and comments left out:
  `booktools.plugin.code_keys.code_key`); the runs whose hash changed are trained again.

Figures are keyed by content in both (the build's `booktools.plugin.code_keys`), so the figure
modules drawn again are listed once. A run's cost is its CPU seconds when this machine's store
trained it (``compute-seconds.json`` of the store: run ``make site`` first on a cold store).
Lines of machinery and of recorded JSON are counted from the repository.

Usage::

    .venv/bin/python benchmarks/honest_results_cost.py [--probe-seconds]

Writes ``benchmarks/results/honest_results_cost.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attention_book.store import COMPUTE_TIMES, cache_dir  # noqa: E402
from booktools.plugin.code_keys import code_key  # noqa: E402

MASKING = "attention_book/masking.py"
BAHDANAU = "attention_book/experiments/bahdanau.py"

#: (file, old text, new text, bump VERSION of that file for the declared keys).
SCENARIOS: dict[str, list[tuple[str, str, str, bool]]] = {
    "docstring of masking.py": [
        (MASKING, "Softmax over the last axis that gives", "Softmax over the final axis giving",
         False)
    ],
    "comment in masking.py": [
        (MASKING, "    low_precision = scores.dtype", "    # Half precision.\n    low_precision = "
         "scores.dtype", False)
    ],
    "refactor of masking.py": [
        (MASKING, "row_has_key", "has_visible_key", False),
    ],
    "real change (Bahdanau's Adam eps)": [
        (BAHDANAU, "lr=config.lr)", "lr=config.lr, eps=1e-7)", True),
    ],
}  # fmt: skip

MACHINERY = {
    "probes (declared versions)": ["attention_book/experiments/probes.py"],
    "spread and referee": ["attention_book/experiments/spread.py", "booktools/plugin/referee.py"],
    "recording the spread": ["booktools/checks/crossmachine.py"],
    "content keys (figures)": ["booktools/plugin/code_keys.py"],
}
RECORDED = ["tests/recorded/probes.json", "tests/recorded/figures.json",
            "tests/recorded/headlines.json"]  # fmt: skip


def edited_copy(scenario: str, bump: bool, scratch: Path) -> Path:
    """A copy of the package with one scenario's edits (and the version bump if `bump`)."""
    copy = scratch / scenario.split()[0]
    shutil.copytree(ROOT / "attention_book", copy / "attention_book")
    for file, old, new, bumps in SCENARIOS[scenario]:
        path = copy / file
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise SystemExit(f"{scenario}: {old!r} is not in {file}: update the scenario")
        text = text.replace(old, new)
        if bump and bumps:
            line = next(line for line in text.splitlines() if line.startswith("VERSION = "))
            text = text.replace(line, f"VERSION = {int(line.split('=')[1]) + 1}", 1)
        path.write_text(text, encoding="utf-8")
    return copy


def declared_keys(package_root: Path) -> dict:
    """Every declared run's key, as the package at `package_root` declares it."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": str(package_root)}
        command = [sys.executable, "-c", "import attention_book, sys; "
                   f"assert attention_book.__file__.startswith({str(package_root)!r}); "
                   "from attention_book.experiments.__main__ import main; "
                   "sys.exit(main(['keys', sys.argv[1]]))", out.name]  # fmt: skip
        subprocess.run(command, env=env, check=True, cwd=package_root)
        return json.loads(Path(out.name).read_text(encoding="utf-8"))


def run_modules() -> dict[str, str]:
    """Each declared run's module."""
    from attention_book.experiments.probes import declared_runs

    return {run.name: run.module for run in declared_runs()}


def figure_modules() -> list[str]:
    from attention_book.figures import CHAPTERS

    return [f"attention_book.figures.{name}" for name in CHAPTERS]


def lines(paths: list[str]) -> int:
    return sum(len((ROOT / p).read_text(encoding="utf-8").splitlines())
               for p in paths if (ROOT / p).exists())  # fmt: skip


def probe_seconds() -> float:
    """Wall-clock seconds of the probe test, as ``make test`` runs it (one process)."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "tests/experiments/test_probes.py"]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe-seconds", action="store_true", help="time the probe test")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "benchmarks/results/honest_results_cost.json"
    )
    args = parser.parse_args(argv)
    times = json.loads((cache_dir() / COMPUTE_TIMES).read_text(encoding="utf-8"))
    modules = run_modules()
    missing = sorted(name for name in modules if name not in times)
    if missing:
        raise SystemExit(f"the store has no CPU seconds for {missing}: run `make site` first")
    figures = figure_modules()
    base_declared = declared_keys(ROOT)
    base_content = {m: code_key(m) for m in {*modules.values(), *figures}}
    found = {}
    with tempfile.TemporaryDirectory() as scratch:
        for scenario in SCENARIOS:
            bumped = edited_copy(scenario, True, Path(scratch) / "declared")
            plain = edited_copy(scenario, False, Path(scratch) / "content")
            now_declared = declared_keys(bumped)
            declared = sorted(r for r in modules if now_declared[r] != base_declared[r])
            content = sorted(r for r, m in modules.items()
                             if code_key(m, plain) != base_content[m])  # fmt: skip
            redrawn = sorted(m for m in figures if code_key(m, plain) != base_content[m])
            found[scenario] = {
                "declared": {"runs": declared, "cpu_seconds": sum(times[r]["cpu_seconds"]
                                                                  for r in declared)},
                "content": {"runs": content, "cpu_seconds": sum(times[r]["cpu_seconds"]
                                                                for r in content)},
                "figure_modules_redrawn": len(redrawn),
            }  # fmt: skip
    import torch

    report = {
        "machine": f"{torch.backends.cpu.get_cpu_capability()} kernels, {os.cpu_count()} cores",
        "runs": len(modules),
        "figure_modules": len(figures),
        "all_runs_cpu_seconds": round(sum(times[r]["cpu_seconds"] for r in modules), 1),
        "scenarios": found,
        "lines": {name: lines(paths) for name, paths in MACHINERY.items()},
        "recorded_json_lines": {p: lines([p]) for p in RECORDED},
    }
    if args.probe_seconds:
        report["probe_test_seconds"] = round(probe_seconds(), 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"{len(modules)} runs, {report['all_runs_cpu_seconds']:.0f} CPU s in all; "
          f"{len(figures)} figure modules")  # fmt: skip
    print("| edit | declared: runs, CPU s | content: runs, CPU s | figure modules redrawn |")
    print("|---|---|---|---|")
    for scenario, entry in found.items():
        d, c = entry["declared"], entry["content"]
        redrawn = entry["figure_modules_redrawn"]
        print(f"| {scenario} | {len(d['runs'])}, {d['cpu_seconds']:.0f} | "
              f"{len(c['runs'])}, {c['cpu_seconds']:.0f} | {redrawn} |")  # fmt: skip
    if "probe_test_seconds" in report:
        print(f"probe test: {report['probe_test_seconds']} s wall clock")
    print(f"lines: {report['lines']}; recorded JSON: {report['recorded_json_lines']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
