"""The scoring-functions chapter's experiment: what 1/sqrt(d) does to dot-product attention.

For each size d of queries and keys, random unit-variance queries meet random keys; the
measurement compares the unscaled scores q.k with the scaled scores q.k / sqrt(d): their
variance, how saturated the softmax gets, and how much gradient flows back to the scores, and
one step further, to the query and to each key that produced them.
"""

from __future__ import annotations

import math
from functools import cache

import torch

__all__ = [
    "DIMS",
    "NUM_KEYS",
    "NUM_TRIALS",
    "VERSION",
    "scoring_scaling_measurements",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 3

#: Query/key sizes of the scaling experiment, and its sample sizes.
DIMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
NUM_KEYS = 32
NUM_TRIALS = 1000


@cache
def scoring_scaling_measurements(seed: int = 0) -> dict[str, list[float]]:
    """Measure, for each d, what scaling does to dot-product scores, the softmax and gradients.

    For every d, NUM_TRIALS queries each meet NUM_KEYS keys; all components are independent
    standard normal. For the unscaled scores q.k and the scaled scores q.k / sqrt(d) it
    records: the variance of the scores, the mean of each row's largest softmax weight, and,
    when a random upstream gradient flows back through the softmax, the median norm of the
    gradient that reaches the scores (one norm per query's row of scores), the query (one norm
    per query) and the keys (one norm per key, the median over all of them). The gradients at
    the query and the keys follow from the one at the scores by the chain rule through
    ``scale * q.k_j`` (the test compares them with autograd's).

    Args:
        seed: Seed of the draws; the chapter shows seed 0, the tests compare a few seeds.

    Returns:
        For "unscaled" and "scaled" scores, one value per d of DIMS under the keys
        "variance_<how>", "largest_weight_<how>", "gradient_<how>" (at the scores),
        "gradient_query_<how>" and "gradient_key_<how>".
    """
    generator = torch.Generator().manual_seed(seed)
    results: dict[str, list[float]] = {
        f"{what}_{how}": []
        for what in ("variance", "largest_weight", "gradient", "gradient_query", "gradient_key")
        for how in ("unscaled", "scaled")
    }
    for d in DIMS:
        queries = torch.randn(NUM_TRIALS, 1, d, generator=generator)  # (trials, 1, d)
        keys = torch.randn(NUM_TRIALS, NUM_KEYS, d, generator=generator)  # (trials, keys, d)
        dot = (queries @ keys.transpose(1, 2)).squeeze(1)  # (trials, num_keys)
        upstream = torch.randn(NUM_TRIALS, NUM_KEYS, generator=generator)
        for how, scale in (("unscaled", 1.0), ("scaled", 1 / math.sqrt(d))):
            scores = (dot * scale).requires_grad_()
            weights = torch.softmax(scores, dim=-1)  # (trials, num_keys)
            (weights * upstream).sum().backward()
            results[f"variance_{how}"].append(scores.detach().var().item())
            results[f"largest_weight_{how}"].append(weights.max(dim=-1).values.mean().item())
            results[f"gradient_{how}"].append(scores.grad.norm(dim=-1).median().item())
            # One step further back, by the chain rule through scores = scale * q.k_j:
            # dL/dq = scale * sum_j g_j k_j and dL/dk_j = scale * g_j q, g = dL/dscores.
            g = scores.grad  # (trials, num_keys)
            query_grad = scale * (g[:, None] @ keys).squeeze(1)  # (trials, d)
            key_norms = scale * g.abs() * queries.norm(dim=-1)  # (trials, num_keys)
            results[f"gradient_query_{how}"].append(query_grad.norm(dim=-1).median().item())
            results[f"gradient_key_{how}"].append(key_norms.median().item())
    return results
