"""Training and evaluation: a small training loop, a result cache, and trusted metrics.

`fit` is one readable loop that serves every model of the book. What differs between a
translator, a classifier and a regressor is only how a batch turns into a loss, so the
caller passes that as a function ``loss_fn(model, batch)``. The loop moves batches to the
device, steps the optimizer, clips gradients, shows a progress bar when a person is
watching, and returns a `History` of losses and metrics.

`cached` keeps trained results (state dicts, histories, numbers) in a cache directory outside
git, keyed by a hash of their configuration, so the site build and the chapters' snippets
reuse a trained model instead of training it again. ``python -m attention_book.training
clear-cache`` empties it.

BLEU comes from sacrebleu, the reference implementation, never from a hand-written copy.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import nn
from torch.nn import functional as F

from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "History",
    "accuracy",
    "bleu",
    "cache_dir",
    "cache_path",
    "cached",
    "classification_loss",
    "clear_cache",
    "evaluate_accuracy",
    "evaluate_loss",
    "fit",
    "get_device",
    "set_seed",
    "source_hash",
]

T = TypeVar("T")
LossFn = Callable[[nn.Module, Sequence[torch.Tensor]], "torch.Tensor | tuple[torch.Tensor, float]"]

# ---------------------------------------------------------------------------------------------
# Seeds and devices
# ---------------------------------------------------------------------------------------------


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's random generators (CPU and every GPU).

    Args:
        seed: The seed.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def get_device() -> torch.device:
    """The device to train on: the first CUDA GPU if there is one, else the CPU.

    Returns:
        ``torch.device("cuda")`` or ``torch.device("cpu")``.
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# ---------------------------------------------------------------------------------------------
# The training loop
# ---------------------------------------------------------------------------------------------


# --8<-- [start:History]
@dataclass
class History:
    """What happened during training, one entry per epoch.

    Attributes:
        train_loss: Mean training loss of each epoch (weighted by batch size, or by the
            weight that `loss_fn` returned, for example the number of real tokens).
        metrics: Each metric's value after each epoch, from `valid_fn`
            (for example {"valid_loss": [...], "bleu": [...]}).
        epoch_seconds: Wall-clock time of each epoch (varies from run to run, unlike the
            losses, which a fixed seed reproduces on CPU).
    """

    train_loss: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    epoch_seconds: list[float] = field(default_factory=list)

    @property
    def num_epochs(self) -> int:
        """Number of epochs recorded."""
        return len(self.train_loss)

    def plot(self, title: str | None = None) -> Figure:
        """Plot the training loss and, in a second panel, every metric, against the epoch.

        Metrics whose name ends in "loss" are drawn beside the training loss instead, so
        training and validation losses share one axis.

        Args:
            title: Optional title above the figure.

        Returns:
            The matplotlib figure.
        """
        epochs = list(range(1, self.num_epochs + 1))
        losses = {"train_loss": self.train_loss}
        losses |= {k: v for k, v in self.metrics.items() if k.endswith("loss")}
        others = {k: v for k, v in self.metrics.items() if not k.endswith("loss")}
        fig = new_figure((5.0 * (1 + bool(others)), 3.2))
        with plt.rc_context(BOOK_STYLE):
            axes = fig.subplots(1, 1 + bool(others), squeeze=False)[0]
            for name, values in losses.items():
                axes[0].plot(epochs[: len(values)], values, "o-", markersize=3, label=name)
            axes[0].set_ylabel("loss")
            axes[0].legend()
            if others:
                for name, values in others.items():
                    axes[1].plot(epochs[: len(values)], values, "o-", markersize=3, label=name)
                axes[1].set_ylabel(next(iter(others)) if len(others) == 1 else "metric")
                axes[1].legend()
            for ax in axes:
                ax.set_xlabel("epoch")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if title:
                fig.suptitle(title)
            fig.tight_layout()
        return fig


# --8<-- [end:History]


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: _to_device(value, device) for key, value in batch.items()}
    return batch


def _batch_size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    if isinstance(batch, list | tuple | dict):
        items = batch.values() if isinstance(batch, dict) else batch
        return next((_batch_size(item) for item in items), 1)
    return 1


def _show_progress(progress: bool | None) -> bool:
    # Auto: a bar only when a person is watching, in a terminal or a Jupyter notebook;
    # never in the site build, the tests or CI, where it would only clutter the logs.
    if progress is not None:
        return progress
    return sys.stderr.isatty() or "ipykernel" in sys.modules


# --8<-- [start:fit]
def fit(
    model: nn.Module,
    train_loader: Iterable,
    loss_fn: LossFn,
    num_epochs: int,
    lr: float = 1e-3,
    optimizer: torch.optim.Optimizer | None = None,
    grad_clip: float | None = None,
    device: torch.device | str | None = None,
    progress: bool | None = None,
    valid_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    seed: int | None = None,
) -> History:
    """Train a model and return its history.

    One epoch: for each batch, move it to the device, compute ``loss_fn(model, batch)``,
    backpropagate, clip the gradients' global norm to `grad_clip`, step the optimizer. After
    each epoch, `valid_fn(model)` (called in eval mode without gradients) returns metrics.

    Args:
        model: The model; it is moved to `device` and left there, in eval mode.
        train_loader: Batches (tuples of tensors, or anything `loss_fn` understands).
        loss_fn: ``loss_fn(model, batch) -> loss`` with `batch` already on the device. It
            returns a scalar mean loss, or ``(loss, weight)`` where `weight` (for example the
            number of real target tokens) weights this batch in the epoch's mean loss; by
            default a batch weighs its number of examples.
        num_epochs: Number of passes over `train_loader`.
        lr: Learning rate of the default optimizer (Adam).
        optimizer: An optimizer over `model`'s parameters; overrides `lr`.
        grad_clip: If given, the maximum global L2 norm of the gradients (RNNs need it).
        device: Where to train; None picks `get_device()`.
        progress: Show a tqdm progress bar: True, False, or None for "only in a terminal
            or a Jupyter notebook" (quiet in builds, tests and CI).
        valid_fn: ``valid_fn(model) -> {"name": value}``, run after every epoch.
        seed: If given, `set_seed(seed)` first (the loader's shuffling has its own generator).

    Returns:
        The per-epoch training loss, metrics and timings.

    Raises:
        ValueError: If `num_epochs` is negative or the loss is not a scalar.
    """
    if num_epochs < 0:
        raise ValueError(f"num_epochs must be >= 0, got {num_epochs}")
    if seed is not None:
        set_seed(seed)
    device = torch.device(device) if device is not None else get_device()
    model.to(device)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = History()
    from tqdm.auto import tqdm

    total = num_epochs * len(train_loader) if hasattr(train_loader, "__len__") else None
    with tqdm(total=total, disable=not _show_progress(progress), unit="batch") as bar:
        for epoch in range(num_epochs):
            start = time.perf_counter()
            model.train()
            loss_sum, weight_sum = 0.0, 0.0
            for batch in train_loader:
                batch = _to_device(batch, device)
                result = loss_fn(model, batch)
                loss, weight = result if isinstance(result, tuple) else (result, None)
                if loss.dim() != 0:
                    raise ValueError(
                        f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)}"
                    )
                weight = float(_batch_size(batch) if weight is None else weight)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                optimizer.step()
                loss_sum += loss.item() * weight
                weight_sum += weight
                bar.update(1)
            history.train_loss.append(loss_sum / max(weight_sum, 1e-12))
            if valid_fn is not None:
                model.eval()
                with torch.no_grad():
                    for name, value in valid_fn(model).items():
                        history.metrics.setdefault(name, []).append(float(value))
            history.epoch_seconds.append(time.perf_counter() - start)
            shown = {"loss": history.train_loss[-1]}
            shown |= {name: values[-1] for name, values in history.metrics.items()}
            bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()})
            bar.set_description(f"epoch {epoch + 1}/{num_epochs}")
    model.eval()
    return history


# --8<-- [end:fit]


def classification_loss(model: nn.Module, batch: Sequence[torch.Tensor]) -> torch.Tensor:
    """The `loss_fn` of a classifier: cross-entropy of ``model(inputs)`` against the labels.

    Args:
        model: Maps inputs to logits.
        batch: ``(inputs, labels)``.

    Returns:
        The mean cross-entropy of the batch.

    Shapes:
        - model(inputs): (batch, num_classes)
        - labels: (batch,)
    """
    inputs, labels = batch
    return F.cross_entropy(model(inputs), labels)


@torch.no_grad()
def evaluate_loss(
    model: nn.Module, loader: Iterable, loss_fn: LossFn, device: torch.device | str | None = None
) -> float:
    """Mean of `loss_fn` over a loader, in eval mode, weighted like `fit` weights it.

    Args:
        model: The model.
        loader: Batches.
        loss_fn: As in `fit`.
        device: Where to evaluate; None: where the model's parameters are.

    Returns:
        The mean loss.
    """
    device = _model_device(model) if device is None else torch.device(device)
    was_training = model.training
    model.eval()
    loss_sum, weight_sum = 0.0, 0.0
    for batch in loader:
        batch = _to_device(batch, device)
        result = loss_fn(model, batch)
        loss, weight = result if isinstance(result, tuple) else (result, None)
        weight = float(_batch_size(batch) if weight is None else weight)
        loss_sum += loss.item() * weight
        weight_sum += weight
    model.train(was_training)
    return loss_sum / max(weight_sum, 1e-12)


@torch.no_grad()
def evaluate_accuracy(
    model: nn.Module, loader: Iterable, device: torch.device | str | None = None
) -> float:
    """Classification accuracy of a model over a loader of ``(inputs, labels)``.

    Args:
        model: Maps inputs to logits.
        loader: Batches of ``(inputs, labels)``.
        device: Where to evaluate; None: where the model's parameters are.

    Returns:
        The fraction of examples whose highest logit is the label, in [0, 1].
    """
    device = _model_device(model) if device is None else torch.device(device)
    was_training = model.training
    model.eval()
    correct, total = 0.0, 0
    for inputs, labels in loader:
        logits = model(inputs.to(device))
        correct += accuracy(logits, labels.to(device)) * len(labels)
        total += len(labels)
    model.train(was_training)
    return correct / max(total, 1)


def _model_device(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


# --8<-- [start:metrics]
def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose highest logit is at the label's index.

    Args:
        logits: Class scores.
        labels: Class indices.

    Returns:
        The accuracy, in [0, 1].

    Shapes:
        - logits: (batch, num_classes)
        - labels: (batch,)

    Raises:
        ValueError: If the shapes do not match.
    """
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            "logits must have shape (batch, num_classes) and labels (batch,), got logits "
            f"{tuple(logits.shape)} and labels {tuple(labels.shape)}"
        )
    return (logits.argmax(dim=1) == labels).float().mean().item()


def bleu(
    hypotheses: Sequence[str] | Sequence[Sequence[str]],
    references: Sequence[str] | Sequence[Sequence[str]],
    tokenize: str | None = None,
) -> float:
    """Corpus-level BLEU (0 to 100) computed by sacrebleu.

    Token lists are joined with spaces and scored with sacrebleu's ``tokenize="none"``, so
    BLEU counts exactly the tokens the model produced (the book's `tokenize` already split
    punctuation). Strings are scored with sacrebleu's default "13a" tokenizer, the usual
    choice for detokenized text. Remove `<bos>`, `<eos>` and `<pad>` before calling.

    Args:
        hypotheses: One translation per sentence: strings or token lists.
        references: One reference translation per sentence, same kind as `hypotheses`.
        tokenize: Override sacrebleu's tokenizer ("none", "13a", "intl", ...).

    Returns:
        The corpus BLEU score, from 0 (no shared n-gram) to 100 (identical).

    Raises:
        ValueError: If the lists are empty or have different lengths.
    """
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length, got {len(hypotheses)} "
            f"and {len(references)}"
        )
    if not hypotheses:
        raise ValueError("hypotheses and references must not be empty")
    as_tokens = not isinstance(hypotheses[0], str)
    if as_tokens:
        hypotheses = [" ".join(tokens) for tokens in hypotheses]
        references = [" ".join(tokens) for tokens in references]
    if tokenize is None:
        tokenize = "none" if as_tokens else "13a"
    # force=True for token lists: they are tokenized on purpose, so sacrebleu's warning
    # about tokenized input does not apply.
    score = sacrebleu.corpus_bleu(
        list(hypotheses), [list(references)], tokenize=tokenize, force=as_tokens
    )
    return score.score


# --8<-- [end:metrics]


# ---------------------------------------------------------------------------------------------
# The result cache
# ---------------------------------------------------------------------------------------------


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


# --8<-- [start:cached]
def cached(name: str, config: dict[str, Any], compute: Callable[[], T], refresh: bool = False) -> T:
    """Return the cached result of `compute` for this name and configuration, or compute it.

    The result is saved with `torch.save` in `cache_dir()` under a hash of `name` and
    `config`, and loaded with ``torch.load(weights_only=True)``: store tensors, state dicts,
    numbers, strings, lists, dicts and `History` objects. Put everything the result depends
    on in `config` (hyperparameters, seed, data size, and `source_hash` of the code), so a
    change gives a new entry instead of a stale one.

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
    value = compute()
    # Write to a temporary file, then rename: a crash never leaves a half-written entry.
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as file:
        torch.save({"key": key, "value": value}, file)
    try:  # fail now, not at the next run, if the value cannot be loaded safely
        torch.load(file.name, weights_only=True)
    except Exception as error:
        os.unlink(file.name)
        raise ValueError(
            f"the result of {name!r} cannot be cached: torch.load(weights_only=True) refuses "
            f"it ({error}). Cache tensors, state dicts, numbers, strings, lists, dicts and "
            "History objects, or register your class with torch.serialization.add_safe_globals"
        ) from None
    os.replace(file.name, path)
    return value


# --8<-- [end:cached]

torch.serialization.add_safe_globals([History])


def clear_cache() -> int:
    """Delete every cached result (the ``*.pt`` files of `cache_dir()`).

    Returns:
        The number of files deleted.
    """
    removed = 0
    for path in cache_dir().glob("*.pt"):
        path.unlink()
        removed += 1
    return removed


def source_hash(*objects: Any) -> str:
    """A short hash of the source code of modules, classes or functions.

    Put it in a `cached` config so that editing the model's code retrains it.

    Args:
        *objects: Modules, classes or functions.

    Returns:
        16 hex digits.
    """
    digest = hashlib.sha256()
    for obj in objects:
        digest.update(inspect.getsource(obj).encode())
    return digest.hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m attention_book.training {clear-cache,cache-dir}``.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m attention_book.training", description="Manage the results cache."
    )
    parser.add_argument("command", choices=["clear-cache", "cache-dir"])
    args = parser.parse_args(argv)
    if args.command == "cache-dir":
        print(cache_dir())
    else:
        print(f"removed {clear_cache()} cached result(s) from {cache_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
