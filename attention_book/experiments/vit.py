"""The Vision Transformer chapter's experiment: a small ViT against a small ResNet on digits.

Both models learn scikit-learn's 8x8 digits (no download) with the same optimizer, schedule,
number of steps, batch size and augmentation, and parameter counts within 20%. Each model's
learning rate is the best of a short list on a validation split of the training images. Then
both train on subsets of several sizes with several seeds (the data-efficiency curve), and on
all the data with random shifts. In reading order: configuration and data, augmentation, the
CNN, the models, training, the learning-rate choice, the cached result, the measurements on
the trained ViTs. Everything is cached under `vit_cache_key`.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from attention_book.data import load_digits_data
from attention_book.seq2seq import num_parameters
from attention_book.training import cached, evaluate_accuracy, experiment_key, fit, set_seed
from attention_book.training.schedules import schedule_per_step
from attention_book.vit import ViT, mean_attention_distance

__all__ = [
    "VIT_CONFIG",
    "ResidualBlock",
    "SmallResNet",
    "balanced_subset",
    "random_shift",
    "vit_attention_distances",
    "vit_cache_key",
    "vit_digits",
    "vit_experiment",
    "vit_make_models",
    "vit_trained_model",
    "warmup_cosine",
]

#: The experiment's settings. Changing any value trains again (new cache entry).
VIT_CONFIG: dict[str, Any] = {
    # The ViT: 8x8 images cut into 2x2 patches, 16 patches and the class token.
    "patch_size": 2,
    "num_hiddens": 32,
    "mlp_num_hiddens": 64,
    "num_heads": 4,
    "num_blks": 4,
    "dropout": 0.0,
    # The CNN: channels of its first stage (doubled in the second).
    "cnn_channels": 16,
    # Training, the same for both models.
    "batch_size": 64,
    "num_epochs": 14,  # an epoch: as many images as the full training split holds
    "warmup_epochs": 1,
    "weight_decay": 0.05,
    "max_shift": 0,  # augmentation of the main runs: none (see "augmented_shift")
    # Each model's learning rate: the best of these on a validation split.
    "lr_choices": [3e-3, 1e-2, 3e-2],
    "validation_size": 300,  # held out of the 1,347 training images for that choice
    # The data-efficiency curve.
    "train_sizes": [150, 300, 600, 1347],  # 1347: the whole training split
    "seeds": [0, 1, 2],
    # Extra full-data runs with random shifts of up to this many pixels.
    "augmented_shift": 1,
    "augmented_seeds": [0, 1],
}


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
    data = load_digits_data(batch_size=VIT_CONFIG["batch_size"])
    train_images, train_labels = data.train_loader.dataset.tensors
    test_images, test_labels = data.test_loader.dataset.tensors
    return train_images, train_labels, test_images, test_labels


def balanced_subset(labels: Tensor, size: int, seed: int) -> Tensor:
    """Indices of `size` examples with the classes as balanced as possible, chosen at random.

    The examples are shuffled with `seed`, then taken round-robin over the classes: first one
    example of each class, then a second of each, and so on.

    Args:
        labels: The class of each example.
        size: How many examples to keep, at most ``len(labels)``.
        seed: Seed of the shuffle.

    Returns:
        The chosen indices, in the shuffled order.

    Shapes:
        - labels: ``(n,)``
        - returns: ``(size,)``

    Raises:
        ValueError: If `size` is not between 1 and ``len(labels)``.
    """
    if not 1 <= size <= len(labels):
        raise ValueError(f"size must be in [1, {len(labels)}] (len(labels)), got {size}")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    shuffled = labels[order]
    rank = torch.zeros_like(shuffled)  # how many of the same class come before, in order
    for label in shuffled.unique():
        where = shuffled == label
        rank[where] = torch.arange(int(where.sum()))
    by_rank = torch.argsort(rank * len(labels) + torch.arange(len(labels)))  # stable round-robin
    return order[by_rank[:size]]


# --8<-- [end:data]


# --8<-- [start:random_shift]
def random_shift(images: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Shift each image by a random whole number of pixels, filling with the background.

    Each image moves by its own offset in ``[-max_shift, max_shift]`` along each axis; the
    pixels that enter are the image's smallest value (the blank background of a digit).

    Args:
        images: A batch of images.
        max_shift: Largest shift in pixels.
        generator: The random generator of the shifts.

    Returns:
        The shifted images.

    Shapes:
        - images: ``(batch, channels, height, width)``
        - returns: same as ``images``
    """
    if max_shift == 0:
        return images
    batch, _, height, width = images.shape
    background = images.amin(dim=(1, 2, 3)).view(batch, 1, 1, 1)  # (batch, 1, 1, 1)
    padded = F.pad(images - background, [max_shift] * 4) + background  # border = background
    top = torch.randint(0, 2 * max_shift + 1, (batch,), generator=generator)
    left = torch.randint(0, 2 * max_shift + 1, (batch,), generator=generator)
    rows = top[:, None] + torch.arange(height)  # (batch, height)
    cols = left[:, None] + torch.arange(width)  # (batch, width)
    batch_index = torch.arange(batch)[:, None, None]  # (batch, 1, 1)
    # Advanced indexing picks a (height, width) window per image: (batch, height, width, C).
    windows = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
    return windows.permute(0, 3, 1, 2)  # (batch, channels, height, width)


# --8<-- [end:random_shift]


# --8<-- [start:cnn]
class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a shortcut, as in ResNet (He et al., 2016).

    Args:
        in_channels: Channels of the input.
        out_channels: Channels of the output.
        stride: Stride of the first convolution (2 halves the height and width).

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, out_channels, height // stride, width // stride)``
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:  # match the shape with a 1x1 conv
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, X: Tensor) -> Tensor:
        """Map feature maps ``X`` to new ones: ``relu(F(X) + shortcut(X))``."""
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        return F.relu(Y + self.shortcut(X))


class SmallResNet(nn.Module):
    """A three-block ResNet for small images: the CNN the ViT is compared with.

    A 3x3 stem, one block at full resolution, one that halves it and doubles the channels,
    one more, then global average pooling and a linear classifier.

    Args:
        channels: Channels of the first stage.
        num_classes: Number of classes.
        in_channels: Channels of the images.

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, num_classes)`` logits
    """

    def __init__(self, channels: int, num_classes: int = 10, *, in_channels: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            ResidualBlock(channels, channels),
            ResidualBlock(channels, 2 * channels, stride=2),
            ResidualBlock(2 * channels, 2 * channels),
            nn.AdaptiveAvgPool2d(1),  # (batch, 2 * channels, 1, 1)
            nn.Flatten(),  # (batch, 2 * channels)
            nn.Linear(2 * channels, num_classes),
        )

    def forward(self, X: Tensor) -> Tensor:
        """Map a batch of images ``X`` to class logits."""
        return self.net(X)


# --8<-- [end:cnn]


# --8<-- [start:make_models]
def vit_make_models(config: dict[str, Any] = VIT_CONFIG) -> tuple[ViT, SmallResNet]:
    """The two models of the experiment, freshly initialized (seed the generator first).

    Args:
        config: Sizes of both models (see `VIT_CONFIG`).

    Returns:
        (ViT, CNN), for 8x8 grey images and 10 classes.
    """
    sizes = [config[k] for k in ("patch_size", "num_hiddens", "mlp_num_hiddens", "num_heads")]
    vit = ViT(8, *sizes, config["num_blks"], config["dropout"], config["dropout"], in_channels=1)
    return vit, SmallResNet(config["cnn_channels"])


# --8<-- [end:make_models]


# --8<-- [start:train]
def warmup_cosine(step: int, warmup_steps: int, total_steps: int) -> float:
    """Learning-rate factor: linear warm-up to 1, then a cosine decay to 0.

    Args:
        step: Optimizer steps already taken (0 for the first step).
        warmup_steps: Steps of the warm-up.
        total_steps: Steps of the whole training.

    Returns:
        ``(step + 1) / warmup_steps`` during the warm-up, then
        ``(1 + cos(pi * progress)) / 2`` with progress going from 0 to 1.

    Raises:
        ValueError: If ``warmup_steps`` is not between 1 and ``total_steps - 1``.
    """
    if not 1 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps must be in [1, total_steps - 1] = [1, {total_steps - 1}], "
            f"got {warmup_steps}"
        )
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def _train(
    model: nn.Module,
    train: tuple[Tensor, Tensor],
    evaluation: tuple[Tensor, Tensor],
    config: dict[str, Any],
    *,
    lr: float,
    max_shift: int,
    seed: int,
) -> dict[str, Any]:
    """Train one model and measure its accuracy on `evaluation` after every epoch.

    An "epoch" is as many images as the full training split holds, drawn with replacement
    from the (possibly smaller) training subset, so every subset size gets the same number
    of optimizer steps. AdamW; the learning rate follows `warmup_cosine`, stepped after
    every optimizer step.
    """
    set_seed(seed)
    epoch_size = config["train_sizes"][-1]
    dataset = TensorDataset(*train)
    generator = torch.Generator().manual_seed(seed)
    sampler = RandomSampler(dataset, num_samples=epoch_size, generator=generator)
    loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)
    eval_loader = DataLoader(TensorDataset(*evaluation), batch_size=512)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=config["weight_decay"])
    total = config["num_epochs"] * len(loader)
    warmup = config["warmup_epochs"] * len(loader)
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
        config["num_epochs"],
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
    config: dict[str, Any], train: tuple[Tensor, Tensor], bar: Any
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Each model's learning rate: the best validation accuracy among ``lr_choices``.

    The validation images are a class-balanced part of the training split; the models
    train on the rest, with seed 0 and the main runs' settings. A tie goes to the smaller
    learning rate. The test images are not used.
    """
    images, labels = train
    order = balanced_subset(labels, len(labels), seed=0)  # classes interleaved
    held_out, kept = order[: config["validation_size"]], order[config["validation_size"] :]
    trials = []
    for lr in config["lr_choices"]:
        set_seed(0)
        for name, model in zip(("vit", "cnn"), vit_make_models(config), strict=True):
            bar.set_description(f"choosing lr: {name}, lr={lr:g}")
            run = _train(
                model,
                (images[kept], labels[kept]),
                (images[held_out], labels[held_out]),
                config,
                lr=lr,
                max_shift=config["max_shift"],
                seed=0,
            )
            trials.append({"model": name, "lr": lr, "validation_accuracy": run["accuracy"]})
            trials[-1]["cpu_seconds"] = run["cpu_seconds"]
            bar.update(1)
    chosen = {}
    for name in ("vit", "cnn"):
        mine = [t for t in trials if t["model"] == name]
        best = max(mine, key=lambda t: (t["validation_accuracy"], -t["lr"]))
        chosen[name] = best["lr"]
    return chosen, trials


# --8<-- [end:choose_lr]


def _train_all(config: dict[str, Any]) -> dict[str, Any]:
    """The learning-rate choice, every main run (size x seed x model), the augmented runs."""
    train_images, train_labels, test_images, test_labels = vit_digits()
    full = config["train_sizes"][-1]
    sizes, seeds = config["train_sizes"], config["seeds"]
    plan = [(size, config["max_shift"], seed) for size in sizes for seed in seeds]
    plan += [(full, config["augmented_shift"], s) for s in config["augmented_seeds"]]
    runs: list[dict[str, Any]] = []
    state_dicts: dict[str, Any] = {}
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these small models gain little from a second thread
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        with _progress_bar(2 * (len(config["lr_choices"]) + len(plan))) as bar:
            lrs, trials = _choose_lr(config, (train_images, train_labels), bar)
            for size, max_shift, seed in plan:
                chosen = balanced_subset(train_labels, size, seed)
                set_seed(seed)
                models = dict(zip(("vit", "cnn"), vit_make_models(config), strict=True))
                for name, model in models.items():
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
                    if size == full and max_shift == config["max_shift"]:
                        state_dicts[f"{name}-{seed}"] = model.state_dict()
                    bar.update(1)
    finally:
        torch.set_num_threads(num_threads)
    vit, cnn = vit_make_models(config)
    return {
        "lr": lrs,
        "lr_trials": trials,
        "runs": runs,
        "state_dicts": state_dicts,
        "num_parameters": {"vit": num_parameters(vit), "cnn": num_parameters(cnn)},
        "total_seconds": time.perf_counter() - start,
        "total_cpu_seconds": time.process_time() - cpu_start,
    }


# --8<-- [start:experiment]
def vit_cache_key() -> dict[str, Any]:
    """The experiment's cache key: everything its result depends on.

    `experiment_key` adds the source of every package module this one runs and the library
    versions to `VIT_CONFIG`; a digest of the digits themselves is added too, so a
    scikit-learn release that changed them would train again.

    Returns:
        A dict of JSON values, for `cached`.
    """
    digest = hashlib.sha256()
    for tensor in vit_digits():
        digest.update(tensor.numpy().tobytes())
    return experiment_key({**VIT_CONFIG, "data": digest.hexdigest()[:16]}, __name__)


def vit_experiment() -> dict[str, Any]:
    """Train (or load from the cache) every run of the experiment.

    The first call trains 34 small models, about three minutes on two CPU cores; every
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
    return cached("vit", vit_cache_key(), lambda: _train_all(VIT_CONFIG))


# --8<-- [end:experiment]


def vit_trained_model(seed: int = 0) -> ViT:
    """The ViT trained on the whole training split with `seed`, from the cache.

    Args:
        seed: One of ``VIT_CONFIG["seeds"]``.

    Returns:
        The ViT, in eval mode.

    Raises:
        ValueError: If `seed` is not one of the experiment's seeds.
    """
    if seed not in VIT_CONFIG["seeds"]:
        raise ValueError(f"seed must be one of {VIT_CONFIG['seeds']}, got {seed}")
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
