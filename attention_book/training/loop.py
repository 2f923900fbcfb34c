"""The training loop: one readable `fit` for every model of the book, and its helpers.

What differs between a translator, a classifier and a regressor is only how a batch turns
into a loss, so the caller passes that as a function ``loss_fn(model, batch)``. `fit` moves
batches to the device, steps the optimizer, clips gradients, shows a progress bar when a
person is watching, and returns a `History` of losses and metrics. `evaluate_loss` and
`evaluate_accuracy` measure a model the same way without training it.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attention_book.store import seed_offset
from attention_book.training.metrics import accuracy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "History",
    "LossFn",
    "classification_loss",
    "evaluate_accuracy",
    "evaluate_loss",
    "fit",
    "get_device",
    "set_seed",
]

LossFn = Callable[[nn.Module, Sequence[torch.Tensor]], "torch.Tensor | tuple[torch.Tensor, float]"]

# ---------------------------------------------------------------------------------------------
# Seeds and devices
# ---------------------------------------------------------------------------------------------


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and PyTorch's random generators (CPU and every GPU).

    The seed is shifted by `attention_book.store.seed_offset` (0 unless
    ``$ATTENTION_BOOK_SEED_OFFSET`` is set, as ``make crossmachine`` does to measure how far
    a training's results move with its seed).

    Args:
        seed: The seed.
    """
    seed += seed_offset()
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
        import matplotlib.pyplot as plt  # only when asked: importing training draws nothing
        from matplotlib.ticker import MaxNLocator

        from attention_book.plotting import BOOK_STYLE, new_figure

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


# History objects are plain data: let torch.load(weights_only=True), and so the result store,
# rebuild them.
torch.serialization.add_safe_globals([History])


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


def _weighted_loss(model: nn.Module, batch: Any, loss_fn: LossFn) -> tuple[torch.Tensor, float]:
    """``loss_fn(model, batch)`` and the batch's weight in the mean (its size by default)."""
    result = loss_fn(model, batch)
    loss, weight = result if isinstance(result, tuple) else (result, None)
    if loss.dim() != 0:
        raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)}")
    return loss, float(_batch_size(batch) if weight is None else weight)


def _show_progress(progress: bool | None) -> bool:
    # Auto: a bar only when a person is watching, in a terminal or a Jupyter notebook;
    # never in the site build, the tests or CI, where it would only clutter the logs.
    if progress is not None:
        return progress
    return sys.stderr.isatty() or _in_jupyter()


def _in_jupyter() -> bool:
    # A Jupyter kernel runs an IPython shell of this class; a process that merely imported
    # ipykernel (a tool that starts kernels, say) does not.
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


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
    # Training needs gradients even when the caller runs under torch.no_grad() (a figure that
    # asks for a trained model which is not cached yet): enable them for the loop.
    bar = tqdm(total=total, disable=not _show_progress(progress), unit="batch")
    with bar, torch.enable_grad():
        for epoch in range(num_epochs):
            start = time.perf_counter()
            model.train()
            loss_sum, weight_sum = 0.0, 0.0
            for batch in train_loader:
                loss, weight = _weighted_loss(model, _to_device(batch, device), loss_fn)
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
        loss, weight = _weighted_loss(model, _to_device(batch, device), loss_fn)
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
