"""Training and evaluation: a small training loop, a result cache, and trusted metrics.

Three modules, read in this order:

- `attention_book.training.loop`: `fit`, one readable loop for every model of the book, with
  `History`, `set_seed`, `get_device` and the `evaluate_*` helpers.
- `attention_book.training.cache`: `cached` keeps trained results on disk under a key;
  `experiment_key` builds a key that covers everything an experiment depends on.
- `attention_book.training.metrics`: `accuracy`, and `bleu` from sacrebleu.

Every public name is re-exported here (``from attention_book.training import fit``).
``python -m attention_book.training {clear-cache,cache-dir}`` manages the cache. Importing this
package loads no plotting library: `History.plot` imports matplotlib when it is called.
"""

from attention_book.training.cache import (
    DRAWING_CODE,
    RESULT_LIBRARIES,
    cache_dir,
    cache_path,
    cached,
    clear_cache,
    experiment_key,
    imported_modules,
    library_versions,
    package_source_hash,
    source_hash,
)
from attention_book.training.loop import (
    History,
    LossFn,
    classification_loss,
    evaluate_accuracy,
    evaluate_loss,
    fit,
    get_device,
    set_seed,
)
from attention_book.training.metrics import accuracy, bleu

__all__ = [
    "DRAWING_CODE",
    "RESULT_LIBRARIES",
    "History",
    "LossFn",
    "accuracy",
    "bleu",
    "cache_dir",
    "cache_path",
    "cached",
    "classification_loss",
    "clear_cache",
    "evaluate_accuracy",
    "evaluate_loss",
    "experiment_key",
    "fit",
    "get_device",
    "imported_modules",
    "library_versions",
    "package_source_hash",
    "set_seed",
    "source_hash",
]
