"""Check and record the declared runs: ``python -m attention_book.experiments COMMAND FILE``.

- ``probes FILE``: run every probe (a second or two each, on one thread) and compare it with
  the fingerprints recorded in FILE; exit with 1 and say what to do if one differs.
- ``record-probes FILE [--force]``: record the probes into FILE. A run whose probe computes
  differently at the same ``VERSION`` is refused (bump its ``VERSION`` first); ``--force``
  records it anyway, for the same code on a machine that rounds differently.
- ``headlines FILE``: compare the headline numbers of the full results in the store with the
  spread recorded in FILE (`attention_book.experiments.spread`); ``make crossmachine RECORD=1``
  records it.
- ``keys FILE``: write the key in the store of every full result (nothing is trained); CI keys
  the store it saves by a digest of that file.
- ``train FILE [--jobs N]``: compute every full result that the store lacks, N runs at a time
  (each on one thread), and write to FILE each run's CPU and wall-clock seconds and its
  headline numbers. ``make crossmachine`` runs it under other CPU arithmetic and seeds.
- ``--run NAME`` (repeatable) limits any command to those runs.

In the repository, ``make probes`` records both files in ``tests/recorded/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from attention_book.experiments.probes import (
    check_probes,
    declared_keys,
    declared_runs,
    probe_fingerprints,
    record_probes,
)
from attention_book.experiments.spread import check_headlines, headline_numbers, train


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        The exit status: 0 when everything agrees or was recorded, 1 otherwise.
    """
    parser = argparse.ArgumentParser(
        prog="python -m attention_book.experiments", description=__doc__.splitlines()[0]
    )
    commands = ["probes", "record-probes", "headlines", "keys", "train"]
    parser.add_argument("command", choices=commands)
    parser.add_argument("file", type=Path, help="the JSON file of recorded values")
    parser.add_argument("--run", action="append", help="only this run (repeatable)")
    parser.add_argument("--force", action="store_true", help="record-probes: even if changed")
    parser.add_argument("--jobs", type=int, default=1, help="train: runs at a time")
    args = parser.parse_args(argv)
    runs = declared_runs()
    if args.run:
        unknown = sorted(set(args.run) - {run.name for run in runs})
        if unknown:
            parser.error(f"no declared run named {unknown} (runs: {[r.name for r in runs]})")
        runs = [run for run in runs if run.name in args.run]
    if args.command in ("keys", "train"):
        found = declared_keys(runs) if args.command == "keys" else train(runs, args.jobs)
        args.file.parent.mkdir(parents=True, exist_ok=True)
        args.file.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    recorded = json.loads(args.file.read_text(encoding="utf-8")) if args.file.exists() else {}
    if args.command == "probes":
        problems = check_probes(recorded, probe_fingerprints(runs), runs)
    elif args.command == "record-probes":
        problems = record_probes(args.file, runs if args.run else None, force=args.force)
        now = json.loads(args.file.read_text(encoding="utf-8"))
        written = [run.name for run in runs if recorded.get(run.name) != now.get(run.name)]
        kept = len(runs) - len(written) - len(problems)
        print(
            f"recorded {len(written)} probes in {args.file} ({', '.join(written) or 'none'}); "
            f"{kept} agree with their record and are left as they were written"
        )
    else:
        problems = check_headlines(recorded, runs, headline_numbers(runs))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
