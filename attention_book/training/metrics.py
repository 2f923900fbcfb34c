"""Metrics: classification accuracy, BLEU computed by sacrebleu, and a model's size.

BLEU comes from sacrebleu, the reference implementation, never from a hand-written copy; it is
imported when `bleu` is first called, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["accuracy", "bleu", "num_parameters"]


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of rows whose highest logit is at the label's index.

    Args:
        logits: Class scores.
        labels: Class indices.

    Returns:
        The accuracy, in [0, 1].

    Shapes:
        - logits: (batch, num_classes)
        - labels: (batch,)

    Raises:
        ValueError: If the shapes do not match.
    """
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(
            "logits must have shape (batch, num_classes) and labels (batch,), got logits "
            f"{tuple(logits.shape)} and labels {tuple(labels.shape)}"
        )
    return (logits.argmax(dim=1) == labels).float().mean().item()


def bleu(
    hypotheses: Sequence[str] | Sequence[Sequence[str]],
    references: Sequence[str] | Sequence[Sequence[str]],
    tokenize: str | None = None,
) -> float:
    """Corpus-level BLEU (0 to 100) computed by sacrebleu.

    Token lists are joined with spaces and scored with sacrebleu's ``tokenize="none"``, so
    BLEU counts exactly the tokens the model produced (the book's `tokenize` already split
    punctuation). Strings are scored with sacrebleu's default "13a" tokenizer, the usual
    choice for detokenized text. Remove `<bos>`, `<eos>` and `<pad>` before calling.

    Args:
        hypotheses: One translation per sentence: strings or token lists.
        references: One reference translation per sentence, same kind as `hypotheses`.
        tokenize: Override sacrebleu's tokenizer ("none", "13a", "intl", ...).

    Returns:
        The corpus BLEU score, from 0 (no shared n-gram) to 100 (identical).

    Raises:
        ValueError: If the lists are empty or have different lengths.
    """
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length, got {len(hypotheses)} "
            f"and {len(references)}"
        )
    if not hypotheses:
        raise ValueError("hypotheses and references must not be empty")
    as_tokens = not isinstance(hypotheses[0], str)
    if as_tokens:
        hypotheses = [" ".join(tokens) for tokens in hypotheses]
        references = [" ".join(tokens) for tokens in references]
    if tokenize is None:
        tokenize = "none" if as_tokens else "13a"
    # force=True for token lists: they are tokenized on purpose, so sacrebleu's warning
    # about tokenized input does not apply.
    score = sacrebleu.corpus_bleu(
        list(hypotheses), [list(references)], tokenize=tokenize, force=as_tokens
    )
    return score.score


def num_parameters(model: nn.Module) -> int:
    """Count the trainable parameters of a model.

    Args:
        model: Any module.

    Returns:
        The number of trainable scalars.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
