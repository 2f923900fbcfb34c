"""The scoring chapter's reading of the gradients at queries and keys holds for its numbers.

Without the division by sqrt(d), the gradient at the scores collapses as d grows (the build's
table). The chapter goes one step further back (issue 41): at d = 64 the query still receives
a larger gradient than in the scaled model, while the median key has already lost orders of
magnitude. `scoring_gradient_verdict` words that comparison; it is fed made-up numbers in every
direction here, and the measured direction is checked over a few seeds of the same experiment,
with a margin taken from their spread, so that a sentence true for the chapter's seed is not an
accident of its draws.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from repo import ROOT

from attention_book.experiments.scoring import (
    DIMS,
    NUM_KEYS,
    NUM_TRIALS,
    scoring_scaling_measurements,
)
from attention_book.figures.scoring import scoring_gradient_facts, scoring_gradient_verdict

#: The chapter's core page and the deep dive that follows the gradient to the queries and keys.
PAGES = [
    ROOT / "docs" / "chapters" / name
    for name in ("scoring-functions.md", "scoring-functions-scaling.md")
]
#: The seeds of the spread: the chapter's (0) and four more.
SEEDS = (0, 1, 2, 3, 4)
AT = DIMS.index(64)


def made_up(query: list[float], key: list[float], dims=(16, 64, 256)) -> dict[str, str]:
    """The verdict on unscaled/scaled ratios `query` and `key` (the scaled gradients are 1)."""
    results = {
        "gradient_query_unscaled": query,
        "gradient_query_scaled": [1.0] * len(dims),
        "gradient_key_unscaled": key,
        "gradient_key_scaled": [1.0] * len(dims),
    }
    return scoring_gradient_verdict(results, dims, at=64)


def test_the_verdict_words_each_direction():
    words = made_up(query=[2.0, 3.1, 0.5], key=[0.1, 1e-5, 1e-9])
    assert words["query_comparison"] == "3.1 times larger than"
    assert words["query_below"] == "only from $d = 256$ on"
    assert words["key_comparison"] == "5.0 orders of magnitude smaller than"
    assert words["key_collapse"] == "from $d = 64$ on"
    assert words["order"] == "most keys stop learning at sizes where the queries still learn"
    words = made_up(query=[0.5, 0.4, 0.3], key=[0.5, 0.9, 0.001])
    assert words["query_comparison"] == "2 times smaller than"
    assert words["query_below"] == "only from $d = 16$ on"
    assert words["key_comparison"] == "about as large as"
    assert words["key_collapse"] == "from $d = 256$ on"
    assert words["order"] == "the queries lose their gradient no later than the keys"
    words = made_up(query=[1.5, 1.1, 1.2], key=[1.0, 0.0, 0.0])
    assert words["query_comparison"] == "about as large as"
    assert words["query_below"] == "at no size up to $d = 256$"
    assert words["key_comparison"] == "far smaller than"
    # a ratio that dips below the line and comes back does not count as "from d on"
    assert made_up(query=[0.5, 2.0, 0.5], key=[1.0, 1.0, 1.0])["query_below"] == (
        "only from $d = 256$ on"
    )
    assert made_up(query=[1.0] * 3, key=[1.0] * 3)["key_collapse"] == "at no size up to $d = 256$"


def log_ratios(what: str) -> list[float]:
    """log10 of unscaled / scaled median gradient at d = 64, one per seed."""
    values = []
    for seed in SEEDS:
        results = scoring_scaling_measurements(seed)
        unscaled = results[f"gradient_{what}_unscaled"][AT]
        values.append(math.log10(unscaled / results[f"gradient_{what}_scaled"][AT]))
    return values


def widened(values: list[float]) -> tuple[float, float]:
    """The seeds' range widened on each side by half of it (the book's rule for a spread)."""
    low, high = min(values), max(values)
    return low - (high - low) / 2, high + (high - low) / 2


def test_at_d64_the_key_gradient_has_collapsed_and_the_query_gradient_has_not():
    query_low, _ = widened(log_ratios("query"))
    _, key_high = widened(log_ratios("key"))
    assert query_low > 0, "unscaled, the query gets more gradient than scaled, in every seed"
    assert key_high < -2, "unscaled, the median key gets 100 times less, in every seed"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_seed_reads_the_same_words(seed):
    chapter = scoring_gradient_verdict(scoring_scaling_measurements(0))
    other = scoring_gradient_verdict(scoring_scaling_measurements(seed))
    for key in ("query_below", "key_collapse", "order"):
        assert other[key] == chapter[key]
    assert other["query_comparison"].endswith("times larger than")
    assert other["key_comparison"].endswith("orders of magnitude smaller than")


def test_the_gradients_at_queries_and_keys_are_autograds():
    """The experiment takes them from the gradient at the scores by the chain rule; autograd
    through q.k, on the same draws (up to d = 64), gives the same medians."""
    results = scoring_scaling_measurements()
    generator = torch.Generator().manual_seed(0)
    for i, d in enumerate(DIMS[: AT + 1]):
        queries = torch.randn(NUM_TRIALS, 1, d, generator=generator)
        keys = torch.randn(NUM_TRIALS, NUM_KEYS, d, generator=generator)
        upstream = torch.randn(NUM_TRIALS, NUM_KEYS, generator=generator)
        for how, scale in (("unscaled", 1.0), ("scaled", d**-0.5)):
            q, k = queries.clone().requires_grad_(), keys.clone().requires_grad_()
            weights = torch.softmax((q @ k.transpose(1, 2)).squeeze(1) * scale, dim=-1)
            (weights * upstream).sum().backward()
            query = q.grad.squeeze(1).norm(dim=-1).median().item()
            key = k.grad.norm(dim=-1).median().item()
            assert results[f"gradient_query_{how}"][i] == pytest.approx(query, rel=1e-4)
            assert results[f"gradient_key_{how}"][i] == pytest.approx(key, rel=1e-4)


def test_the_page_words_the_gradients_from_the_build():
    text = " ".join(" ".join(page.read_text(encoding="utf-8") for page in PAGES).split())
    assert "so the queries and keys that produced them stop learning" not in text
    cited = set(re.findall(r"\{\{ build:scoring_gradient_facts\.(\w+) \}\}", text))
    facts = scoring_gradient_facts()
    assert cited == set(facts), "every fact is cited, and only facts the build has"
    assert "![" in text and "scoring_gradient_at_qk.svg" in text
