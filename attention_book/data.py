"""Offline data for the book: an English→French corpus, sentence-pair files, and images.

Nothing here downloads anything unless a reader asks for it explicitly. The default
translation corpus is generated on the fly from two well-kept data sources that ship with
Python packages: the Unicode CLDR locale data in Babel (dates, times, month and weekday
names, language names, currency names, unit names with their plural rules) and num2words
(numbers spelled out in English and in French). Short glue phrases join them into sentences.
The result has real word reordering ("November 29" → "29 novembre", "3 days ago" →
"il y a 3 jours", "US dollars" → "dollars des États-Unis"), agreement from CLDR's plural
rules ("1 kilomètre", "21 kilomètres"), and sentences from 4 to about 60 tokens.

The same pipeline (`preprocess`, `tokenize`, `Vocab`, `build_arrays`) also reads the standard
tab-separated sentence-pair files (the Tatoeba/Anki ``fra.txt`` format) for readers who are
online and want real-world sentences.
"""

from __future__ import annotations

import collections
import datetime
import functools
import gzip
import hashlib
import os
import random
import re
import shutil
import struct
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset, default_collate

__all__ = [
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "RESERVED_TOKENS",
    "ImageData",
    "LengthBucketSampler",
    "SentencePairs",
    "TranslationData",
    "Vocab",
    "build_arrays",
    "builtin_pairs",
    "corpus_summary",
    "download_sentence_pairs",
    "load_digits_data",
    "load_fashion_mnist",
    "load_translation_data",
    "preprocess",
    "read_idx",
    "read_sentence_pairs",
    "split_pairs",
    "tokenize",
]

# ---------------------------------------------------------------------------------------------
# The built-in English→French corpus
# ---------------------------------------------------------------------------------------------

_SPLITS = ("train", "valid", "test")

#: Bumped whenever the generator changes, so cached copies of an older corpus are not reused.
CORPUS_VERSION = 3

# Glue phrases: subjects with their French auxiliary (passé composé), verbs as past
# participles, and nouns that are masculine in French (num2words writes "un", not "une").
_SUBJECTS = [("we", "nous avons"), ("they", "ils ont"), ("she", "elle a"), ("he", "il a")]
_COUNT_VERBS = [
    ("sold", "vendu"),
    ("bought", "acheté"),
    ("counted", "compté"),
    ("ordered", "commandé"),
]
_COUNT_NOUNS = [
    ("ticket", "tickets", "billet", "billets"),
    ("book", "books", "livre", "livres"),
    ("cake", "cakes", "gâteau", "gâteaux"),
    ("tree", "trees", "arbre", "arbres"),
    ("horse", "horses", "cheval", "chevaux"),
]
_MONEY_VERBS = [("paid", "payé"), ("spent", "dépensé"), ("won", "gagné"), ("saved", "économisé")]
_CURRENCIES = ["USD", "EUR", "JPY", "CHF", "CAD"]  # all masculine in French
_DISTANCE_VERBS = [("walked", "marché"), ("ran", "couru"), ("drove", "roulé"), ("swam", "nagé")]
_DISTANCE_UNITS = ["length-kilometer", "length-meter", "length-mile"]
_WEIGHT_VERBS = [("carried", "porté"), ("lifted", "soulevé"), ("weighed", "pesé")]
_WEIGHT_UNITS = ["mass-kilogram", "mass-gram", "mass-pound"]
_LANGUAGE_VERBS = [("spoke", "parlé"), ("learned", "appris"), ("taught", "enseigné")]
_LANGUAGES = ["de", "es", "it", "pt", "ja", "zh", "ru", "ar", "nl", "sv", "pl", "tr", "ko", "el"]
_CONNECTORS = [(", then", ", puis"), (" and", " et"), (", and later", ", et plus tard")]
_DELTA_UNITS = [("hours", 3600), ("days", 86400), ("weeks", 7 * 86400)]


@functools.cache
def _spell(number: int) -> tuple[str, str]:
    from num2words import num2words

    return num2words(number, lang="en"), num2words(number, lang="fr")


def _sample_count(rng: random.Random) -> int:
    # 40% from 1 to 20 (one word), 60% from 21 to 999 (up to five words: "three hundred and
    # forty-two" -> "trois cent quarante-deux", where French drops the "and").
    return rng.randint(1, 20) if rng.random() < 0.4 else rng.randint(21, 999)


def _count_clause(rng: random.Random, subject: tuple[str, str]) -> tuple[str, str]:
    verb_en, verb_fr = rng.choice(_COUNT_VERBS)
    one_en, many_en, one_fr, many_fr = rng.choice(_COUNT_NOUNS)
    count = _sample_count(rng)
    count_en, count_fr = _spell(count)
    noun_en, noun_fr = (one_en, one_fr) if count == 1 else (many_en, many_fr)
    return (
        f"{subject[0]} {verb_en} {count_en} {noun_en}",
        f"{subject[1]} {verb_fr} {count_fr} {noun_fr}",
    )


def _money_clause(rng: random.Random, subject: tuple[str, str]) -> tuple[str, str]:
    from babel.numbers import get_currency_name

    verb_en, verb_fr = rng.choice(_MONEY_VERBS)
    code = rng.choice(_CURRENCIES)
    amount = _sample_count(rng)
    amount_en, amount_fr = _spell(amount)
    currency_en = get_currency_name(code, amount, locale="en")
    currency_fr = get_currency_name(code, amount, locale="fr")
    return (
        f"{subject[0]} {verb_en} {amount_en} {currency_en}",
        f"{subject[1]} {verb_fr} {amount_fr} {currency_fr}",
    )


def _unit_clause(
    rng: random.Random, subject: tuple[str, str], verbs: list, units: list
) -> tuple[str, str]:
    verb_en, verb_fr = rng.choice(verbs)
    quantity_en, quantity_fr = _format_unit(rng.randint(1, 60), rng.choice(units))
    return f"{subject[0]} {verb_en} {quantity_en}", f"{subject[1]} {verb_fr} {quantity_fr}"


@functools.cache
def _format_unit(value: int, unit: str) -> tuple[str, str]:
    from babel.units import format_unit

    return (
        format_unit(value, unit, length="long", locale="en"),
        format_unit(value, unit, length="long", locale="fr"),
    )


@functools.cache
def _language_names(locale: str) -> dict[str, str]:
    from babel import Locale

    return dict(Locale.parse(locale).languages)


def _language_clause(rng: random.Random, subject: tuple[str, str]) -> tuple[str, str]:
    verb_en, verb_fr = rng.choice(_LANGUAGE_VERBS)
    code = rng.choice(_LANGUAGES)
    language_fr = _language_names("fr")[code]
    if verb_fr != "parlé":  # "il a parlé arabe", but "il a appris l'arabe", "le japonais"
        language_fr = f"l'{language_fr}" if language_fr[0] in "aeiouéh" else f"le {language_fr}"
    return (
        f"{subject[0]} {verb_en} {_language_names('en')[code]}",
        f"{subject[1]} {verb_fr} {language_fr}",
    )


def _clause(rng: random.Random) -> tuple[str, str]:
    subject = rng.choice(_SUBJECTS)
    kind = rng.randrange(5)
    if kind == 0:
        return _count_clause(rng, subject)
    if kind == 1:
        return _money_clause(rng, subject)
    if kind == 2:
        return _unit_clause(rng, subject, _DISTANCE_VERBS, _DISTANCE_UNITS)
    if kind == 3:
        return _unit_clause(rng, subject, _WEIGHT_VERBS, _WEIGHT_UNITS)
    return _language_clause(rng, subject)


def _when(rng: random.Random) -> tuple[str, str]:
    """A time adverbial from CLDR: a full date (with or without a time), a month, or a delta."""
    from babel.dates import format_date, format_time, format_timedelta, get_month_names

    kind = rng.randrange(4)
    if kind <= 1:
        date = datetime.date(2020, 1, 1) + datetime.timedelta(days=rng.randrange(3653))
        date_en = format_date(date, format="full", locale="en")
        date_fr = format_date(date, format="full", locale="fr")
        if kind == 0:
            return f"on {date_en}", f"le {date_fr}"
        time = datetime.time(rng.randint(7, 22), 15 * rng.randrange(4))
        time_en = format_time(time, format="short", locale="en")
        time_fr = format_time(time, format="short", locale="fr")
        return f"on {date_en} at {time_en}", f"le {date_fr} à {time_fr}"
    if kind == 2:
        month = rng.randint(1, 12)
        month_en = get_month_names("wide", locale="en")[month]
        month_fr = get_month_names("wide", locale="fr")[month]
        return f"in {month_en}", f"en {month_fr}"
    _, seconds = rng.choice(_DELTA_UNITS)
    delta = datetime.timedelta(seconds=-seconds * rng.randint(1, 6))
    return (
        format_timedelta(delta, add_direction=True, locale="en"),
        format_timedelta(delta, add_direction=True, locale="fr"),
    )


def _sentence(rng: random.Random) -> tuple[str, str]:
    """One English sentence and its French translation: 1 to 5 clauses and maybe a 'when'."""
    num_clauses = rng.randint(1, 5)
    english, french = _clause(rng)
    for _ in range(num_clauses - 1):
        connector_en, connector_fr = rng.choice(_CONNECTORS)
        clause_en, clause_fr = _clause(rng)
        english += f"{connector_en} {clause_en}"
        french += f"{connector_fr} {clause_fr}"
    if rng.random() < 0.7:
        when_en, when_fr = _when(rng)
        if rng.random() < 0.5:  # the adverbial goes first or last, in both languages
            english, french = f"{when_en} {english}", f"{when_fr} {french}"
        else:
            english, french = f"{english} {when_en}", f"{french} {when_fr}"
    return english[0].upper() + english[1:] + ".", french[0].upper() + french[1:] + "."


def split_pairs(
    pairs: Iterable[tuple[str, str]], seed: int = 0, fractions: tuple[float, float] = (0.8, 0.1)
) -> dict[str, list[tuple[str, str]]]:
    """Deduplicate sentence pairs, shuffle them with a seed and split them three ways.

    Pairs are deduplicated on their source sentence (after `preprocess`), before splitting, so
    no source sentence appears in two splits.

    Args:
        pairs: (source, target) sentence pairs.
        seed: Seed of the shuffle; the same seed always gives the same split.
        fractions: Fractions of the pairs in the train and validation splits; the test split
            gets the rest.

    Returns:
        A dict with keys "train", "valid" and "test", each a list of pairs.

    Raises:
        ValueError: If the fractions are negative or sum to more than 1.
    """
    train_fraction, valid_fraction = fractions
    if min(fractions) < 0 or train_fraction + valid_fraction > 1:
        raise ValueError(f"fractions must be >= 0 and sum to at most 1, got {fractions}")
    unique = list({preprocess(source): (source, target) for source, target in pairs}.values())
    random.Random(seed).shuffle(unique)
    num_train = round(train_fraction * len(unique))
    num_valid = round(valid_fraction * len(unique))
    return {
        "train": unique[:num_train],
        "valid": unique[num_train : num_train + num_valid],
        "test": unique[num_train + num_valid :],
    }


def _generate_splits(num_pairs: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random(seed)
    pairs = [_sentence(rng) for _ in range(num_pairs)]
    return split_pairs(pairs, seed=seed)


@functools.lru_cache(maxsize=4)
def _builtin_splits(num_pairs: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """The corpus's splits, cached in memory and on disk (see `attention_book.training`)."""
    from importlib.metadata import version

    from attention_book.training import cached

    config = {
        "corpus_version": CORPUS_VERSION,
        "num_pairs": num_pairs,
        "seed": seed,
        "babel": version("babel"),  # another CLDR release may word things differently
        "num2words": version("num2words"),
    }
    return cached("builtin-corpus", config, lambda: _generate_splits(num_pairs, seed))


# --8<-- [start:builtin_pairs]
def builtin_pairs(
    split: str = "train", num_pairs: int = 15_000, seed: int = 0
) -> list[tuple[str, str]]:
    """The built-in English→French corpus, generated from CLDR (Babel) and num2words.

    `num_pairs` sentences are generated with a seeded random generator, deduplicated on the
    source sentence, shuffled with the same seed and split 80/10/10. The splits share no pair.
    The result is cached in memory and in the results cache on disk (``cache_dir()`` of
    `attention_book.training`), so only the first call of all generates it.

    Args:
        split: "train", "valid" or "test".
        num_pairs: Number of sentences generated before deduplication.
        seed: Seed of the generator and of the split.

    Returns:
        A list of (English, French) sentence pairs, in natural case with punctuation.

    Raises:
        ValueError: If `split` is not one of "train", "valid", "test".

    Example:
        >>> builtin_pairs("train")[3]  # doctest: +SKIP
        ('She sold six hundred and eight books on Sunday, April 5, 2020.',
         'Elle a vendu six cent huit livres le dimanche 5 avril 2020.')
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be 'train', 'valid' or 'test', got {split!r}")
    return list(_builtin_splits(num_pairs, seed)[split])


# --8<-- [end:builtin_pairs]


# ---------------------------------------------------------------------------------------------
# Preprocessing, tokenization, vocabulary, arrays
# ---------------------------------------------------------------------------------------------

#: Reserved tokens, always the first indices of a `Vocab`: padding, begin and end of sequence,
#: unknown word.
RESERVED_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")

# A punctuation mark that ends a word: preceded by a non-space, followed by a space or the end.
# "3:45", "1,000" and "3.5" stay whole; "world!" becomes "world !".
_PUNCTUATION_AT_WORD_END = re.compile(r"(?<=\S)([,.!?;:])(?=\s|$)")


# --8<-- [start:preprocess]
def preprocess(text: str) -> str:
    """Normalize a sentence before tokenization.

    Lowercases, turns non-breaking spaces (U+00A0, and U+202F that CLDR puts in "3:45 PM" and
    French typography puts before "!" or "?") into ordinary spaces, puts a space before a
    punctuation mark that ends a word, and collapses runs of spaces. Applying it twice changes
    nothing.

    Args:
        text: A raw sentence.

    Returns:
        The normalized sentence.

    Example:
        >>> preprocess("Va\u202f! Il est 3:45\u202fPM, déjà.")
        'va ! il est 3:45 pm , déjà .'
    """
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    text = _PUNCTUATION_AT_WORD_END.sub(lambda match: " " + match[1], text)
    return " ".join(text.split())


def tokenize(sentence: str) -> list[str]:
    """Split a sentence into word and punctuation tokens (after `preprocess`).

    Args:
        sentence: A raw or already preprocessed sentence.

    Returns:
        The list of tokens.

    Example:
        >>> tokenize("Hello, world!")
        ['hello', ',', 'world', '!']
    """
    return preprocess(sentence).split()


# --8<-- [end:preprocess]


# --8<-- [start:Vocab]
class Vocab:
    """A vocabulary: maps tokens to indices and back.

    The reserved tokens `<pad>`, `<bos>`, `<eos>`, `<unk>` take indices 0 to 3, then come any
    extra reserved tokens, then the tokens seen at least `min_freq` times, most frequent first
    (ties in alphabetical order, so the same tokens always give the same indices). Tokens
    not in the vocabulary map to `<unk>`.

    Args:
        tokens: The tokens to count: a flat list, or a list of token lists (one per sentence).
        min_freq: Tokens seen fewer times than this are left out (they will map to `<unk>`).
        reserved_tokens: Extra tokens always included, after the four standard ones.

    Example:
        >>> vocab = Vocab([["a", "b", "a"]])
        >>> vocab["a"], vocab[["b", "zebra"]], vocab.to_tokens([4, 5, 2])
        (4, [5, 3], ['a', 'b', '<eos>'])
    """

    def __init__(
        self,
        tokens: Iterable[str] | Iterable[Sequence[str]] = (),
        min_freq: int = 0,
        reserved_tokens: Sequence[str] = (),
    ) -> None:
        tokens = list(tokens)
        if tokens and not isinstance(tokens[0], str):
            tokens = [token for line in tokens for token in line]
        counter = collections.Counter(tokens)
        self.token_freqs = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        self.idx_to_token = list(dict.fromkeys([*RESERVED_TOKENS, *reserved_tokens]))
        reserved = set(self.idx_to_token)
        self.idx_to_token += [
            token for token, freq in self.token_freqs if freq >= min_freq and token not in reserved
        ]
        self.token_to_idx = {token: index for index, token in enumerate(self.idx_to_token)}

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Index of a token, or list of indices of a list of tokens; unknown → `<unk>`."""
        unk = self.unk
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, unk)
        return [self.token_to_idx.get(token, unk) for token in tokens]

    def to_tokens(self, indices: int | Sequence[int] | torch.Tensor) -> str | list[str]:
        """Token of an index, or list of tokens of a sequence (or 1-D tensor) of indices."""
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, int):
            return self.idx_to_token[indices]
        return [self.idx_to_token[int(index)] for index in indices]

    @property
    def pad(self) -> int:
        """Index of `<pad>`."""
        return self.token_to_idx["<pad>"]

    @property
    def bos(self) -> int:
        """Index of `<bos>`."""
        return self.token_to_idx["<bos>"]

    @property
    def eos(self) -> int:
        """Index of `<eos>`."""
        return self.token_to_idx["<eos>"]

    @property
    def unk(self) -> int:
        """Index of `<unk>`."""
        return self.token_to_idx["<unk>"]


# --8<-- [end:Vocab]


# --8<-- [start:build_arrays]
def build_arrays(
    token_lists: Sequence[Sequence[str]], vocab: Vocab, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn token lists into a padded index tensor and their valid lengths.

    Each list gets `<eos>` appended, then is truncated to `num_steps` (a truncated sentence
    loses its `<eos>`) or padded with `<pad>`.

    Args:
        token_lists: One list of tokens per sentence.
        vocab: The vocabulary of that side (source or target).
        num_steps: Length of every row of the result.

    Returns:
        (indices, valid_lens): the index tensor and the number of non-padding positions of
        each row.

    Shapes:
        - indices: (num_sentences, num_steps), dtype long
        - valid_lens: (num_sentences,), dtype long

    Raises:
        ValueError: If `num_steps` is smaller than 1.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    rows, valid_lens = [], []
    for tokens in token_lists:
        indices = (vocab[list(tokens)] + [vocab.eos])[:num_steps]
        valid_lens.append(len(indices))
        rows.append(indices + [vocab.pad] * (num_steps - len(indices)))
    array = torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_steps)
    return array, torch.tensor(valid_lens, dtype=torch.long)


# --8<-- [end:build_arrays]


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


def _sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_sentence_pairs(
    url: str, path: str | os.PathLike, sha256: str, member: str | None = None
) -> Path:
    """Download a sentence-pair file once, verifying its SHA-256 checksum (opt-in, online).

    The book never calls this: its build and tests use the built-in corpus. If `path`
    already exists with the right checksum, nothing is downloaded. The download goes to a
    temporary file that is moved into place only once its checksum matches.

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
        ValueError: If the downloaded file's checksum differs from `sha256` (the file is
            deleted), or `member` is not in the archive.
    """
    path = Path(path)
    archive = path.with_name(path.name + ".zip") if member else path
    if archive.exists() and _sha256(archive) == sha256.lower():
        if member and not path.exists():
            _extract(archive, member, path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        urllib.request.urlopen(url) as response,
        tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as temporary,
    ):
        shutil.copyfileobj(response, temporary)
    actual = _sha256(temporary.name)
    if actual != sha256.lower():
        os.unlink(temporary.name)
        raise ValueError(f"checksum mismatch for {url}: expected sha256 {sha256}, got {actual}")
    os.replace(temporary.name, archive)
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
# Translation data loaders
# ---------------------------------------------------------------------------------------------


# --8<-- [start:TranslationData]
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
    if path is None:
        splits = {name: builtin_pairs(name, num_pairs=num_pairs, seed=seed) for name in _SPLITS}
    else:
        splits = split_pairs(read_sentence_pairs(path, skip_malformed=skip_malformed), seed=seed)
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
        train_pairs=splits["train"],
        valid_pairs=splits["valid"],
        test_pairs=splits["test"],
    )


# --8<-- [end:TranslationData]


# ---------------------------------------------------------------------------------------------
# Image data
# ---------------------------------------------------------------------------------------------


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


# --8<-- [start:load_digits_data]
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


# --8<-- [end:load_digits_data]

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


def _md5(path: str | os.PathLike) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fashion_mnist_file(
    root: Path, gz_name: str, download: bool, checksums: dict[str, str]
) -> torch.Tensor:
    """Find (or fetch), verify and read one Fashion-MNIST file, compressed or not."""
    path = root / gz_name
    if not path.exists() and (root / gz_name.removesuffix(".gz")).exists():
        path = root / gz_name.removesuffix(".gz")
    if not path.exists():
        if not download:
            raise FileNotFoundError(
                f"{path} not found; put the Fashion-MNIST files in {root} "
                "or pass download=True (needs the network)"
            )
        root.mkdir(parents=True, exist_ok=True)
        with (
            urllib.request.urlopen(FASHION_MNIST_URL + gz_name) as response,
            tempfile.NamedTemporaryFile(dir=root, delete=False) as temporary,
        ):
            shutil.copyfileobj(response, temporary)
        os.replace(temporary.name, path)
    if path.name in checksums and _md5(path) != checksums[path.name]:
        raise ValueError(
            f"checksum mismatch for {path}: expected md5 {checksums[path.name]}, "
            f"got {_md5(path)}; delete the file and fetch it again"
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
) -> ImageData:
    """Fashion-MNIST (Xiao et al., 2017) from its IDX files: 60,000 + 10,000 28x28 images.

    For readers who are online; the book itself uses `load_digits_data`. The four files
    are looked for in `root`, compressed (``*.gz``) or not. A file listed in `checksums`
    (by default the authors' MD5 of the ``.gz`` files) must match it.

    Args:
        root: Directory of the IDX files.
        batch_size: Images per batch.
        upsample_to: If given, resize every image to `upsample_to` x `upsample_to` pixels.
        download: Fetch missing ``.gz`` files from the dataset's GitHub repository (opt-in).
        checksums: File name → MD5 hex digest; None uses `FASHION_MNIST_FILES`. Files not
            listed are not checked.
        max_train: Keep only the first this many training images (for quick runs).
        seed: Seed of the training loader's shuffling.

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
    arrays = [_fashion_mnist_file(root, name, download, checksums) for name in FASHION_MNIST_FILES]
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


# ---------------------------------------------------------------------------------------------
# Command line: describe the built-in corpus
# ---------------------------------------------------------------------------------------------


def corpus_summary(num_pairs: int = 15_000, seed: int = 0, bin_width: int = 5) -> str:
    """Describe the built-in corpus: split sizes, length distribution, vocabulary sizes.

    Args:
        num_pairs: As in `builtin_pairs`.
        seed: As in `builtin_pairs`.
        bin_width: Width, in tokens, of the bins of the length histogram.

    Returns:
        A plain-text report (one table of lengths per split and a histogram of source lengths).
    """
    splits = {name: builtin_pairs(name, num_pairs=num_pairs, seed=seed) for name in _SPLITS}
    lines = [f"built-in corpus (num_pairs={num_pairs}, seed={seed}), lengths in tokens"]
    lines.append(f"{'split':<6} {'pairs':>6}   source min/median/max   target min/median/max")
    for name, pairs in splits.items():
        src = sorted(len(tokenize(s)) for s, _ in pairs)
        tgt = sorted(len(tokenize(t)) for _, t in pairs)
        lines.append(
            f"{name:<6} {len(pairs):>6}   {src[0]:>6} {src[len(src) // 2]:>6} {src[-1]:>6}"
            f"        {tgt[0]:>6} {tgt[len(tgt) // 2]:>6} {tgt[-1]:>6}"
        )
    train = splits["train"]
    src_vocab = Vocab([tokenize(s) for s, _ in train])
    tgt_vocab = Vocab([tokenize(t) for _, t in train])
    lines.append(
        f"vocabulary (train, with the 4 reserved tokens): source {len(src_vocab)}, "
        f"target {len(tgt_vocab)}"
    )
    lengths = [len(tokenize(s)) for s, _ in train]
    counts = collections.Counter(n // bin_width for n in lengths)
    lines.append("source lengths (train):")
    for index in range(max(counts) + 1):
        count = counts.get(index, 0)
        low = index * bin_width
        bar = "#" * round(60 * count / max(counts.values()))
        lines.append(f"  {low:>3}-{low + bin_width - 1:<3} {count:>6} {bar}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m attention_book.data [--num-pairs N] [--seed S]``.

    Prints `corpus_summary` and how long the corpus took to generate, with and without
    the cache.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        The exit status.
    """
    import argparse
    import time

    parser = argparse.ArgumentParser(
        prog="python -m attention_book.data", description="Describe the built-in corpus."
    )
    parser.add_argument("--num-pairs", type=int, default=15_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    _generate_splits(args.num_pairs, args.seed)
    generated = time.perf_counter() - start
    _builtin_splits.cache_clear()
    start = time.perf_counter()
    builtin_pairs("train", args.num_pairs, args.seed)  # from the disk cache, if filled before
    loaded = time.perf_counter() - start
    print(corpus_summary(args.num_pairs, args.seed))
    print(
        f"generation: {generated:.2f} s; first call of builtin_pairs (disk cache): {loaded:.2f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
