"""Data files on disk: one verified download, sentence-pair text files, IDX image arrays.

Everything here is for readers who are online or bring their own files; the book's build and
tests never download anything. `download` is the only function that fetches: it writes to a
temporary file next to the destination, checks the file's digest, and only then moves it into
place, so a failed or corrupted download never leaves a file where a loader would look for
one. `download_sentence_pairs` and the Fashion-MNIST loader of `attention_book.data.images`
both go through it.

The two readers: `read_sentence_pairs` for the tab-separated Tatoeba/Anki ``fra.txt`` format,
and `read_idx` for the IDX arrays of MNIST and Fashion-MNIST.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import struct
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = [
    "SentencePairs",
    "download",
    "download_sentence_pairs",
    "file_digest",
    "read_idx",
    "read_sentence_pairs",
]


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes, read in blocks so that a large file is never loaded whole.

    Args:
        path: The file.
        algorithm: A `hashlib` algorithm name: "sha256", or "md5" for datasets whose authors
            publish MD5 sums (used to check a download, not for security).

    Returns:
        The lowercase hex digest.

    Raises:
        ValueError: If `algorithm` is not one `hashlib` knows.
    """
    if algorithm not in hashlib.algorithms_available:
        raise ValueError(f"algorithm must be a hashlib algorithm name, got {algorithm!r}")
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(
    url: str, path: str | os.PathLike, checksum: str | None, algorithm: str = "sha256"
) -> Path:
    """Fetch `url` into `path`, verifying its checksum before the file is moved into place.

    The bytes go to a temporary file in the destination's directory. Once the download is
    complete and its digest matches `checksum`, the temporary file is renamed to `path` in
    one step (`os.replace`), so `path` is either absent, the old file, or the verified new one.
    On any failure (network error, wrong checksum, interruption) the temporary file is
    deleted and `path` is left as it was.

    Args:
        url: Where to fetch the file (``https://``, or ``file://`` for a local copy).
        path: Where to store it; missing parent directories are created.
        checksum: The expected hex digest of the file, or None to skip the check (only for
            a file no one publishes a checksum of).
        algorithm: The `hashlib` algorithm of `checksum` ("sha256" or "md5").

    Returns:
        `path`, as a `Path`.

    Raises:
        ValueError: If the downloaded file's digest differs from `checksum`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as file, urllib.request.urlopen(url) as response:
            shutil.copyfileobj(response, file)
        if checksum is not None:
            actual = file_digest(temporary, algorithm)
            if actual != checksum.lower():
                raise ValueError(
                    f"checksum mismatch for {url}: expected {algorithm} {checksum}, got "
                    f"{actual}; {path} was left as it was"
                )
        os.replace(temporary, path)
    except BaseException:  # a failed check, a network error, Ctrl-C: leave nothing behind
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------------------------------------
# Tab-separated sentence-pair files (Tatoeba/Anki fra.txt)
# ---------------------------------------------------------------------------------------------


class SentencePairs(list):
    """A list of (source, target) pairs read from a file, with what was skipped.

    Attributes:
        num_skipped: Number of malformed lines that were skipped.
        skipped_lines: Their 1-based line numbers.
    """

    def __init__(
        self, pairs: Iterable[tuple[str, str]] = (), skipped_lines: Sequence[int] = ()
    ) -> None:
        super().__init__(pairs)
        self.skipped_lines = list(skipped_lines)

    @property
    def num_skipped(self) -> int:
        """Number of malformed lines that were skipped."""
        return len(self.skipped_lines)


def read_sentence_pairs(path: str | os.PathLike, skip_malformed: bool = False) -> SentencePairs:
    """Read a tab-separated sentence-pair file (the Tatoeba/Anki ``fra.txt`` format).

    Each line holds a source sentence, a tab, and its translation; further tab-separated
    columns (the Anki files' attribution column) are ignored, and so are blank lines. The
    sentences are returned as written; `tokenize` preprocesses them.

    Args:
        path: The file, UTF-8 (with or without a byte-order mark).
        skip_malformed: If False (the default), a malformed line (no tab, or an empty side) is
            an error. If True, it is skipped and counted in the result's `num_skipped`.

    Returns:
        The pairs, a list that also has `num_skipped` and `skipped_lines`.

    Raises:
        ValueError: If a line is malformed (its line number is in the message) and
            `skip_malformed` is False, or if the file holds no pair.
    """
    pairs, skipped = [], []
    with open(path, encoding="utf-8-sig") as file:
        for line_number, line in enumerate(file, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) < 2 or not columns[0].strip() or not columns[1].strip():
                problem = "no tab" if len(columns) < 2 else "an empty side"
                if not skip_malformed:
                    raise ValueError(
                        f"{path}, line {line_number}: malformed sentence pair ({problem}); "
                        f"expected 'source<TAB>target', got {line[:80]!r}"
                    )
                skipped.append(line_number)
                continue
            pairs.append((columns[0].strip(), columns[1].strip()))
    if not pairs:
        raise ValueError(f"{path}: no sentence pair found (empty file or only malformed lines)")
    return SentencePairs(pairs, skipped)


def download_sentence_pairs(
    url: str, path: str | os.PathLike, sha256: str, member: str | None = None
) -> Path:
    """Download a sentence-pair file once, verifying its SHA-256 checksum (opt-in, online).

    The book never calls this: its build and tests use the built-in corpus. If `path`
    already exists with the right checksum, nothing is downloaded. The download goes through
    `download`, so a file is moved into place only once its checksum matches.

    Args:
        url: Where to fetch the file (``https://`` or ``file://``).
        path: Where to store the sentence-pair file.
        sha256: The expected SHA-256 hex digest of the downloaded file (of the archive when
            `member` is given).
        member: If the download is a zip archive, the name of the file to extract from it
            (for example "fra.txt").

    Returns:
        The path of the sentence-pair file.

    Raises:
        ValueError: If the downloaded file's checksum differs from `sha256` (then nothing is
            saved), or `member` is not in the archive.
    """
    path = Path(path)
    archive = path.with_name(path.name + ".zip") if member else path
    if archive.exists() and file_digest(archive) == sha256.lower():
        if member and not path.exists():
            _extract(archive, member, path)
        return path
    download(url, archive, sha256)
    if member:
        _extract(archive, member, path)
    return path


def _extract(archive: Path, member: str, path: Path) -> None:
    with zipfile.ZipFile(archive) as zipped:
        names = [name for name in zipped.namelist() if Path(name).name == member]
        if not names:
            raise ValueError(f"{archive} has no member {member!r}; it has {zipped.namelist()}")
        with zipped.open(names[0]) as source, open(path, "wb") as target:
            shutil.copyfileobj(source, target)


# ---------------------------------------------------------------------------------------------
# IDX arrays (MNIST, Fashion-MNIST)
# ---------------------------------------------------------------------------------------------

# The IDX format (LeCun's MNIST files): two zero bytes, a type code, the number of dimensions,
# each dimension as a big-endian uint32, then the values in row-major order, big-endian.
_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Read an IDX file (the MNIST/Fashion-MNIST format), gzip-compressed or not.

    Args:
        path: The file. Compression is detected from its first bytes, not its name.

    Returns:
        The array as a tensor (uint8 images stay uint8).

    Shapes:
        - images file: (num_images, height, width)
        - labels file: (num_labels,)

    Raises:
        ValueError: If the header is not IDX, or the data size does not match the header.
    """
    with open(path, "rb") as file:
        raw = file.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (header {raw[:4].hex()})")
    dtype, num_dims = _IDX_DTYPES[raw[2]], raw[3]
    header_size = 4 + 4 * num_dims
    if len(raw) < header_size:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes)")
    shape = struct.unpack(f">{num_dims}I", raw[4:header_size])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header_size != expected:
        raise ValueError(
            f"{path}: IDX header says shape {shape} ({expected} bytes of data), "
            f"got {len(raw) - header_size} bytes"
        )
    array = np.frombuffer(raw, dtype=dtype, offset=header_size).reshape(shape)
    return torch.from_numpy(array.astype(dtype.newbyteorder("="), copy=True))
