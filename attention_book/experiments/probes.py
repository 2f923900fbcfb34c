"""Declared runs: the probes that keep a ``VERSION`` honest, and the referee of full results.

A cached run is keyed by what it declares (`attention_book.store.declared_key`): its
configuration, the ``VERSION`` of its module, its inputs and the library versions, never the
source. Two checks make that safe:

- **The probe.** Each run declares a replay of itself: the very ``run`` function of the full
  result, called with a configuration small enough to take a second or two on one thread yet
  crossing every code path the full run takes (every model variant, both losses, the schedule
  past warm-up, greedy and beam decoding). `probe_fingerprints` runs them and reduces each
  result to a `fingerprint` (losses, metrics, decoded tokens, a checksum of every tensor);
  the probe test of ``tests/`` compares it with the fingerprint recorded for the same
  ``VERSION``. Code that computes the same passes; code that computes something else fails in
  seconds, naming the run, until its ``VERSION`` is bumped and the probe re-recorded.
- **The referee.** A probe can miss what only shows at full scale. Each run also declares its
  headline numbers (test BLEU, accuracies, validation losses);
  `attention_book.experiments.spread` compares the full results in the store with the spread
  recorded for them over other CPU arithmetic and seeds, so a changed result is caught before
  a reader sees it. A probe's bits say nothing of where a full training ends on another
  machine: the referee never asks for more than the measured spread.

Every module that stores a result (the corpus of `attention_book.data.corpus`, the experiment
modules) lists its cached runs in a tuple named ``RUNS``, one `attention_book.store.Run` each;
`declared_runs` gathers them. ``python -m attention_book.experiments`` records and checks both
files (``make probes`` in the repository).
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attention_book.store import Run, library_versions

__all__ = [
    "PROBE_ATOL",
    "PROBE_RTOL",
    "check_probes",
    "declared_keys",
    "declared_runs",
    "differences",
    "fingerprint",
    "probe_fingerprints",
    "record_probes",
]

#: How far a probe's numbers may move and still count as the same computation: relative and
#: absolute. The same code on the same machine gives the same bits. On a CPU with other vector
#: instructions (measured by running the probes with ``ATEN_CPU_CAPABILITY=default`` against
#: AVX-512 kernels) they moved by at most 2.6e-6 relative, 40 times less than this; the
#: smallest change of what is computed tried in the tests (sqrt(d + 1) for sqrt(d) in the
#: attention scores) moves them by far more.
PROBE_RTOL = 1e-4
PROBE_ATOL = 1e-6


def declared_runs() -> list[Run]:
    """Every `Run` declared by a module of `attention_book.data` or `attention_book.experiments`.

    Returns:
        The runs of each module's ``RUNS`` tuple, the data's first, each module in turn.

    Raises:
        ValueError: If two runs share a name.
    """
    import attention_book.data
    import attention_book.experiments

    runs: list[Run] = []
    for package in (attention_book.data, attention_book.experiments):
        for module in pkgutil.iter_modules(package.__path__):
            if module.name.startswith("_"):
                continue
            name = f"{package.__name__}.{module.name}"
            declared = getattr(importlib.import_module(name), "RUNS", ())
            runs += [run if run.module else replace(run, module=name) for run in declared]
    names = [run.name for run in runs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"run names must be unique, these are declared twice: {repeated}")
    return runs


def fingerprint(value: Any) -> Any:
    """What a probe compares of a result: its numbers, strings and tensor checksums, as JSON.

    Dicts keep their keys (sorted) except those that hold a time (a key with "seconds" in
    it: times differ from run to run); tuples become lists; a tensor becomes its shape, its
    norm and its projection on a fixed pseudo-random direction, which any change of any of
    its elements (or their order) moves by more than the tolerance times its norm.

    Args:
        value: A result: nested dicts, lists and tuples of numbers, strings, tensors.

    Returns:
        The same structure in JSON values.
    """
    if isinstance(value, torch.Tensor):
        values = value.detach().double().flatten().cpu()
        # Weights between 0.5 and 2.5, none alike in a row: every element counts, and so
        # does their order.
        direction = 1.5 + torch.sin(torch.arange(values.numel(), dtype=torch.float64) * 0.7)
        return {
            "shape": list(value.shape),
            "norm": values.norm().item(),
            "projection": (values @ direction).item() / max(direction.norm().item(), 1e-12),
        }
    if isinstance(value, Mapping):
        return {
            str(k): fingerprint(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))
            if "seconds" not in str(k)
        }  # fmt: skip
    if isinstance(value, list | tuple):
        return [fingerprint(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def differences(
    recorded: Any, now: Any, rtol: float = PROBE_RTOL, atol: float = PROBE_ATOL, path: str = ""
) -> list[str]:
    """Where two fingerprints differ beyond the tolerance, one line per difference.

    Numbers are equal when ``|a - b| <= atol + rtol * max(|a|, |b|)``; the checksums of a
    tensor are compared at the scale of its norm; everything else exactly.

    Args:
        recorded: The recorded fingerprint.
        now: The fingerprint computed now.
        rtol: Relative tolerance.
        atol: Absolute tolerance.
        path: Where these fingerprints sit in a larger one (for the messages).

    Returns:
        Lines such as ``train_loss[2]: 4.1037 recorded, 4.2981 now``; empty if they agree.
    """
    where = path or "the result"
    if isinstance(recorded, dict) and isinstance(now, dict):
        if set(recorded) == {"shape", "norm", "projection"} == set(now):  # a tensor
            if recorded["shape"] != now["shape"]:
                return [f"{where}: shape {recorded['shape']} recorded, {now['shape']} now"]
            scale = max(abs(recorded["norm"]), abs(now["norm"]))
            found = []
            for part in ("norm", "projection"):
                if abs(recorded[part] - now[part]) > atol + rtol * scale:
                    found.append(f"{where} ({part}): {recorded[part]:.6g} recorded, "
                                 f"{now[part]:.6g} now")  # fmt: skip
            return found
        found = []
        for key in sorted(set(recorded) | set(now)):
            if key not in now or key not in recorded:
                state = "missing now" if key not in now else "new"
                found.append(f"{path}.{key}: {state}" if path else f"{key}: {state}")
                continue
            found += differences(
                recorded[key], now[key], rtol, atol, f"{path}.{key}" if path else key
            )
        return found
    if isinstance(recorded, list) and isinstance(now, list):
        if len(recorded) != len(now):
            return [f"{where}: {len(recorded)} entries recorded, {len(now)} now"]
        found = []
        for index, (a, b) in enumerate(zip(recorded, now, strict=True)):
            found += differences(a, b, rtol, atol, f"{path}[{index}]")
        return found
    numbers = (int, float)
    if (
        isinstance(recorded, numbers)
        and isinstance(now, numbers)
        and not isinstance(recorded, bool)
        and not isinstance(now, bool)
    ):
        if abs(recorded - now) <= atol + rtol * max(abs(recorded), abs(now)):
            return []
        return [f"{where}: {recorded:.6g} recorded, {now:.6g} now"]
    if recorded != now or isinstance(recorded, bool) != isinstance(now, bool):  # True == 1
        return [f"{where}: {_short(recorded)} recorded, {_short(now)} now"]
    return []


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _write(path: Path, data: Mapping[str, Any]) -> None:
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    Path(path).write_text(text, encoding="utf-8")


def probe_fingerprints(runs: list[Run] | None = None) -> dict[str, dict[str, Any]]:
    """Run every probe and fingerprint its result.

    The probes run on one thread, as the full runs train, so that the numbers do not depend
    on how many cores the machine has.

    Args:
        runs: The runs to probe; every declared run by default.

    Returns:
        ``{name: {"version": ..., "libraries": ..., "fingerprint": ...}}``.
    """
    from attention_book.timing import torch_threads

    found = {}
    for run in declared_runs() if runs is None else runs:
        with torch_threads(1):
            value = run.probe()
        found[run.name] = {
            "version": run.version,
            "libraries": library_versions(),
            "fingerprint": fingerprint(value),
        }
    return found


def _advice(run: Run) -> str:
    return (
        f"If you meant to change what it computes, bump {run.version_name} in "
        f"{run.module or 'its module'} and re-record the probes (make probes); if not, the "
        "change altered a result by mistake."
    )


def check_probes(recorded: Mapping[str, Any], now: Mapping[str, Any], runs: list[Run]) -> list[str]:
    """Compare fresh probe fingerprints with the recorded ones.

    Args:
        recorded: The recorded file's content (`record_probes` wrote it).
        now: `probe_fingerprints` of the same runs.
        runs: The runs.

    Returns:
        One message per run that fails, naming it and saying what to do; empty if all pass.
    """
    problems = []
    for run in runs:
        mine, theirs = now[run.name], recorded.get(run.name)
        if theirs is None:
            problems.append(f"{run.name}: no probe recorded: record it (make probes)")
            continue
        if theirs["version"] != run.version:
            problems.append(
                f"{run.name}: {run.version_name} is {run.version} but its probe was recorded "
                f"at {run.version_name} {theirs['version']}: re-record the probes (make probes)"
            )
            continue
        found = differences(theirs["fingerprint"], mine["fingerprint"])
        if found:
            shown = "\n    ".join(found[:8]) + ("\n    ..." if len(found) > 8 else "")
            libraries = ""
            if theirs["libraries"] != mine["libraries"]:
                libraries = (
                    f" The library versions differ from those it was recorded with "
                    f"({theirs['libraries']} then, {mine['libraries']} now): if only they "
                    "changed, re-record the probes."
                )
            problems.append(
                f"{run.name} computes differently now ({run.version_name} {run.version}, "
                f"{len(found)} differences):\n    {shown}\n  {_advice(run)}{libraries}"
            )
    return problems


def record_probes(path: Path, runs: list[Run] | None = None, *, force: bool = False) -> list[str]:
    """Run the probes and record in `path` those that are new or at a new version.

    Only what changed is written: a run whose probe agrees with its entry (within
    `PROBE_RTOL`) keeps that entry as it is, so recording on a machine that rounds differently
    rewrites nothing of the other runs. A run recorded at another ``VERSION``, or not at all,
    gets its new fingerprint. A run whose fingerprint changed while its ``VERSION`` did not is
    refused (its old entry stays): a new computation needs a new version, or a stale result
    would be loaded. Only where the library versions changed, or with `force` (the same code on
    a machine whose rounding moves it past the tolerance), is it recorded anyway. Recording
    every declared run also drops the entries of runs no longer declared.

    Args:
        path: The JSON file of recorded probes.
        runs: The runs to probe; every declared run by default.
        force: Record even a changed fingerprint at the same version.

    Returns:
        The refusals, one message per refused run; empty if everything was recorded or kept.
    """
    everything = runs is None
    runs = declared_runs() if runs is None else runs
    recorded = _read(path)
    if everything:  # a run no longer declared (renamed, split) leaves the file
        recorded = {
            name: entry for name, entry in recorded.items() if name in {r.name for r in runs}
        }
    now = probe_fingerprints(runs)
    refused = []
    for run in runs:
        old, new = recorded.get(run.name), now[run.name]
        same_version = old is not None and old["version"] == run.version
        changed = same_version and differences(old["fingerprint"], new["fingerprint"])
        if same_version and not changed:
            continue  # the same computation: its entry stays, this machine's rounding unwritten
        if changed and old["libraries"] == new["libraries"] and not force:
            refused.append(
                f"{run.name}: its probe computes differently at the same {run.version_name} "
                f"{run.version}: "
                f"bump {run.version_name} in {run.module or 'its module'} first ({changed[0]})"
            )
            continue
        recorded[run.name] = new
    _write(path, recorded)
    return refused


def declared_keys(runs: list[Run] | None = None) -> dict[str, Any]:
    """The key in the store of every declared full result, without training anything.

    A run whose key needs another run's stored result (the Transformer's length split needs
    the main run's choice) has None while that result is not stored. CI keys its saved store
    by a digest of this, so that a new key saves a new store.

    Args:
        runs: The runs; every declared run by default.

    Returns:
        ``{name: key or None}``.
    """
    return {run.name: run.key() for run in (declared_runs() if runs is None else runs)}
