"""Image classification data: scikit-learn's digits (offline) and Fashion-MNIST (online).

Both loaders return an `ImageData`: seeded loaders of normalized ``(images, labels)`` batches,
the class names and the image shape. `load_digits_data` is what the Vision Transformer chapter
uses: the 1,797 8x8 digits ship with scikit-learn, which is imported only when they are loaded.
`load_fashion_mnist` reads the four Fashion-MNIST IDX files from a directory and, if asked,
downloads the missing ones with the verified `download` of `attention_book.data.files`.
Two helpers of that chapter's experiment end the file: `balanced_subset` (a class-balanced
sample of a training set) and `random_shift` (augmentation by whole-pixel shifts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from attention_book.data.files import download, file_digest, read_idx

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_URL",
    "ImageData",
    "balanced_subset",
    "load_digits_data",
    "load_fashion_mnist",
    "random_shift",
]


@dataclass
class ImageData:
    """Image classification data: loaders of ``(images, labels)`` and what they hold.

    Shapes:
        - images: (batch_size, 1, height, width), float32, normalized with the training
          split's mean and standard deviation
        - labels: (batch_size,), dtype long

    Attributes:
        train_loader: Shuffled training batches (seeded: same seed, same order).
        test_loader: Test batches, in order.
        classes: The class names, indexed by label.
        image_shape: (channels, height, width) of one image.
        mean: Pixel mean of the training split (before normalization), in [0, 1].
        std: Pixel standard deviation of the training split, in [0, 1] units.
    """

    train_loader: DataLoader
    test_loader: DataLoader
    classes: list[str]
    image_shape: tuple[int, int, int]
    mean: float
    std: float


def _image_data(
    train: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    classes: list[str],
    batch_size: int,
    upsample_to: int | None,
    seed: int,
) -> ImageData:
    """Resize, normalize with the training statistics, and wrap into loaders.

    Both image tensors are (n, 1, H, W) floats in [0, 1].
    """
    images = {"train": train[0], "test": test[0]}
    if upsample_to is not None:
        if upsample_to < 1:
            raise ValueError(f"upsample_to must be a positive size in pixels, got {upsample_to}")
        images = {
            name: torch.nn.functional.interpolate(
                x, size=(upsample_to, upsample_to), mode="bilinear", align_corners=False
            )  # (n, 1, upsample_to, upsample_to)
            for name, x in images.items()
        }
    mean, std = images["train"].mean().item(), images["train"].std().item()
    images = {name: (x - mean) / std for name, x in images.items()}
    generator = torch.Generator().manual_seed(seed)
    return ImageData(
        train_loader=DataLoader(
            TensorDataset(images["train"], train[1]),
            batch_size=batch_size,
            shuffle=True,
            generator=generator,
        ),
        test_loader=DataLoader(TensorDataset(images["test"], test[1]), batch_size=batch_size),
        classes=classes,
        image_shape=tuple(images["train"].shape[1:]),
        mean=mean,
        std=std,
    )


def load_digits_data(
    batch_size: int = 64,
    upsample_to: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> ImageData:
    """The 1,797 handwritten digits that scikit-learn ships (8x8 grey images, 10 classes).

    No download: the images are part of scikit-learn. The split is stratified (each digit
    keeps its share in both splits) and fixed by `seed`. Pixels (0 to 16) are scaled to
    [0, 1], optionally resized with bilinear interpolation, then normalized with the
    training split's mean and standard deviation.

    Args:
        batch_size: Images per batch.
        upsample_to: If given, resize every image to `upsample_to` x `upsample_to` pixels
            (for example 16 or 32, so that a Vision Transformer has several patches).
        test_fraction: Share of the images in the test split.
        seed: Seed of the split and of the training loader's shuffling.

    Returns:
        The loaders, class names ("0" to "9") and image shape.

    Shapes:
        - images in a batch: (batch_size, 1, 8, 8), or (batch_size, 1, upsample_to,
          upsample_to)
        - labels in a batch: (batch_size,)

    Raises:
        ValueError: If `upsample_to` is not positive or `test_fraction` not in (0, 1).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0  # (n, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_index, test_index = train_test_split(
        np.arange(len(labels)), test_size=test_fraction, stratify=digits.target, random_state=seed
    )
    train_index, test_index = torch.from_numpy(train_index), torch.from_numpy(test_index)
    return _image_data(
        (images[train_index], labels[train_index]),
        (images[test_index], labels[test_index]),
        [str(digit) for digit in range(10)],
        batch_size,
        upsample_to,
        seed,
    )


#: Where `load_fashion_mnist` downloads the files from (the dataset's GitHub repository).
FASHION_MNIST_URL = (
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"
)

#: The four Fashion-MNIST files and the MD5 checksums the dataset's authors publish.
FASHION_MNIST_FILES = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}

#: The class names, indexed by label.
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def _fashion_mnist_file(
    root: Path, gz_name: str, allow_download: bool, checksums: dict[str, str], url: str
) -> torch.Tensor:
    """Find (or fetch), verify and read one Fashion-MNIST file, compressed or not."""
    path = root / gz_name
    if not path.exists() and (root / gz_name.removesuffix(".gz")).exists():
        path = root / gz_name.removesuffix(".gz")
    if path.exists():
        expected = checksums.get(path.name)
        if expected is not None and file_digest(path, "md5") != expected.lower():
            raise ValueError(
                f"checksum mismatch for {path}: expected md5 {expected}, "
                f"got {file_digest(path, 'md5')}; delete the file and fetch it again"
            )
    elif allow_download:  # verified before it is moved into place
        download(url + gz_name, path, checksums.get(gz_name), algorithm="md5")
    else:
        raise FileNotFoundError(
            f"{path} not found; put the Fashion-MNIST files in {root} "
            "or pass download=True (needs the network)"
        )
    return read_idx(path)


def load_fashion_mnist(
    root: str | os.PathLike,
    batch_size: int = 64,
    upsample_to: int | None = None,
    download: bool = False,
    checksums: dict[str, str] | None = None,
    max_train: int | None = None,
    seed: int = 0,
    url: str = FASHION_MNIST_URL,
) -> ImageData:
    """Fashion-MNIST (Xiao et al., 2017) from its IDX files: 60,000 + 10,000 28x28 images.

    For readers who are online; the book itself uses `load_digits_data`. The four files
    are looked for in `root`, compressed (``*.gz``) or not. A file listed in `checksums`
    (by default the authors' MD5 of the ``.gz`` files) must match it; a downloaded file is
    checked before it is saved, so a corrupted download never stays in `root`.

    Args:
        root: Directory of the IDX files.
        batch_size: Images per batch.
        upsample_to: If given, resize every image to `upsample_to` x `upsample_to` pixels.
        download: Fetch missing ``.gz`` files from the dataset's GitHub repository (opt-in).
        checksums: File name → MD5 hex digest; None uses `FASHION_MNIST_FILES`. Files not
            listed are not checked.
        max_train: Keep only the first this many training images (for quick runs).
        seed: Seed of the training loader's shuffling.
        url: Where `download` fetches the files from: a directory URL ending with "/" (the
            dataset's repository by default; a mirror or a ``file://`` directory works too).

    Returns:
        The loaders, the class names and the image shape.

    Shapes:
        - images in a batch: (batch_size, 1, 28, 28), or (batch_size, 1, upsample_to,
          upsample_to)
        - labels in a batch: (batch_size,)

    Raises:
        FileNotFoundError: If a file is missing and `download` is False.
        ValueError: If a checksum does not match, or a file is not valid IDX.
    """
    root = Path(root)
    checksums = FASHION_MNIST_FILES if checksums is None else checksums
    arrays = [
        _fashion_mnist_file(root, name, download, checksums, url) for name in FASHION_MNIST_FILES
    ]
    train_images, train_labels, test_images, test_labels = arrays
    for images, labels in ((train_images, train_labels), (test_images, test_labels)):
        if images.dim() != 3 or labels.shape != images.shape[:1]:
            raise ValueError(
                "Fashion-MNIST images must have shape (n, height, width) and labels (n,), "
                f"got {tuple(images.shape)} and {tuple(labels.shape)}"
            )
    if max_train is not None:
        train_images, train_labels = train_images[:max_train], train_labels[:max_train]
    return _image_data(
        (train_images[:, None].float() / 255.0, train_labels.long()),  # (n, 1, 28, 28)
        (test_images[:, None].float() / 255.0, test_labels.long()),
        list(FASHION_MNIST_CLASSES),
        batch_size,
        upsample_to,
        seed,
    )


# --8<-- [start:balanced_subset]
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


# --8<-- [end:balanced_subset]


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
