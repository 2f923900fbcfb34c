"""The referee of the build: trained results against the headline numbers recorded for them.

The probe test replays a few steps of every experiment; what only shows at full scale is
caught here. After the build has drawn its figures (and so trained what they show), every full
result in the store is reduced to its headline numbers (test BLEU, accuracies, validation
losses) and compared with the spread recorded for it in ``tests/recorded/headlines.json`` over
other CPU arithmetic and seeds (`attention_book.experiments.spread.check_headlines`). A number
outside it fails the build, before a reader sees a page written from it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger

from attention_book.experiments.probes import declared_runs
from attention_book.experiments.spread import HEADLINES, check_headlines, headline_numbers

log = get_plugin_logger(__name__)


def referee(path: Path = HEADLINES) -> int:
    """Compare every stored full result's headline numbers with those recorded in `path`.

    Args:
        path: The recorded headline numbers.

    Returns:
        How many runs were compared (those whose full result is in the store).

    Raises:
        PluginError: If a number left its recorded spread, or a run's version has no
            recorded numbers; the message lists each one and what to do.
    """
    start = time.perf_counter()
    recorded = json.loads(path.read_text(encoding="utf-8"))
    runs = declared_runs()
    now = headline_numbers(runs)
    problems = check_headlines(recorded, runs, now)
    if problems:
        raise PluginError(
            "the referee found results outside their recorded spread:\n" + "\n".join(problems)
        )
    compared = len(now)
    log.info(
        "referee: the headline numbers of %d stored results agree with %s (%.1f s)",
        compared, path.name, time.perf_counter() - start,
    )  # fmt: skip
    return compared
