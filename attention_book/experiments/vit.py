"""The Vision Transformer chapter's experiment: a small ViT against a small ResNet on digits.

Both models learn scikit-learn's 8x8 digits (no download) with the same optimizer, schedule,
number of steps, batch size and augmentation, and parameter counts within 20%. Each model's
learning rate is the best of a short list on a validation split of the training images. Then
both train on subsets of several sizes with several seeds (the data-efficiency curve), and on
all the data with random shifts. In reading order: the configuration, the data, the models,
training, the learning-rate choice, the whole run (`vit_run`), the stored result, the
measurements on the trained ViTs. The CNN is `attention_book.resnet.SmallResNet`; the subsets
and shifts come from `attention_book.data.images`, the schedule from
`attention_book.training.schedules`. Everything is stored under the key the experiment
declares (`vit_cache_key`), and `RUNS` declares it for the probe test and the referee.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from attention_book.data.images import balanced_subset, load_digits_data, random_shift
from attention_book.resnet import SmallResNet
from attention_book.store import Run, cached, declared_key, digest
from attention_book.timing import torch_threads
from attention_book.training.loop import evaluate_accuracy, fit, set_seed
from attention_book.training.metrics import num_parameters
from attention_book.training.schedules import schedule_per_step, warmup_cosine
from attention_book.vit import ViT, mean_attention_distance

__all__ = [
    "MODELS",
    "RUNS",
    "VERSION",
    "VIT_CONFIG",
    "VIT_PROBE",
    "VitConfig",
    "vit_attention_distances",
    "vit_cache_key",
    "vit_digits",
    "vit_experiment",
    "vit_headline",
    "vit_make_models",
    "vit_model_run",
    "vit_run",
    "vit_trained_model",
]

# --8<-- [start:config]
#: Bump when what `vit_run` computes changes for the same configuration (the models, the
#: training, the choice of learning rates); not for a refactor, a docstring or a moved helper.
VERSION = 2


@dataclass(frozen=True)
class VitConfig:
    """The settings of the experiment, the same for both models: changing any trains again.

    Attributes:
        patch_size: Side of the ViT's square patches (8x8 images: 2 gives 16 patches).
        num_hiddens: Width of the ViT.
        mlp_num_hiddens: Hidden width of its MLPs.
        num_heads: Heads per attention layer.
        num_blks: Transformer blocks.
        dropout: Dropout of the ViT (none).
        cnn_channels: Channels of the CNN's first stage (doubled in the second).
        batch_size: Images per batch.
        num_epochs: Epochs; an epoch is as many images as the largest training size.
        warmup_epochs: Epochs of linear warm-up before the cosine decay.
        weight_decay: AdamW's weight decay.
        max_shift: Random shift (pixels) of the main runs' images: none.
        lr_choices: Each model's learning rate is the best of these on a validation split.
        validation_size: Training images held out for that choice.
        train_sizes: Training-set sizes of the data-efficiency curve; the last is the whole
            training split.
        seeds: Seeds of every size.
        augmented_shift: Largest random shift of the extra full-data runs.
        augmented_seeds: Seeds of those runs.
    """

    patch_size: int = 2
    num_hiddens: int = 32
    mlp_num_hiddens: int = 64
    num_heads: int = 4
    num_blks: int = 4
    dropout: float = 0.0
    cnn_channels: int = 16
    batch_size: int = 64
    num_epochs: int = 11
    warmup_epochs: int = 1
    weight_decay: float = 0.05
    max_shift: int = 0
    lr_choices: tuple[float, ...] = (3e-3, 1e-2)
    validation_size: int = 300
    train_sizes: tuple[int, ...] = (150, 300, 600, 1347)
    seeds: tuple[int, ...] = (0, 1, 2)
    augmented_shift: int = 1
    augmented_seeds: tuple[int, ...] = (0, 1)


#: The experiment of the chapter: 1,347 images is the whole training split.
VIT_CONFIG = VitConfig()
#: Its two models: the Vision Transformer and the small CNN (a ResNet) it is compared with.
MODELS = ("vit", "cnn")
#: Its probe: the same steps (the choice of rates, two sizes, a shifted run) on a few batches.
VIT_PROBE = VitConfig(
    num_epochs=2,
    lr_choices=(1e-2, 3e-2),
    validation_size=20,
    train_sizes=(30, 60),
    seeds=(0,),
    augmented_seeds=(0,),
)
# --8<-- [end:config]


# --8<-- [start:data]
def vit_digits() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The digits as tensors: 1,347 training and 450 test images, normalized.

    The split of `load_digits_data` (stratified, fixed seed); pixels are normalized with the
    training split's mean and standard deviation.

    Returns:
        (train images, train labels, test images, test labels).

    Shapes:
        - images: ``(n, 1, 8, 8)``, float32
        - labels: ``(n,)``, long
    """
    data = load_digits_data(batch_size=VIT_CONFIG.batch_size)
    train_images, train_labels = data.train_loader.dataset.tensors
    test_images, test_labels = data.test_loader.dataset.tensors
    return train_images, train_labels, test_images, test_labels


# --8<-- [end:data]


# --8<-- [start:make_models]
def vit_make_models(config: VitConfig = VIT_CONFIG) -> tuple[ViT, SmallResNet]:
    """The two models of the experiment, freshly initialized (seed the generator first).

    Args:
        config: Sizes of both models (see `VIT_CONFIG`).

    Returns:
        (ViT, CNN), for 8x8 grey images and 10 classes.
    """
    sizes = config.patch_size, config.num_hiddens, config.mlp_num_hiddens, config.num_heads
    vit = ViT(8, *sizes, config.num_blks, config.dropout, config.dropout, in_channels=1)
    return vit, SmallResNet(config.cnn_channels)


# --8<-- [end:make_models]


# --8<-- [start:train]
def _train(
    model: nn.Module,
    train: tuple[Tensor, Tensor],
    evaluation: tuple[Tensor, Tensor],
    config: VitConfig,
    *,
    lr: float,
    max_shift: int,
    seed: int,
) -> dict[str, Any]:
    """Train one model and measure its accuracy on `evaluation` after every epoch.

    An "epoch" is as many images as the full training split holds, taken from the (possibly
    smaller) training subset in shuffled passes (each image once per pass, a new order for
    each pass), so every subset size gets the same number of optimizer steps. AdamW (its
    fused CPU kernel); the learning rate follows `warmup_cosine`, stepped after
    every optimizer step.
    """
    set_seed(seed)
    epoch_size = config.train_sizes[-1]
    dataset = TensorDataset(*train)
    generator = torch.Generator().manual_seed(seed)
    sampler = RandomSampler(dataset, num_samples=epoch_size, generator=generator)
    loader = DataLoader(dataset, batch_size=config.batch_size, sampler=sampler)
    eval_loader = DataLoader(TensorDataset(*evaluation), batch_size=512)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=lr, weight_decay=config.weight_decay, fused=True
    )
    total = config.num_epochs * len(loader)
    warmup = config.warmup_epochs * len(loader)
    schedule_per_step(optimizer, lambda step: warmup_cosine(step, warmup, total))
    shifts = torch.Generator().manual_seed(seed + 1000)

    def loss_fn(model: nn.Module, batch: list[Tensor]) -> Tensor:
        X, y = batch
        return F.cross_entropy(model(random_shift(X, max_shift, shifts)), y)

    def end_of_epoch(model: nn.Module) -> dict[str, float]:
        return {"accuracy": evaluate_accuracy(model, eval_loader)}

    start, cpu_start = time.perf_counter(), time.process_time()
    history = fit(
        model,
        loader,
        loss_fn,
        config.num_epochs,
        optimizer=optimizer,
        device="cpu",
        progress=False,
        valid_fn=end_of_epoch,
    )
    return {
        "train_seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - cpu_start,
        "train_loss": history.train_loss,
        "test_accuracy": history.metrics["accuracy"],  # per epoch
        "accuracy": history.metrics["accuracy"][-1],
    }


# --8<-- [end:train]


def _progress_bar(total: int) -> Any:
    """One bar over all runs, shown only where a person watches (a terminal, a notebook)."""
    from tqdm.auto import tqdm

    return tqdm(
        total=total, unit="run", disable=not (sys.stderr.isatty() or "ipykernel" in sys.modules)
    )


# --8<-- [start:choose_lr]
def _choose_lr(
    config: VitConfig, train: tuple[Tensor, Tensor], bar: Any, models: Sequence[str] = MODELS
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Each model's learning rate: the best validation accuracy among ``lr_choices``.

    The validation images are a class-balanced part of the training split; the models
    train on the rest, with seed 0 and the main runs' settings. A tie goes to the smaller
    learning rate. The test images are not used. Each of `models` chooses its own.
    """
    images, labels = train
    order = balanced_subset(labels, len(labels), seed=0)  # classes interleaved
    held_out, kept = order[: config.validation_size], order[config.validation_size :]
    fit_on, validate_on = (images[kept], labels[kept]), (images[held_out], labels[held_out])
    trials = []
    for lr in config.lr_choices:
        set_seed(0)
        for name, model in zip(MODELS, vit_make_models(config), strict=True):
            if name not in models:
                continue
            bar.set_description(f"choosing lr: {name}, lr={lr:g}")
            run = _train(
                model, fit_on, validate_on, config, lr=lr, max_shift=config.max_shift, seed=0
            )
            trials.append({"model": name, "lr": lr, "validation_accuracy": run["accuracy"]})
            trials[-1]["cpu_seconds"] = run["cpu_seconds"]
            bar.update(1)
    chosen = {}
    for name in models:
        mine = [t for t in trials if t["model"] == name]
        best = max(mine, key=lambda t: (t["validation_accuracy"], -t["lr"]))
        chosen[name] = best["lr"]
    return chosen, trials


# --8<-- [end:choose_lr]


# --8<-- [start:run]
def vit_run(config: VitConfig = VIT_CONFIG, models: Sequence[str] = MODELS) -> dict[str, Any]:
    """The learning-rate choice, every main run (size x seed x model), the augmented runs.

    The full result (`vit_experiment`) and the probe (`VIT_PROBE`) both come from here. Both
    models are built from each seed whichever of them train, so a model trained alone is
    the one trained beside the other. The models train on one thread: these small models
    gain little from a second one.

    Args:
        config: The experiment's settings.
        models: Which of `MODELS` to train.

    Returns:
        See `vit_experiment`: the same fields, for these models only.
    """
    train_images, train_labels, test_images, test_labels = vit_digits()
    full = config.train_sizes[-1]
    sizes, seeds = config.train_sizes, config.seeds
    plan = [(size, config.max_shift, seed) for size in sizes for seed in seeds]
    plan += [(full, config.augmented_shift, s) for s in config.augmented_seeds]
    runs: list[dict[str, Any]] = []
    state_dicts: dict[str, Any] = {}
    start, cpu_start = time.perf_counter(), time.process_time()
    total = len(models) * (len(config.lr_choices) + len(plan))
    with torch_threads(1), _progress_bar(total) as bar:
        lrs, trials = _choose_lr(config, (train_images, train_labels), bar, models)
        for size, max_shift, seed in plan:
            chosen = balanced_subset(train_labels, size, seed)
            set_seed(seed)
            built = dict(zip(MODELS, vit_make_models(config), strict=True))
            for name, model in built.items():
                if name not in models:
                    continue
                bar.set_description(f"{name}, {size} images, shift {max_shift}")
                run = _train(
                    model,
                    (train_images[chosen], train_labels[chosen]),
                    (test_images, test_labels),
                    config,
                    lr=lrs[name],
                    max_shift=max_shift,
                    seed=seed,
                )
                runs.append({"model": name, "size": size, "seed": seed, "shift": max_shift})
                runs[-1].update(run)
                if size == full and max_shift == config.max_shift:
                    state_dicts[f"{name}-{seed}"] = model.state_dict()
                bar.update(1)
    built = dict(zip(MODELS, vit_make_models(config), strict=True))
    return {
        "lr": lrs,
        "lr_trials": trials,
        "runs": runs,
        "state_dicts": state_dicts,
        "num_parameters": {name: num_parameters(built[name]) for name in models},
        "total_seconds": time.perf_counter() - start,
        "total_cpu_seconds": time.process_time() - cpu_start,
    }


# --8<-- [end:run]


# --8<-- [start:experiment]
def vit_cache_key() -> dict[str, Any]:
    """The experiment's key in the store: what its result depends on, as it declares it.

    The configuration, this module's `VERSION`, a digest of the digits themselves (a
    scikit-learn release that changed them would train again) and the library versions
    (`declared_key`): no source code, so a refactor trains nothing.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(VIT_CONFIG, VERSION, digits=digest(*vit_digits()))


def vit_model_run(name: str) -> dict[str, Any]:
    """Train (or load from the cache) every run of one model: its rate, sizes, seeds, shifts.

    Each model is a run of its own in the store, ``vit-vit`` and ``vit-cnn``, under the
    experiment's key: each trains in about a minute of CPU, and two cores train both at once.

    Args:
        name: One of `MODELS`.

    Returns:
        `vit_run`'s result for that model alone.
    """
    return cached(f"vit-{name}", vit_cache_key(), lambda: vit_run(VIT_CONFIG, (name,)))


def vit_experiment() -> dict[str, Any]:
    """Every run of the experiment, both models, trained or loaded (`vit_model_run`).

    The first call trains 32 small models, about a minute and a half of CPU in all; every
    later call with the same `vit_cache_key` loads the result in a second.

    Returns:
        A dict with "lr" (the chosen learning rate of "vit" and "cnn"), "lr_trials" (the
        validation accuracy of every choice), "runs" (one dict per model, training size,
        seed and augmentation: "model" ("vit" or "cnn"), "size", "seed", "shift" (0 for the
        main runs), "accuracy" (final test accuracy), per epoch "train_loss" and
        "test_accuracy", "train_seconds" (wall clock) and "cpu_seconds"), "state_dicts" (the
        full-data models without augmentation, keyed "vit-0", "cnn-0", ...),
        "num_parameters" per model, "total_seconds" and "total_cpu_seconds" (wall clock and
        CPU time of all the training).
    """
    parts = [vit_model_run(name) for name in MODELS]
    merged: dict[str, Any] = {}
    for field in ("lr", "state_dicts", "num_parameters"):
        merged[field] = {k: v for part in parts for k, v in part[field].items()}
    for field in ("lr_trials", "runs"):
        merged[field] = [entry for part in parts for entry in part[field]]
    for field in ("total_seconds", "total_cpu_seconds"):
        merged[field] = sum(part[field] for part in parts)
    return merged


# --8<-- [end:experiment]


def vit_trained_model(seed: int = 0) -> ViT:
    """The ViT trained on the whole training split with `seed`, from the cache.

    Args:
        seed: One of ``VIT_CONFIG.seeds``.

    Returns:
        The ViT, in eval mode.

    Raises:
        ValueError: If `seed` is not one of the experiment's seeds.
    """
    if seed not in VIT_CONFIG.seeds:
        raise ValueError(f"seed must be one of {list(VIT_CONFIG.seeds)}, got {seed}")
    vit, _ = vit_make_models()
    vit.load_state_dict(vit_experiment()["state_dicts"][f"vit-{seed}"])
    return vit.eval()


# --8<-- [start:attention_distances]
@torch.no_grad()
def vit_attention_distances(vit: ViT, images: Tensor) -> Tensor:
    """Mean attention distance of every head of every block of a ViT, over some images.

    Args:
        vit: The ViT (in eval mode).
        images: The images to average over.

    Returns:
        Distances in pixels, one row per block and one column per head.

    Shapes:
        - images: ``(n, in_channels, height, width)``
        - returns: ``(num_blks, num_heads)``
    """
    vit(images)
    embedding = vit.patch_embedding
    grid = tuple(i // p for i, p in zip(embedding.img_size, embedding.patch_size, strict=True))
    return torch.stack(
        [mean_attention_distance(w, grid, embedding.patch_size) for w in vit.attention_weights]
    )


# --8<-- [end:attention_distances]


def vit_headline(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the chapter's conclusions rest on: mean test accuracy of every setting.

    Args:
        result: `vit_experiment`'s result, or one model's (`vit_model_run`).

    Returns:
        ``{"accuracy %, vit, 150 images": ..., ..., "accuracy %, cnn, 1347 images, shift 1":
        ...}``: the mean over seeds, in percent.
    """
    numbers = {}
    settings = sorted({(run["model"], run["size"], run["shift"]) for run in result["runs"]})
    for model, size, shift in settings:
        runs = [
            r for r in result["runs"] if (r["model"], r["size"], r["shift"]) == (model, size, shift)
        ]
        label = f"accuracy %, {model}, {size} images" + (f", shift {shift}" if shift else "")
        numbers[label] = 100 * sum(r["accuracy"] for r in runs) / len(runs)
    return numbers


#: The cached runs of this module, one per model, for the probe test and the referee (which
#: holds their mean accuracies to the spread recorded over other CPU arithmetic and seeds).
RUNS = tuple(
    Run(
        f"vit-{name}",
        VERSION,
        probe=lambda name=name: vit_run(VIT_PROBE, (name,)),
        result=lambda name=name: vit_model_run(name),
        key=vit_cache_key,
        headline=vit_headline,
        tolerance=0.5,
    )
    for name in MODELS
)
