"""The result cache: trained weights and measured numbers, computed once and kept on disk.

`cached` stores a result (state dicts, histories, numbers) in a directory outside git, under a
hash of a name and a configuration, so the site build and the chapters' snippets reuse a
trained model instead of training it again. A key must hold everything the result depends on;
a key that holds less silently returns a result of older code. `experiment_key` builds such a
key for the book's experiments: the configuration, the source of every package module that
can change a result (all of it but the drawing code), the corpus version and the versions of
the libraries that compute. ``python -m attention_book.training clear-cache`` empties the cache.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import torch

from attention_book.training.loop import History

__all__ = [
    "COMPUTE_TIMES",
    "DRAWING_CODE",
    "RESULT_LIBRARIES",
    "cache_dir",
    "cache_path",
    "cached",
    "clear_cache",
    "compute_seconds",
    "experiment_key",
    "imported_modules",
    "library_versions",
    "package_source_hash",
    "source_hash",
]

T = TypeVar("T")

#: Parts of the package (relative to its directory) that only draw: editing them never changes
#: a computed result, so `package_source_hash` leaves them out.
DRAWING_CODE = ("figures", "plotting.py")

#: Libraries whose version can change a result: the arithmetic (torch, numpy), the wording of
#: the generated corpus (babel, num2words) and the scores (sacrebleu).
RESULT_LIBRARIES = ("torch", "numpy", "babel", "num2words", "sacrebleu")

# History objects are plain data: let torch.load(weights_only=True) rebuild them.
torch.serialization.add_safe_globals([History])


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


def _config_json(name: str, config: dict[str, Any]) -> str:
    try:
        return json.dumps({"name": name, "config": config}, sort_keys=True)
    except TypeError as error:
        raise ValueError(
            f"config of {name!r} must hold only JSON values (numbers, strings, lists, dicts): "
            f"{error}"
        ) from None


def cache_path(name: str, config: dict[str, Any]) -> Path:
    """Where `cached` stores the result of `name` under `config`.

    Args:
        name: A short name (letters, digits, "-", "_").
        config: Everything the result depends on, as JSON values.

    Returns:
        ``cache_dir() / f"{name}-{hash}.pt"``, the hash being SHA-256 of the name and config.

    Raises:
        ValueError: If `name` has other characters or `config` is not JSON-serializable.
    """
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"name must be letters, digits, '-' or '_', got {name!r}")
    digest = hashlib.sha256(_config_json(name, config).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}.pt"


def cached(name: str, config: dict[str, Any], compute: Callable[[], T], refresh: bool = False) -> T:
    """Return the cached result of `compute` for this name and configuration, or compute it.

    The result is saved with `torch.save` in `cache_dir()` under a hash of `name` and
    `config`, and loaded with ``torch.load(weights_only=True)``: store tensors, state dicts,
    numbers, strings, lists, dicts and `History` objects. Put everything the result depends
    on in `config`, so a change gives a new entry instead of a stale one: for a training run,
    pass ``experiment_key(config)``, which adds the package's source, the corpus version and
    the library versions to the hyperparameters.

    Args:
        name: A short name of the experiment (letters, digits, "-", "_").
        config: Everything the result depends on, as JSON values.
        compute: Called without arguments when there is no cached result.
        refresh: Compute and overwrite even if a result is cached.

    Returns:
        The cached or freshly computed result.

    Raises:
        ValueError: If `name` or `config` is not usable as a key (see `cache_path`).

    Example:
        >>> history = cached("demo", {"lr": 0.1}, lambda: {"loss": [1.0, 0.5]})  # doctest: +SKIP
    """
    path = cache_path(name, config)
    key = _config_json(name, config)
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
                if entry.get("key") == key:
                    return entry["value"]
        started = time.perf_counter()
        value = compute()
        seconds = time.perf_counter() - started
        # Write to a temporary file, then rename: a crash never leaves a half-written entry.
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as file:
            torch.save({"key": key, "value": value}, file)
        try:  # fail now, not at the next run, if the value cannot be loaded safely
            torch.load(file.name, weights_only=True)
        except Exception as error:
            os.unlink(file.name)
            raise ValueError(
                f"the result of {name!r} cannot be cached: torch.load(weights_only=True) "
                f"refuses it ({error}). Cache tensors, state dicts, numbers, strings, lists, "
                "dicts and History objects, or register your class with "
                "torch.serialization.add_safe_globals"
            ) from None
        os.replace(file.name, path)
        _record_seconds(name, seconds)  # only for a result that was stored
    return value


#: The file of `cache_dir()` where `cached` notes how long each computation took.
COMPUTE_TIMES = "compute-seconds.json"


def _record_seconds(name: str, seconds: float) -> None:
    """Note in `COMPUTE_TIMES` that computing `name` took `seconds` (wall clock) just now."""
    path = cache_dir() / COMPUTE_TIMES
    with _lock(path):
        try:
            times = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            times = {}
        times[name] = {
            "seconds": round(seconds, 1),
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
        ``{"seconds": wall clock, "cpus": CPUs the process could use, "date": "YYYY-MM-DD"}``,
        or None if this cache never computed `name` (it was never run, or the cache predates
        the record).
    """
    path = cache_dir() / COMPUTE_TIMES
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


def source_hash(*objects: Any) -> str:
    """A short hash of the source code of modules, classes or functions.

    It covers only the objects given, not what they call: for an experiment's cache key,
    `experiment_key` (which hashes the whole package) is the safe choice.

    Args:
        *objects: Modules, classes or functions.

    Returns:
        16 hex digits.
    """
    digest = hashlib.sha256()
    for obj in objects:
        digest.update(inspect.getsource(obj).encode())
    return digest.hexdigest()[:16]


def imported_modules(module: str, *, drawing_code: bool = False) -> list[str]:
    """The package's modules that `module` runs: itself and what it imports, transitively.

    Every ``import`` statement of the module's source is read (those inside functions too, so
    a lazy import counts), without running anything, and the modules of this package that they
    name are followed in turn. A subpackage's ``__init__`` counts when a module imports from
    it; the top-level ``attention_book/__init__.py``, which only re-exports, does not. The
    drawing code (`DRAWING_CODE`) is left out, since it never changes a computed result,
    unless `drawing_code` is set: what a figure depends on includes how it is drawn.

    Args:
        module: A module of this package, e.g. ``"attention_book.experiments.bahdanau"``.
        drawing_code: Follow the drawing code too (for a figure's key).

    Returns:
        The dotted names, sorted.

    Raises:
        ValueError: If `module` is not a module of this package.
    """
    root = Path(__file__).resolve().parents[1]
    if _module_file(root, module) is None:
        raise ValueError(f"module must be a module of {root.name}, got {module!r}")
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in seen or path is None or (not drawing_code and _is_drawing_code(root, path)):
            continue
        seen.add(name)
        todo += _imported_names(name, path)
    return sorted(seen)


def _module_file(root: Path, name: str) -> Path | None:
    """The source file of module `name` of the package at `root`, or None."""
    parts = name.split(".")
    if parts[0] != root.name or name == root.name:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_drawing_code(root: Path, path: Path) -> bool:
    return path.relative_to(root).parts[0] in DRAWING_CODE


def _imported_names(name: str, path: Path) -> list[str]:
    """Module names that the source at `path` (module `name`) imports, ours or not."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import: resolve it against this module's package
                package = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*package, *([base] if base else [])])
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # submodules, if any
    return names


@functools.cache
def package_source_hash(module: str | None = None, *, drawing_code: bool = False) -> str:
    """A short hash of the package's source that a result can depend on.

    With `module`, the files of `imported_modules(module)`: an edit to any code the module
    runs (its own, a mask it calls, the training loop, a data loader) gives a new hash, and an
    edit elsewhere (another chapter's model, the drawing code) does not. Without it, every
    Python file of the package except `DRAWING_CODE`. The hash is taken once per process, so
    it describes the code this process runs even if the files are edited while it runs; a new
    process sees the edit.

    Args:
        module: A module of this package whose imports bound the hash, or None for all.
        drawing_code: With `module`, include the drawing code it imports (a figure's key:
            `attention_book.figures.figure_key`).

    Returns:
        16 hex digits.
    """
    root = Path(__file__).resolve().parents[1]
    if module is None:
        paths = [p for p in root.rglob("*.py") if not _is_drawing_code(root, p)]
    else:
        names = imported_modules(module, drawing_code=drawing_code)
        paths = [_module_file(root, name) for name in names]
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.relative_to(root).as_posix()):
        source = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()} {len(source)}\n".encode())
        digest.update(source)
    return digest.hexdigest()[:16]


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


def experiment_key(config: dict[str, Any], module: str | None = None) -> dict[str, Any]:
    """The cache key of an experiment: its configuration and everything else it depends on.

    Pass the result to `cached` as its config:
    ``cached("name", experiment_key(config, __name__), compute)`` from the experiment's module.
    Besides `config`, the key holds `package_source_hash(module)` (the source of every package
    module the experiment's module runs), the built-in corpus's ``CORPUS_VERSION`` and
    `library_versions()`, so editing any function the experiment runs, regenerating the
    corpus, or upgrading PyTorch trains again instead of loading an older result, while an
    edit to another chapter's code keeps it.

    Args:
        config: The experiment's own settings (hyperparameters, seed, sizes), as JSON values.
        module: The module that runs the experiment (its ``__name__``); None hashes every
            module of the package but the drawing code.

    Returns:
        A new dict: `config` plus the keys "source", "corpus_version" and "libraries".

    Raises:
        ValueError: If `config` already uses one of those three keys, or `module` is not a
            module of this package.
    """
    from attention_book.data import CORPUS_VERSION

    reserved = sorted({"source", "corpus_version", "libraries"} & config.keys())
    if reserved:
        raise ValueError(f"config must not hold the keys that experiment_key adds: {reserved}")
    return {
        **config,
        "source": package_source_hash(module),
        "corpus_version": CORPUS_VERSION,
        "libraries": library_versions(),
    }
