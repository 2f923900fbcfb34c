"""Training and evaluation: a small training loop, trusted metrics and schedules.

Three modules, read in this order:

- `attention_book.training.loop`: `fit`, one readable loop for every model of the book, with
  `History`, `set_seed`, `get_device` and the `evaluate_*` helpers.
- `attention_book.training.metrics`: `accuracy`, `bleu` from sacrebleu, and `num_parameters`.
- `attention_book.training.schedules`: learning rates with warm-up, stepped every step.

The result store (`cached`, `declared_key`, ...) is `attention_book.store`. The public names of
the loop and the metrics are re-exported here
(``from attention_book.training import fit``); the schedules are imported from their module.
``python -m attention_book.training {clear-cache,cache-dir}`` manages the store. Importing this
package loads no plotting library: `History.plot` imports matplotlib when it is called.
"""

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
from attention_book.training.metrics import accuracy, bleu, num_parameters

__all__ = [
    "History",
    "LossFn",
    "accuracy",
    "bleu",
    "classification_loss",
    "evaluate_accuracy",
    "evaluate_loss",
    "fit",
    "get_device",
    "num_parameters",
    "set_seed",
]
