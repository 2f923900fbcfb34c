"""The losses of a translator: masked cross-entropy, label smoothing, and `fit`'s loss.

Target sentences of one batch have different lengths and are padded to the longest; the loss
must count the real tokens only. `masked_cross_entropy` (and `MaskedSoftmaxCELoss`, the same as
a module) averages the cross-entropy over them; `label_smoothed_cross_entropy` does the same
against smoothed targets (Szegedy et al., 2016), as the Transformer trains; `translation_loss`
is the function `attention_book.training.fit` calls on a batch of the translation loaders.
The RNN translators of `attention_book.seq2seq` and the Transformer share them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = [
    "MaskedSoftmaxCELoss",
    "label_smoothed_cross_entropy",
    "masked_cross_entropy",
    "translation_loss",
]


def _check_loss_inputs(
    logits: torch.Tensor, labels: torch.Tensor, valid_lens: torch.Tensor, reduction: str
) -> None:
    """Raise a ValueError unless the shapes of `masked_cross_entropy`'s inputs agree."""
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "logits must have shape (batch, num_steps, vocab_size) and labels "
            f"(batch, num_steps), got logits {tuple(logits.shape)} and labels "
            f"{tuple(labels.shape)}"
        )
    if valid_lens.shape != labels.shape[:1]:
        raise ValueError(
            f"valid_lens must have shape (batch,) = ({labels.shape[0]},), "
            f"got {tuple(valid_lens.shape)}"
        )
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")


# --8<-- [start:masked_cross_entropy]
def masked_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    valid_lens: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy over the real tokens of each target sentence; padding counts for nothing.

    Args:
        logits: Unnormalized scores over the vocabulary at every step.
        labels: The target token at every step.
        valid_lens: Number of real tokens of each target (the steps after it are padding).
        reduction: "mean" averages over all real tokens of the batch; "none" returns each
            sentence's average over its own real tokens.

    Returns:
        The loss: a scalar for "mean", one value per sentence for "none".

    Shapes:
        - logits: (batch, num_steps, vocab_size)
        - labels: (batch, num_steps)
        - valid_lens: (batch,)

    Raises:
        ValueError: If the shapes disagree or `reduction` is unknown.
    """
    _check_loss_inputs(logits, labels, valid_lens, reduction)
    steps = torch.arange(labels.shape[1], device=labels.device)
    mask = (steps[None, :] < valid_lens[:, None]).to(logits.dtype)  # (batch, num_steps)
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    losses = losses * mask  # padded steps contribute exactly zero
    if reduction == "mean":
        return losses.sum() / mask.sum().clamp(min=1)
    return losses.sum(dim=1) / mask.sum(dim=1).clamp(min=1)


class MaskedSoftmaxCELoss(nn.Module):
    """`masked_cross_entropy` as a module, called as (logits, labels, valid_lens).

    Args:
        reduction: "mean" (one scalar) or "none" (one value per sentence).
    """

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(
        self, logits: torch.Tensor, labels: torch.Tensor, valid_lens: torch.Tensor
    ) -> torch.Tensor:
        """Compute the masked loss.

        Args:
            logits: Unnormalized scores over the vocabulary at every step.
            labels: The target token at every step.
            valid_lens: Number of real tokens of each target.

        Returns:
            The loss, reduced as configured.

        Shapes:
            - logits: (batch, num_steps, vocab_size)
            - labels: (batch, num_steps)
            - valid_lens: (batch,)
        """
        return masked_cross_entropy(logits, labels, valid_lens, self.reduction)


# --8<-- [end:masked_cross_entropy]


# --8<-- [start:label_smoothing]
def label_smoothed_cross_entropy(
    logits: Tensor, labels: Tensor, valid_lens: Tensor, label_smoothing: float = 0.0
) -> Tensor:
    """Mean cross-entropy over the real target tokens, against smoothed labels.

    With smoothing ``eps`` the target of each position is ``1 - eps`` on the reference token
    plus ``eps / vocab_size`` on every token (Szegedy et al., 2016), which PyTorch's
    ``cross_entropy(label_smoothing=eps)`` computes. With ``eps = 0`` this is
    `masked_cross_entropy`.

    Args:
        logits: Scores over the target vocabulary.
        labels: Reference tokens.
        valid_lens: Number of real tokens of each target; later positions are padding.
        label_smoothing: ``eps``, from 0 (one-hot targets) to 1.

    Returns:
        The mean loss over all real tokens of the batch.

    Shapes:
        - logits: ``(batch, num_steps, vocab_size)``
        - labels: ``(batch, num_steps)``
        - valid_lens: ``(batch,)``

    Raises:
        ValueError: If the shapes disagree or ``label_smoothing`` is outside [0, 1].
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "logits must have shape (batch, num_steps, vocab_size) and labels (batch, "
            f"num_steps), got logits {tuple(logits.shape)} and labels {tuple(labels.shape)}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    mask = torch.arange(labels.shape[1], device=labels.device) < valid_lens[:, None]
    loss = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=label_smoothing
    )  # (batch, num_steps)
    return (loss * mask).sum() / mask.sum().clamp(min=1)


# --8<-- [end:label_smoothing]


# --8<-- [start:translation_loss]
def translation_loss(model: nn.Module, batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, float]:
    """`fit`'s loss for a translator: masked cross-entropy, weighted by the real target tokens.

    Args:
        model: An encoder-decoder, called as ``model(src, tgt_input, src_valid_len)``.
        batch: ``(src, src_valid_len, tgt_input, tgt_valid_len, tgt_label)``, as the
            translation loaders of `attention_book.data` give it.

    Returns:
        (mean loss over the batch's real target tokens, their number), so that `fit`
        averages an epoch over tokens, not sentences.
    """
    src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = batch
    logits = model(src, tgt_input, src_valid_len)
    return masked_cross_entropy(logits, tgt_label, tgt_valid_len), float(tgt_valid_len.sum())


# --8<-- [end:translation_loss]
