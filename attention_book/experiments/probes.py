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
  headline numbers (test BLEU, accuracies, validation losses) and how far they may move;
  `check_headlines` compares the full results in the store with the numbers recorded when they
  were last trained, so a changed result is caught before a reader sees it. How far a number
  may move depends on the machine: where the run's probe comes out bit for bit as it did on a
  machine that recorded the numbers (`arithmetic`), the full run repeats that machine's
  training and the run's tight ``tolerance`` applies; elsewhere the kernels round differently,
  a training ends elsewhere, and only its measured ``drift`` can be asked for.

Every module that stores a result (the corpus of `attention_book.data.corpus`, the experiment
modules) lists its cached runs in a tuple named ``RUNS``, one `attention_book.store.Run` each;
`declared_runs` gathers them. ``python -m attention_book.experiments`` records and checks both
files (``make probes`` in the repository).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import pkgutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attention_book.store import Run, is_cached, library_versions

__all__ = [
    "PROBE_ATOL",
    "PROBE_RTOL",
    "arithmetic",
    "check_headlines",
    "check_probes",
    "cpu_capability",
    "declared_keys",
    "declared_runs",
    "differences",
    "fingerprint",
    "headline_numbers",
    "probe_fingerprints",
    "record_headlines",
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
    """Run the probes and write their fingerprints to `path` (keeping the other runs' entries).

    A run whose fingerprint changed while its ``VERSION`` did not is refused (its old entry
    stays): a new computation needs a new version, or a stale result would be loaded. Only
    where the library versions changed, or with `force` (the same code on another machine),
    is it recorded anyway.

    Args:
        path: The JSON file of recorded probes.
        runs: The runs to record; every declared run by default.
        force: Record even a changed fingerprint at the same version.

    Returns:
        The refusals, one message per refused run; empty if everything was recorded.
    """
    runs = declared_runs() if runs is None else runs
    recorded = _read(path)
    now = probe_fingerprints(runs)
    refused = []
    for run in runs:
        old, new = recorded.get(run.name), now[run.name]
        same_version = old is not None and old["version"] == run.version
        changed = same_version and differences(old["fingerprint"], new["fingerprint"])
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


def arithmetic(run: Run) -> str:
    """A digest of the exact bits of `run`'s probe on this machine, on one thread.

    Two machines with the same digest computed the probe's training steps bit for bit alike,
    and so run the same kernels the same way. The name of PyTorch's vector instructions is not
    enough to tell: two AVX-512 machines that built this book rounded differently (every
    probe but three differed in its last bits), and their full trainings ended up to 6.4
    BLEU apart, within the drift measured with other instructions. The same code on a
    machine with the same digest trains the full run to the same result; on another, to a
    nearby one.

    Args:
        run: A declared run.

    Returns:
        16 hexadecimal digits of the SHA-256 of the probe's `fingerprint`, as exact JSON.
    """
    from attention_book.timing import torch_threads

    with torch_threads(1):
        value = fingerprint(run.probe())
    text = json.dumps(value, sort_keys=True)  # floats as their shortest exact repr
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def headline_numbers(runs: list[Run] | None = None, *, train: bool = False) -> dict[str, Any]:
    """The headline numbers of the full results, for the runs that declare some.

    Args:
        runs: The runs; every declared run by default.
        train: Compute the results that are not in the store; by default they are skipped.

    Returns:
        ``{name: {"version": ..., "cpu": ..., "arithmetic": ..., "numbers": {label: number}}}``:
        the `cpu_capability` and the `arithmetic` of this machine say where they were computed.
    """
    found = {}
    for run in declared_runs() if runs is None else runs:
        if run.headline is None:
            continue
        if not train and ((key := run.key()) is None or not is_cached(run.name, key)):
            continue
        numbers = {label: float(value) for label, value in run.headline(run.result()).items()}
        found[run.name] = {
            "version": run.version,
            "cpu": cpu_capability(),
            "arithmetic": arithmetic(run),
            "numbers": numbers,
        }
    return found


def cpu_capability() -> str:
    """The vector instructions PyTorch's CPU kernels use here: "AVX512", "AVX2", "DEFAULT"...

    Returns:
        ``torch.backends.cpu.get_cpu_capability()``.
    """
    return torch.backends.cpu.get_cpu_capability()


def _machines(entry: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The recorded numbers of a run: the reference machine's first, then other machines'."""
    return [entry, *entry.get("others", [])]


def check_headlines(
    recorded: Mapping[str, Any],
    runs: list[Run] | None = None,
    now: Mapping[str, Any] | None = None,
) -> list[str]:
    """The referee: compare the headline numbers of the stored full results with `recorded`.

    Only results in the store are compared (the site build has just trained what it shows).
    On a machine whose `arithmetic` for the run is one recorded with its numbers, each number
    may move by the run's `tolerance` from that machine's; on any other, by its `drift` from
    the reference machine's: other kernels round differently, and a training that rounds
    differently ends elsewhere.

    Args:
        recorded: The recorded file's content (`record_headlines` wrote it).
        runs: The runs; every declared run by default.
        now: Their `headline_numbers`, if already computed.

    Returns:
        One message per number that moved beyond its tolerance, or per run whose version has
        no recorded numbers; empty if all agree.
    """
    runs = declared_runs() if runs is None else runs
    problems = []
    for name, numbers in (headline_numbers(runs) if now is None else now).items():
        run = next(r for r in runs if r.name == name)
        theirs = recorded.get(name)
        if theirs is None or theirs["version"] != run.version:
            problems.append(
                f"{name}: no headline numbers recorded for VERSION {run.version}: check the "
                "chapter's prose against the new result, then record them (make probes)"
            )
            continue
        same = [m for m in _machines(theirs) if m.get("arithmetic") == numbers.get("arithmetic")]
        reference = same[0] if same else theirs
        allowed = run.tolerance if same else run.drift
        where = (
            f"on {numbers['cpu']} kernels whose probe is bit for bit the recorded machine's"
            if same
            else f"on {numbers['cpu']} kernels that round unlike every recorded machine's "
            f"(recorded on {theirs.get('cpu')})"
        )
        for label, value in numbers["numbers"].items():
            expected = reference["numbers"].get(label)
            if expected is None or abs(value - expected) > allowed:
                problems.append(
                    f"{name}: {label} is {value:.4g}, recorded {expected} (tolerance "
                    f"±{allowed:g} {where}): the full run computes differently from when it "
                    f"was recorded. {_advice(run)}"
                )
    return problems


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


def record_headlines(path: Path, runs: list[Run] | None = None) -> dict[str, Any]:
    """Write the headline numbers of the stored full results to `path` (others kept).

    A run recorded at its current ``VERSION`` keeps the numbers of the machines already
    recorded: this machine's replace those of the machine with the same `arithmetic`, or are
    added beside them (under ``"others"``); the first machine stays the reference. At a new
    ``VERSION``, this machine's numbers replace all.

    Args:
        path: The JSON file of recorded headline numbers.
        runs: The runs; every declared run by default.

    Returns:
        What was written for the runs recorded now.
    """
    recorded = _read(path)
    now = headline_numbers(runs)
    for name, entry in now.items():
        old = recorded.get(name)
        if old is None or old["version"] != entry["version"]:
            recorded[name] = entry
            continue
        machines = [m for m in _machines(old) if m.get("arithmetic") != entry["arithmetic"]]
        if len(machines) == len(_machines(old)):  # a new machine: added beside the reference
            machines.append(entry)
        else:  # this machine's numbers again: at their place
            machines = [entry if m.get("arithmetic") == entry["arithmetic"] else m
                        for m in _machines(old)]  # fmt: skip
        reference, *others = machines
        fields = ("cpu", "arithmetic", "numbers")
        recorded[name] = {
            "version": entry["version"],
            **{field: reference[field] for field in fields if field in reference},
            **({"others": [{f: m[f] for f in fields} for m in others]} if others else {}),
        }
    _write(path, recorded)
    return now
