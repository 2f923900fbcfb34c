"""Translation batches: a vocabulary per language and DataLoaders of padded index tensors.

`load_translation_data` is what a translation chapter calls. It takes the built-in corpus of
`attention_book.data.corpus` (or a tab-separated pairs file), tokenizes every sentence with the
pipeline of `attention_book.data.text`, builds both vocabularies on the training split only,
and returns a `TranslationData`: the loaders, the vocabularies and the raw sentences (for BLEU).
`LengthBucketSampler` and the trimming collate function are the optional length bucketing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset, default_collate

from attention_book.data.corpus import builtin_pairs, split_pairs
from attention_book.data.files import read_sentence_pairs
from attention_book.data.text import Vocab, build_arrays, tokenize

__all__ = ["LengthBucketSampler", "TranslationData", "load_translation_data"]


@dataclass
class TranslationData:
    """Everything a translation chapter needs: loaders, vocabularies and raw test pairs.

    Each batch of the loaders is a tuple of five tensors
    ``(src, src_valid_len, tgt_input, tgt_valid_len, tgt_label)``:
    the source indices ending with `<eos>`; the target input, which is the label shifted
    right by one position and starting with `<bos>` (teacher forcing); the label, ending with
    `<eos>`. `tgt_valid_len` counts the label's non-padding positions (the same count holds
    for `tgt_input`).

    Shapes:
        - src, tgt_input, tgt_label: (batch_size, num_steps), dtype long
        - src_valid_len, tgt_valid_len: (batch_size,), dtype long

    Attributes:
        src_vocab: Source (English) vocabulary, built on the training split.
        tgt_vocab: Target (French) vocabulary, built on the training split.
        num_steps: Length of every padded sequence.
        train_loader: Shuffled training batches (seeded: same seed, same order).
        valid_loader: Validation batches, in order.
        test_loader: Test batches, in order.
        train_pairs: Raw (source, target) training sentences.
        valid_pairs: Raw validation sentences.
        test_pairs: Raw test sentences, in the order of `test_loader` (for BLEU).
    """

    src_vocab: Vocab
    tgt_vocab: Vocab
    num_steps: int
    train_loader: DataLoader
    valid_loader: DataLoader
    test_loader: DataLoader
    train_pairs: list[tuple[str, str]]
    valid_pairs: list[tuple[str, str]]
    test_pairs: list[tuple[str, str]]

    def encode_sources(self, sentences: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokenize and index source sentences the way the loaders do.

        Args:
            sentences: Raw source sentences.

        Returns:
            (src, src_valid_len) as in a batch.

        Shapes:
            - src: (len(sentences), num_steps)
            - src_valid_len: (len(sentences),)
        """
        return build_arrays([tokenize(s) for s in sentences], self.src_vocab, self.num_steps)


def _translation_tensors(
    token_pairs: Sequence[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    num_steps: int,
) -> TensorDataset:
    src, src_valid_len = build_arrays([s for s, _ in token_pairs], src_vocab, num_steps)
    tgt_label, tgt_valid_len = build_arrays([t for _, t in token_pairs], tgt_vocab, num_steps)
    bos = torch.full((len(token_pairs), 1), tgt_vocab.bos, dtype=torch.long)
    tgt_input = torch.cat([bos, tgt_label[:, :-1]], dim=1)  # (n, num_steps), shifted right
    return TensorDataset(src, src_valid_len, tgt_input, tgt_valid_len, tgt_label)


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of sentences of similar length, in a seeded random order.

    The indices are shuffled, cut into pools of `pool_batches` batches, sorted by length
    inside each pool and cut into batches; the batches are then shuffled. Batches padded to
    their longest sentence waste little work on padding, and the order stays random.

    Args:
        lengths: Length of each example.
        batch_size: Examples per batch.
        generator: The random generator (seeded: same seed, same batches).
        pool_batches: Number of batches per sorting pool.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        generator: torch.Generator,
        pool_batches: int = 50,
    ) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.generator = generator
        self.pool_size = batch_size * pool_batches

    def __iter__(self):
        order = torch.randperm(len(self.lengths), generator=self.generator).tolist()
        batches = []
        for start in range(0, len(order), self.pool_size):
            pool = sorted(order[start : start + self.pool_size], key=self.lengths.__getitem__)
            batches += [pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        for index in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[index]

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)


def _collate_trimmed(samples: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """Stack a translation batch, then drop the columns that are padding in every row."""
    src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = default_collate(samples)
    src_steps, tgt_steps = int(src_valid_len.max()), int(tgt_valid_len.max())
    return (
        src[:, :src_steps],  # (batch, longest source in the batch)
        src_valid_len,
        tgt_input[:, :tgt_steps],  # (batch, longest target in the batch)
        tgt_valid_len,
        tgt_label[:, :tgt_steps],
    )


def _prepared(
    splits: dict[str, list[tuple[str, str]]],
    max_train_pairs: int | None,
    min_freq: int,
    num_steps: int | None,
) -> tuple[dict, Vocab, Vocab, int, dict[str, TensorDataset]]:
    """Tokens, vocabularies and index tensors of the splits: what the loaders read."""
    splits = dict(splits)
    if max_train_pairs is not None:
        splits["train"] = splits["train"][:max_train_pairs]
    tokens = {
        name: [(tokenize(s), tokenize(t)) for s, t in pairs] for name, pairs in splits.items()
    }
    src_vocab = Vocab([s for s, _ in tokens["train"]], min_freq=min_freq)
    tgt_vocab = Vocab([t for _, t in tokens["train"]], min_freq=min_freq)
    if num_steps is None:
        num_steps = 1 + max(
            len(side) for pairs in tokens.values() for pair in pairs for side in pair
        )
    datasets = {
        name: _translation_tensors(token_pairs, src_vocab, tgt_vocab, num_steps)
        for name, token_pairs in tokens.items()
    }
    return splits, src_vocab, tgt_vocab, num_steps, datasets


@functools.lru_cache(maxsize=4)
def _builtin_prepared(
    num_pairs: int, seed: int, max_train_pairs: int | None, min_freq: int, num_steps: int | None
) -> tuple[dict, Vocab, Vocab, int, dict[str, TensorDataset]]:
    """`_prepared` of the built-in corpus, kept: a chapter and its experiments load it often."""
    splits = {
        name: builtin_pairs(name, num_pairs=num_pairs, seed=seed)
        for name in ("train", "valid", "test")
    }
    return _prepared(splits, max_train_pairs, min_freq, num_steps)


def load_translation_data(
    batch_size: int = 64,
    num_steps: int | None = None,
    path: str | os.PathLike | None = None,
    min_freq: int = 1,
    num_pairs: int = 15_000,
    max_train_pairs: int | None = None,
    seed: int = 0,
    skip_malformed: bool = False,
    bucket_by_length: bool = False,
) -> TranslationData:
    """Build translation DataLoaders from the built-in corpus (default) or a pairs file.

    Sentences are tokenized with `tokenize`; both vocabularies are built on the training
    split only, so a word met only in validation or test maps to `<unk>`. A file is
    deduplicated and split 80/10/10 with `split_pairs` (same seed, same split).

    Args:
        batch_size: Sentences per batch.
        num_steps: Length of the padded sequences. None: the longest tokenized sentence of any
            split plus one (for `<eos>`), so nothing is truncated.
        path: A tab-separated sentence-pair file (see `read_sentence_pairs`); None uses the
            built-in corpus (`builtin_pairs`).
        min_freq: Minimum count of a token in the training split to enter a vocabulary.
        num_pairs: Size of the generated built-in corpus (ignored with `path`).
        max_train_pairs: Keep only the first this many training pairs (for quick runs).
        seed: Seed of the corpus, the split and the training loader's shuffling.
        skip_malformed: Passed to `read_sentence_pairs`.
        bucket_by_length: If True, training batches hold sentences of similar source length
            (`LengthBucketSampler`) and every batch of every loader is cut to its longest
            source and longest target, so batches are narrower than `num_steps` and far less
            time goes into padding (about half, on the built-in corpus). Valid and test
            batches keep their order.

    Returns:
        The loaders, vocabularies and raw pairs.

    Example:
        >>> data = load_translation_data(batch_size=32)  # doctest: +SKIP
        >>> batch = next(iter(data.train_loader))  # doctest: +SKIP
        >>> src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = batch  # doctest: +SKIP
    """
    if path is None:  # the same corpus is prepared once per process
        prepared = _builtin_prepared(num_pairs, seed, max_train_pairs, min_freq, num_steps)
    else:
        splits = split_pairs(read_sentence_pairs(path, skip_malformed=skip_malformed), seed=seed)
        prepared = _prepared(splits, max_train_pairs, min_freq, num_steps)
    splits, src_vocab, tgt_vocab, num_steps, datasets = prepared
    generator = torch.Generator().manual_seed(seed)
    if bucket_by_length:
        src_valid_len = datasets["train"].tensors[1].tolist()
        sampler = LengthBucketSampler(src_valid_len, batch_size, generator)
        train_loader = DataLoader(
            datasets["train"], batch_sampler=sampler, collate_fn=_collate_trimmed
        )
    else:
        train_loader = DataLoader(
            datasets["train"], batch_size=batch_size, shuffle=True, generator=generator
        )
    collate = _collate_trimmed if bucket_by_length else None
    return TranslationData(
        src_vocab=src_vocab,
        tgt_vocab=tgt_vocab,
        num_steps=num_steps,
        train_loader=train_loader,
        valid_loader=DataLoader(datasets["valid"], batch_size=batch_size, collate_fn=collate),
        test_loader=DataLoader(datasets["test"], batch_size=batch_size, collate_fn=collate),
        train_pairs=list(splits["train"]),  # copies: the prepared splits are shared
        valid_pairs=list(splits["valid"]),
        test_pairs=list(splits["test"]),
    )
