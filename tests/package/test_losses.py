import pytest
import torch
from torch.nn import functional as F

from attention_book.losses import (
    MaskedSoftmaxCELoss,
    label_smoothed_cross_entropy,
    masked_cross_entropy,
    translation_loss,
)
from attention_book.seq2seq import EncoderDecoder, Seq2SeqAttentionDecoder, Seq2SeqEncoder

VOCAB = 11


def test_masked_loss_ignores_padding():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, VOCAB, generator=generator)
    labels = torch.randint(0, VOCAB, (3, 6), generator=generator)
    valid = torch.tensor([6, 2, 4])
    loss = masked_cross_entropy(logits, labels, valid)
    changed = logits.clone()
    for i, n in enumerate(valid.tolist()):
        changed[i, n:] = 100 * torch.randn(6 - n, VOCAB, generator=generator)
    changed_labels = labels.clone()
    changed_labels[1, 2:] = 0
    assert masked_cross_entropy(changed, changed_labels, valid) == loss
    # And it is the plain cross-entropy of the real tokens.
    real = torch.cat(
        [
            F.cross_entropy(logits[i, :n], labels[i, :n], reduction="none")
            for i, n in enumerate(valid.tolist())
        ]
    )
    torch.testing.assert_close(loss, real.mean())
    per_sentence = MaskedSoftmaxCELoss(reduction="none")(logits, labels, valid)
    expected = torch.stack(
        [F.cross_entropy(logits[i, :n], labels[i, :n]) for i, n in enumerate(valid.tolist())]
    )
    torch.testing.assert_close(per_sentence, expected)


def test_masked_loss_gradient_is_zero_on_padding():
    logits = torch.randn(2, 4, VOCAB, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, 4))
    masked_cross_entropy(logits, labels, torch.tensor([4, 1])).backward()
    assert torch.all(logits.grad[1, 1:] == 0)
    assert torch.all(logits.grad[1, 0] != 0)


def test_label_smoothing_zero_is_the_masked_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64)
    labels = torch.randint(0, 7, (3, 5))
    valid_lens = torch.tensor([5, 2, 0])
    torch.testing.assert_close(
        label_smoothed_cross_entropy(logits, labels, valid_lens),
        masked_cross_entropy(logits, labels, valid_lens),
    )


def test_label_smoothing_mixes_the_reference_with_the_uniform_distribution():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6, dtype=torch.float64)
    labels = torch.randint(0, 6, (2, 4))
    valid_lens = torch.tensor([4, 3])
    eps = 0.1
    log_probs = logits.log_softmax(dim=-1)
    target = torch.full_like(log_probs, eps / 6)
    target.scatter_add_(-1, labels[..., None], torch.full_like(log_probs[..., :1], 1 - eps))
    per_token = -(target * log_probs).sum(dim=-1)  # (batch, num_steps)
    mask = torch.arange(4) < valid_lens[:, None]
    expected = per_token[mask].mean()
    loss = label_smoothed_cross_entropy(logits, labels, valid_lens, eps)
    torch.testing.assert_close(loss, expected)
    # Padding positions count for nothing: changing their logits changes nothing.
    other = logits.clone()
    other[1, 3] += 5.0
    loss = label_smoothed_cross_entropy(other, labels, valid_lens, eps)
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long)), r"logits must have shape"),
        ((torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long)), r"labels \(batch"),
    ],
)
def test_label_smoothing_rejects_bad_shapes(args, message):
    with pytest.raises(ValueError, match=message):
        label_smoothed_cross_entropy(*args, torch.tensor([1, 1]))


def test_label_smoothing_rejects_bad_epsilon():
    with pytest.raises(ValueError, match="label_smoothing"):
        label_smoothed_cross_entropy(
            torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), torch.tensor([2]), 1.5
        )


def test_translation_loss_is_the_masked_loss_weighted_by_the_real_target_tokens():
    torch.manual_seed(0)
    vocab = 9
    model = EncoderDecoder(
        Seq2SeqEncoder(vocab, 4, 8, 1), Seq2SeqAttentionDecoder(vocab, 4, 8, 1)
    ).double()
    src = torch.randint(3, vocab, (2, 5))
    tgt_input, tgt_label = torch.randint(3, vocab, (2, 2, 4))
    src_valid_len, tgt_valid_len = torch.tensor([5, 3]), torch.tensor([4, 2])
    batch = (src, src_valid_len, tgt_input, tgt_valid_len, tgt_label)
    loss, weight = translation_loss(model, batch)
    expected = masked_cross_entropy(model(src, tgt_input, src_valid_len), tgt_label, tgt_valid_len)
    torch.testing.assert_close(loss, expected)
    assert weight == 6.0
