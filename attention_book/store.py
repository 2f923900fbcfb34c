"""The result store: trained weights and measured numbers, computed once and kept on disk.

`cached` keeps a result (state dicts, losses, translations, numbers) in a directory outside
git, under a hash of a name and a key, so that the site build, the chapters' snippets and the
notebooks reuse a trained model instead of training it again. A key must hold everything the
result depends on: a key that holds less returns the result of older code.

The book's experiments build their key with `declared_key`, from what they *declare*:

- their configuration, a frozen dataclass (change a value and the run trains again);
- a ``VERSION`` that the experiment's module bumps when its computation changes (the model, the
  loss, the training or the decoding), and only then: a refactor, a docstring or a moved helper
  changes no key and retrains nothing;
- a digest of the data the run reads (`digest`), so that other data trains again;
- the versions of the libraries that compute (`library_versions`).

What keeps a declared version honest is the probe test of ``tests/``: it replays a few steps of
every experiment and fails, in seconds, when the numbers differ from those recorded for its
version; `Run` is how a module declares such a run for that test (and for the referee,
`attention_book.experiments.probes`). This module is the bottom of the package's layers: it
imports nothing of the package, so that the data, the training loop and the experiments can
all use it.
``python -m attention_book.training clear-cache`` empties the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import torch

__all__ = [
    "COMPUTE_TIMES",
    "RESULT_LIBRARIES",
    "Run",
    "cache_dir",
    "cache_path",
    "cached",
    "clear_cache",
    "compute_seconds",
    "declared_key",
    "digest",
    "is_cached",
    "library_versions",
    "seed_offset",
]

T = TypeVar("T")

#: Libraries whose version can change a result: the arithmetic (torch, numpy), the wording of
#: the generated corpus (babel, num2words) and the scores (sacrebleu).
RESULT_LIBRARIES = ("torch", "numpy", "babel", "num2words", "sacrebleu")

#: The names of the results `cached` (or `compute_seconds`) returned in this process, in
#: order: what a drawing read from the store (`attention_book.figures._fingerprint`).
READ: list[str] = []

#: The file of `cache_dir()` where `cached` notes how long each computation took.
COMPUTE_TIMES = "compute-seconds.json"

#: The environment variable that shifts every training's seed (`seed_offset`).
SEED_OFFSET = "ATTENTION_BOOK_SEED_OFFSET"


def seed_offset() -> int:
    """How far ``$ATTENTION_BOOK_SEED_OFFSET`` shifts the seed of every training (0 if unset).

    ``make crossmachine`` sets it to train the declared runs again from other initial
    weights and measure how far their headline numbers move with the seed alone.
    `attention_book.training.loop.set_seed` adds it to the seed it is given, and
    `declared_key` writes it into every key where it is not 0, so a result trained with
    other seeds is never loaded as the book's.

    Returns:
        The offset.

    Raises:
        ValueError: If the variable is set to something other than an integer.
    """
    text = os.environ.get(SEED_OFFSET, "").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"${SEED_OFFSET} must be an integer, got {text!r}") from None


def cache_dir() -> Path:
    """The directory of cached results (created if missing), outside the git work tree.

    ``$ATTENTION_BOOK_CACHE`` if set, else ``$XDG_CACHE_HOME/attention-book``, else
    ``~/.cache/attention-book``.

    Returns:
        The directory.
    """
    explicit = os.environ.get("ATTENTION_BOOK_CACHE")
    if explicit:
        path = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        path = Path(base) / "attention-book"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _key_json(name: str, key: Mapping[str, Any]) -> str:
    try:
        return json.dumps({"name": name, "config": key}, sort_keys=True)
    except TypeError as error:
        raise ValueError(
            f"the key of {name!r} must hold only JSON values (numbers, strings, lists, dicts): "
            f"{error}"
        ) from None


def cache_path(name: str, key: Mapping[str, Any]) -> Path:
    """Where `cached` stores the result of `name` under `key`.

    Args:
        name: A short name (letters, digits, "-", "_").
        key: Everything the result depends on, as JSON values.

    Returns:
        ``cache_dir() / f"{name}-{hash}.pt"``, the hash being SHA-256 of the name and key.

    Raises:
        ValueError: If `name` has other characters or `key` is not JSON-serializable.
    """
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"name must be letters, digits, '-' or '_', got {name!r}")
    hashed = hashlib.sha256(_key_json(name, key).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{hashed}.pt"


def is_cached(name: str, key: Mapping[str, Any]) -> bool:
    """Whether `cached` holds a result of `name` under `key` (without loading it).

    Args:
        name: As in `cached`.
        key: As in `cached`.

    Returns:
        True if the file is there.
    """
    return cache_path(name, key).exists()


def cached(name: str, key: Mapping[str, Any], compute: Callable[[], T], refresh: bool = False) -> T:
    """Return the cached result of `compute` for this name and key, or compute it.

    The result is saved with `torch.save` in `cache_dir()` under a hash of `name` and `key`,
    and loaded with ``torch.load(weights_only=True)``: store tensors, state dicts, numbers,
    strings, lists and dicts. Put everything the result depends on in `key`, so a change gives
    a new entry instead of a stale one: the book's experiments pass `declared_key`.

    Args:
        name: A short name of the experiment (letters, digits, "-", "_").
        key: Everything the result depends on, as JSON values.
        compute: Called without arguments when there is no cached result.
        refresh: Compute and overwrite even if a result is cached.

    Returns:
        The cached or freshly computed result.

    Raises:
        ValueError: If `name` or `key` is not usable as a key (see `cache_path`), or the
            result cannot be loaded back safely.

    Example:
        >>> history = cached("demo", {"lr": 0.1}, lambda: {"loss": [1.0, 0.5]})  # doctest: +SKIP
    """
    path = cache_path(name, key)
    text = _key_json(name, key)
    READ.append(name)
    # One process computes a result at a time: a second one (a parallel site build, the
    # snippets) waits for it and then loads what it saved, instead of training it again.
    with _lock(path):
        if path.exists() and not refresh:
            try:
                entry = torch.load(path, weights_only=True)
            except Exception as error:  # unreadable (another torch version, a damaged disk)
                warnings.warn(
                    f"recomputing {path.name}: cached file unreadable ({error})", stacklevel=2
                )
            else:
                if entry.get("key") == text:
                    return entry["value"]
        started, cpu_started = time.perf_counter(), time.process_time()
        value = compute()
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
        # Write to a temporary file, then rename: a crash never leaves a half-written entry.
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as file:
            torch.save({"key": text, "value": value}, file)
        try:  # fail now, not at the next run, if the value cannot be loaded safely
            torch.load(file.name, weights_only=True)
        except Exception as error:
            os.unlink(file.name)
            raise ValueError(
                f"the result of {name!r} cannot be cached: torch.load(weights_only=True) "
                f"refuses it ({error}). Cache tensors, state dicts, numbers, strings, lists "
                "and dicts, or register your class with torch.serialization.add_safe_globals"
            ) from None
        os.replace(file.name, path)
        _record_seconds(name, seconds, cpu_seconds)  # only for a result that was stored
    return value


def _record_seconds(name: str, seconds: float, cpu_seconds: float) -> None:
    """Note in `COMPUTE_TIMES` that computing `name` took `seconds` (wall clock) just now.

    `cpu_seconds` is the CPU time of this process meanwhile: on a shared machine it is the
    fairer measure of the work (a result computed inside another's counts in both).
    """
    path = cache_dir() / COMPUTE_TIMES
    with _lock(path):
        try:
            times = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            times = {}
        times[name] = {
            "seconds": round(seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1),
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(times, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(temporary, path)


def compute_seconds(name: str) -> dict[str, Any] | None:
    """How long `cached` took to compute `name` the last time it computed it, on this machine.

    Args:
        name: The name given to `cached`.

    Returns:
        ``{"seconds": wall clock, "cpu_seconds": CPU time of the process, "cpus": CPUs the
        process could use, "date": "YYYY-MM-DD"}``,
        or None if this cache never computed `name` (it was never run, or the cache predates
        the record).
    """
    path = cache_dir() / COMPUTE_TIMES
    READ.append(COMPUTE_TIMES)
    try:
        return json.loads(path.read_text(encoding="utf-8")).get(name)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _lock(path: Path):
    """Hold an exclusive lock on ``path`` + ``.lock`` for the duration of the block.

    The lock is the operating system's (``flock``): it is released when the process ends,
    even if it crashes, so a stale lock file never blocks anyone.
    """
    with open(path.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_cache() -> int:
    """Delete every cached result (the ``*.pt`` files of `cache_dir()`).

    Returns:
        The number of files deleted.
    """
    removed = 0
    for path in cache_dir().glob("*.pt"):
        path.unlink()
        removed += 1
    for path in cache_dir().glob("*.lock"):
        path.unlink(missing_ok=True)
    (cache_dir() / COMPUTE_TIMES).unlink(missing_ok=True)
    return removed


def library_versions() -> dict[str, str]:
    """The installed version of each library in `RESULT_LIBRARIES`.

    Returns:
        ``{name: version}``, with "not installed" for a missing library.
    """
    versions = {}
    for name in RESULT_LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def digest(*values: Any) -> str:
    """A short SHA-256 of data: JSON values (lists, strings, numbers) and tensors.

    It stands for the inputs a result reads in its key (the sentence pairs, the images): other
    data gives another digest. Tensors count by dtype, shape and bytes.

    Args:
        *values: JSON values or tensors, or lists and tuples of them.

    Returns:
        16 hex digits.

    Raises:
        ValueError: If a value is neither a tensor nor JSON data.
    """
    hashed = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            hashed.update(f"tensor {tensor.dtype} {tuple(tensor.shape)}\n".encode())
            hashed.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, list | tuple) and any(isinstance(v, torch.Tensor) for v in value):
            hashed.update(f"sequence {len(value)}\n".encode())
            for item in value:
                feed(item)
        else:
            try:
                hashed.update(json.dumps(value, sort_keys=True).encode() + b"\n")
            except TypeError:
                raise ValueError(
                    f"digest takes JSON values and tensors, got {type(value).__name__}"
                ) from None

    for value in values:
        feed(value)
    return hashed.hexdigest()[:16]


def declared_key(config: Any, version: int, **inputs: Any) -> dict[str, Any]:
    """The cache key of a result from what it declares: configuration, version, inputs.

    Pass it to `cached` with the run's name:
    ``cached("vit", declared_key(VIT_CONFIG, VERSION, digits=digest(images)), compute)``.
    The key holds no source code, so a refactor or a docstring keeps the result; bump
    ``VERSION`` when the computation changes (the probe test says when it has).

    Args:
        config: The run's configuration, an instance of a frozen dataclass.
        version: The ``VERSION`` of the module that computes the result (at least 1).
        **inputs: What else the result depends on, as JSON values: digests of the data it
            reads, the versions of other experiments whose code or results it uses.

    Returns:
        ``{"config": ..., "version": ..., "inputs": ..., "libraries": library_versions()}``,
        and ``"seed_offset"`` where `seed_offset` is not 0.

    Raises:
        ValueError: If `config` is not a frozen dataclass instance, `version` is not a
            positive integer, or the inputs are not JSON values.
    """
    if not (dataclasses.is_dataclass(config) and not isinstance(config, type)):
        raise ValueError(f"config must be a dataclass instance, got {type(config).__name__}")
    if not type(config).__dataclass_params__.frozen:
        raise ValueError(f"config must be a frozen dataclass, got {type(config).__name__}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version must be a positive integer, got {version!r}")
    key = {
        "config": {"class": type(config).__name__, **dataclasses.asdict(config)},
        "version": version,
        "inputs": inputs,
        "libraries": library_versions(),
    }
    if offset := seed_offset():
        key["seed_offset"] = offset
    _key_json("declared_key", key)  # fail here, naming the cause, if a value is not JSON
    return key


@dataclasses.dataclass(frozen=True)
class Run:
    """One cached run (of an experiment, or the corpus), as the probe test and the referee see it.

    A module lists its runs in a tuple named ``RUNS``; `attention_book.experiments.probes`
    gathers and checks them.

    Attributes:
        name: Its name in the store (the first argument of `cached`).
        version: The ``VERSION`` its module declares.
        probe: Computes the run at its probe configuration (no cache): the result of the same
            function that computes the full result.
        result: The full result, from the store (computed if missing).
        key: The full result's key in the store, or None while it cannot be known without
            training (it needs another run's stored result).
        headline: Maps the full result to its headline numbers, ``{label: number}``; None for
            a run without any (a timing).
        tolerance: The least margin each headline number gets beyond its recorded spread
            (absolute, in its own unit, e.g. BLEU points): its smallest meaningful step. The
            margin is otherwise half the spread measured over other arithmetic and seeds
            (`attention_book.experiments.spread`).
        module: The module that declares it (`declared_runs` of
            `attention_book.experiments.probes` fills it in).
        version_name: The name of the constant that holds `version` in that module.
    """

    name: str
    version: int
    probe: Callable[[], Any]
    result: Callable[[], Any]
    key: Callable[[], dict[str, Any] | None]
    headline: Callable[[Any], dict[str, float]] | None = None
    tolerance: float = 0.0
    module: str = ""
    version_name: str = "VERSION"
