"""Words of the book's making that a reader cannot know do not appear in its pages.

The book was written from a source document its authors called "the seed": the d2l-style code
and notes the chapters started from. The word leaked into the pages ("the seed's mask", "the
d2l signatures the seed follows"), where no reader knows what it means, and where "seed" also
means a random seed. This test fails on "seed" in the prose of any page of docs/ unless the
words around it say it is a random seed: "the same seed", "one seed", "every seed", "a fixed
seed", "per seed", "seed by seed", "seed 0", "seed=", "the random seed", "the first seed's
runs", "model and seed", "the highest seed". Code blocks and inline code are not prose and are
not read (``manual_seed``, ``seed=0``); neither is the plural, which only random seeds have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from booktools.markdown import pieces

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))

#: "seed" or "seed's", not "seeds", "seeded" or "manual_seed".
SEED = re.compile(r"(?<![\w-])seed(?:'s|’s)?(?![\w-])", re.I)
#: A word just before "seed" that makes it a random seed.
RANDOM_BEFORE = {
    "a", "and", "another", "by", "different", "each", "every", "first", "fixed", "highest",
    "its", "last", "lowest", "one", "or", "other", "per", "random", "same", "second", "third",
}  # fmt: skip
#: What may follow "seed" to make it a random seed: a number, "= 0", "by seed".
RANDOM_AFTER = re.compile(r"\s*(?:=\s*\d|\d|by seed\b)", re.I)
COMMENT = re.compile(r"<!--.*?-->")


def is_random_seed(line: str, match: re.Match) -> bool:
    """Whether the "seed" that `match` found in `line` is a random seed, by its neighbours."""
    before = re.findall(r"[\w]+", line[: match.start()].lower())
    if before and before[-1] in RANDOM_BEFORE:
        return True
    return bool(RANDOM_AFTER.match(line[match.end() :]))


def source_document_seeds(text: str) -> list[str]:
    """Each line of prose that says "seed" for something other than a random seed.

    Args:
        text: A Markdown page.

    Returns:
        ``"line N: text"`` for each such line, in order.
    """
    found = []
    number = 0
    for piece in pieces(text):
        if not isinstance(piece, str):  # a fence: code, never prose
            number = piece.end
            continue
        number += 1
        line = COMMENT.sub("", "".join(piece.split("`")[::2]))  # without inline code
        if any(not is_random_seed(line, m) for m in SEED.finditer(line)):
            found.append(f"line {number}: {piece.strip()}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_calls_the_source_document_the_seed(page: Path):
    found = source_document_seeds(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{page.relative_to(ROOT)} says 'seed' for the document the book started from, which no "
        "reader knows; say what it is (e.g. 'the d2l-style code this chapter started from'):\n"
        + "\n".join(found)
    )


FLAGGED = [
    "The seed's own example, with two layers.",
    "the d2l signatures the seed follows",
    "Two details follow the official code rather than the seed.",
    "### The seed's mask, and why it breaks",
    "but the seed draws the position embedding from a normal distribution",
    "Seed: the code we started from.",
]
ALLOWED = [
    "Same data, the same seed, and the same number of steps.",
    "One seed per model, one corpus.",
    "after training with seed 0, and with `seed=1`",
    "for every seed, seed by seed:",
    "freshly initialized layers (fixed seed), width 32",
    "what changing nothing but the random seed does",
    "The attention weights of the first seed's models.",
    "only on a seed and the tile's position",
    "one line per model and seed; error bars from the lowest to the highest seed",
    "three seeds each, a random-seed sweep, and `torch.manual_seed(0)`",
    "```python\nmodel = build()  # the seed's layout\n```",
]


@pytest.mark.parametrize("text", FLAGGED)
def test_the_check_flags_the_source_document_called_the_seed(text: str):
    assert source_document_seeds(text) == [f"line 1: {text}"]


@pytest.mark.parametrize("text", ALLOWED)
def test_the_check_allows_random_seeds_and_code(text: str):
    assert source_document_seeds(text) == []


def test_the_check_counts_lines_after_a_fence():
    text = "Intro.\n\n```python\nx = 1\ny = 2\n```\n\nThe seed's code.\n"
    assert source_document_seeds(text) == ["line 8: The seed's code."]
