"""The built-in English→French corpus, generated offline from CLDR and num2words.

Nothing is downloaded. Sentences are composed from two well-kept data sources that ship with
Python packages: the Unicode CLDR locale data in Babel (dates, times, month and weekday names,
language names, currency names, unit names with their plural rules) and num2words (numbers
spelled out in English and in French). Short glue phrases join them into sentences. The result
has real word reordering ("November 29" → "29 novembre", "3 days ago" → "il y a 3 jours",
"US dollars" → "dollars des États-Unis"), agreement from CLDR's plural rules ("1 kilomètre",
"21 kilomètres"), and sentences from 4 to about 60 tokens.

The file reads in the order the corpus is made: the glue phrases, one clause, one sentence,
the split into train, validation and test, the cached `builtin_pairs`, and last
`corpus_summary` with the command line ``python -m attention_book.data`` that prints it.
Babel and num2words are imported inside the functions that use them, so importing this module
stays cheap.
"""

from __future__ import annotations

import collections
import datetime
import functools
import random
from collections.abc import Iterable, Sequence

from attention_book.data.text import Vocab, preprocess, tokenize
from attention_book.store import Run, cached, digest

__all__ = [
    "CORPUS_VERSION",
    "RUNS",
    "builtin_pairs",
    "builtin_splits",
    "corpus_digest",
    "corpus_key",
    "corpus_summary",
    "generate_splits",
    "main",
    "split_pairs",
]

_SPLITS = ("train", "valid", "test")

#: Bump whenever the generator makes other sentences (the probe test says when it does): the
#: stored corpus is keyed by it, and the models that read the corpus by a digest of it.
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


@functools.cache
def _format_unit(value: int, unit: str) -> tuple[str, str]:
    from babel.units import format_unit

    return (
        format_unit(value, unit, length="long", locale="en"),
        format_unit(value, unit, length="long", locale="fr"),
    )


def _unit_clause(
    rng: random.Random, subject: tuple[str, str], verbs: list, units: list
) -> tuple[str, str]:
    verb_en, verb_fr = rng.choice(verbs)
    quantity_en, quantity_fr = _format_unit(rng.randint(1, 60), rng.choice(units))
    return f"{subject[0]} {verb_en} {quantity_en}", f"{subject[1]} {verb_fr} {quantity_fr}"


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


def generate_splits(num_pairs: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """Generate the corpus afresh, with no cache, and split it (what `builtin_splits` caches).

    Args:
        num_pairs: Number of sentences generated before deduplication.
        seed: Seed of the generator and of the split.

    Returns:
        The "train", "valid" and "test" lists of (English, French) pairs.
    """
    rng = random.Random(seed)
    pairs = [_sentence(rng) for _ in range(num_pairs)]
    return split_pairs(pairs, seed=seed)


def corpus_key(num_pairs: int, seed: int) -> dict[str, object]:
    """The stored corpus's key: what generates it, as it declares it.

    Args:
        num_pairs: Number of sentences generated before deduplication.
        seed: Seed of the generator and of the split.

    Returns:
        `CORPUS_VERSION`, the arguments and the versions of Babel and num2words (another CLDR
        release may word things differently).
    """
    from importlib.metadata import version

    return {
        "corpus_version": CORPUS_VERSION,
        "num_pairs": num_pairs,
        "seed": seed,
        "babel": version("babel"),
        "num2words": version("num2words"),
    }


@functools.lru_cache(maxsize=4)
def builtin_splits(num_pairs: int, seed: int) -> dict[str, list[tuple[str, str]]]:
    """`generate_splits`, cached in memory and in the result store on disk.

    ``builtin_splits.cache_clear()`` empties the memory cache; the disk cache is
    `attention_book.store.cached`'s, under `corpus_key`.

    Args:
        num_pairs: Number of sentences generated before deduplication.
        seed: Seed of the generator and of the split.

    Returns:
        The "train", "valid" and "test" lists of (English, French) pairs.
    """
    key = corpus_key(num_pairs, seed)
    return cached("builtin-corpus", key, lambda: generate_splits(num_pairs, seed))


@functools.cache
def corpus_digest(num_pairs: int = 15_000, seed: int = 0) -> str:
    """A digest of the built-in corpus's three splits: what a model that reads it depends on.

    The experiments put it in their keys, so that another corpus trains them again.

    Args:
        num_pairs: As in `builtin_pairs`.
        seed: As in `builtin_pairs`.

    Returns:
        16 hex digits (`attention_book.store.digest`).
    """
    splits = builtin_splits(num_pairs, seed)
    return digest([splits[name] for name in _SPLITS])


def builtin_pairs(
    split: str = "train", num_pairs: int = 15_000, seed: int = 0
) -> list[tuple[str, str]]:
    """The built-in English→French corpus, generated from CLDR (Babel) and num2words.

    `num_pairs` sentences are generated with a seeded random generator, deduplicated on the
    source sentence, shuffled with the same seed and split 80/10/10. The splits share no pair.
    The result is cached in memory and in the result store on disk (``cache_dir()`` of
    `attention_book.store`), so only the first call of all generates it.

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
    return list(builtin_splits(num_pairs, seed)[split])


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
    generate_splits(args.num_pairs, args.seed)
    generated = time.perf_counter() - start
    builtin_splits.cache_clear()
    start = time.perf_counter()
    builtin_pairs("train", args.num_pairs, args.seed)  # from the disk cache, if filled before
    loaded = time.perf_counter() - start
    print(corpus_summary(args.num_pairs, args.seed))
    print(
        f"generation: {generated:.2f} s; first call of builtin_pairs (disk cache): {loaded:.2f} s"
    )


def _probe_corpus() -> dict[str, object]:
    """What the probe test compares of the generator: a small corpus, its digest and sizes."""
    splits = generate_splits(200, seed=0)
    return {
        "digest": digest([splits[name] for name in _SPLITS]),
        "sizes": [len(splits[name]) for name in _SPLITS],
        "first pairs": splits["train"][:3],
    }


#: The stored corpus, declared for the probe test: editing the generator so that it makes other
#: sentences fails that test until `CORPUS_VERSION` is bumped.
RUNS = (
    Run(
        "builtin-corpus",
        CORPUS_VERSION,
        probe=_probe_corpus,
        result=lambda: builtin_splits(15_000, 0),
        key=lambda: corpus_key(15_000, 0),
        version_name="CORPUS_VERSION",
    ),
)
