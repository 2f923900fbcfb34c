"""Decoding: turning a trained encoder-decoder into translations.

Training feeds the decoder the reference (teacher forcing); at test time the decoder must feed
itself. `greedy_decode` takes the most probable token at every step; `beam_search` keeps the
`beam_size` best extensions of its partial translations at every step, and can still end
less probable than the greedy translation. Both work with any model built from an encoder and a
decoder that follow `attention_book.seq2seq.EncoderDecoder`'s protocol (the recurrent models
and the Transformer alike), and both record the attention weights of every generated token when
the decoder keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from attention_book.validation import check_sequence_lengths, check_tokens

__all__ = ["Translation", "beam_search", "greedy_decode"]


@dataclass
class Translation:
    """One decoded sentence.

    Attributes:
        tokens: Generated token indices, without <bos> and without the final <eos>.
        score: Sum of the log-probabilities of the generated tokens, <eos> included when
            it was generated.
        attention_weights: For an attention decoder, the weights of each generated token
            over the source tokens, shape (len(tokens), num_src_steps); None otherwise.
    """

    tokens: list[int]
    score: float
    attention_weights: torch.Tensor | None = None


def _encode_for_decoding(
    model: nn.Module, src: torch.Tensor, src_valid_lens: torch.Tensor | None
) -> tuple[Any, torch.Tensor]:
    check_tokens("src", src)
    if src_valid_lens is None:
        src_valid_lens = torch.full((src.shape[0],), src.shape[1], dtype=torch.long)
    check_sequence_lengths("src_valid_lens", src_valid_lens, src)
    src_valid_lens = src_valid_lens.to(src.device)
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    return state, src_valid_lens


def _check_max_len(max_len: int) -> None:
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


# --8<-- [start:greedy_decode]
@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_lens: torch.Tensor | None,
    bos_index: int,
    eos_index: int,
    max_len: int,
) -> list[Translation]:
    """Translate a batch by taking the most probable token at every step.

    Args:
        model: A trained encoder-decoder.
        src: Source token indices (padded).
        src_valid_lens: Number of real tokens of each source; None means no padding.
        bos_index: Index of <bos>, the decoder's first input.
        eos_index: Index of <eos>; a sentence stops when it is generated.
        max_len: Most tokens generated per sentence (<eos> included).

    Returns:
        One `Translation` per source sentence.

    Shapes:
        - src: (batch, num_src_steps)
        - src_valid_lens: (batch,)

    Raises:
        ValueError: If `src` is not 2-D, `src_valid_lens` has the wrong shape or values, or
            `max_len` < 1.
    """
    _check_max_len(max_len)
    was_training = model.training
    model.eval()
    state, _ = _encode_for_decoding(model, src, src_valid_lens)
    batch = src.shape[0]
    tokens = torch.full((batch, 1), bos_index, dtype=torch.long, device=src.device)
    generated, weights = [], []
    scores = torch.zeros(batch, device=src.device)
    lengths = torch.full((batch,), max_len, dtype=torch.long)  # tokens before <eos>
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    for step in range(max_len):
        logits, state = model.decoder(tokens, state)
        log_probs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (batch, vocab_size)
        tokens = log_probs.argmax(dim=-1, keepdim=True)  # (batch, 1)
        scores += torch.where(finished, 0.0, log_probs.gather(1, tokens)[:, 0])
        generated.append(tokens[:, 0])
        if getattr(model.decoder, "attention_weights", None) is not None:
            weights.append(model.decoder.attention_weights[:, -1])  # (batch, num_src_steps)
        just_finished = (tokens[:, 0] == eos_index) & ~finished
        lengths[just_finished.cpu()] = step
        finished |= just_finished
        if bool(finished.all()):
            break
    model.train(was_training)
    generated = torch.stack(generated, dim=1).cpu()  # (batch, num_generated)
    stacked = torch.stack(weights, dim=1).cpu() if weights else None
    return [
        Translation(
            tokens=generated[i, : lengths[i]].tolist(),
            score=float(scores[i]),
            attention_weights=None if stacked is None else stacked[i, : lengths[i]],
        )
        for i in range(batch)
    ]


# --8<-- [end:greedy_decode]


# --8<-- [start:beam_search]
@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_valid_lens: torch.Tensor | None,
    bos_index: int,
    eos_index: int,
    max_len: int,
    beam_size: int,
    length_penalty: float = 0.0,
) -> list[Translation]:
    """Translate a batch with beam search, one sentence at a time.

    At every step each live partial translation is extended by every token, and the
    `beam_size` best extensions are kept. An extension ending in <eos> is finished and
    leaves the beam without being replaced, so the next step extends fewer hypotheses.
    Hypotheses are ranked by their summed log-probability divided by length**length_penalty
    (0 ranks by log-probability alone, which makes beam_size=1 exactly greedy decoding).
    Nothing bounds the result by greedy decoding's: a prefix that is behind at some step can
    be the one that ends best, and the beam may drop it.

    Args:
        model: A trained encoder-decoder.
        src: Source token indices (padded).
        src_valid_lens: Number of real tokens of each source; None means no padding.
        bos_index: Index of <bos>, the decoder's first input.
        eos_index: Index of <eos>.
        max_len: Most tokens generated per sentence (<eos> included).
        beam_size: Number of partial translations kept at every step.
        length_penalty: Exponent of the length normalization (0 for none).

    Returns:
        The best `Translation` of each source sentence; its `score` is the summed
        log-probability (not normalized).

    Shapes:
        - src: (batch, num_src_steps)
        - src_valid_lens: (batch,)

    Raises:
        ValueError: If `beam_size` < 1, `max_len` < 1, `length_penalty` < 0, or the source
            has the wrong shape.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    _check_max_len(max_len)
    was_training = model.training
    model.eval()
    _, src_valid_lens = _encode_for_decoding(model, src, src_valid_lens)  # checks the inputs
    results = []
    for i in range(src.shape[0]):
        state, _ = _encode_for_decoding(model, src[i : i + 1], src_valid_lens[i : i + 1])
        results.append(
            _beam_search_one(
                model, state, bos_index, eos_index, max_len, beam_size, length_penalty, src.device
            )
        )
    model.train(was_training)
    return results


def _rank(score: float, length: int, length_penalty: float) -> float:
    return score / max(length, 1) ** length_penalty


def _beam_search_one(
    model, state, bos_index, eos_index, max_len, beam_size, length_penalty, device
):
    decoder = model.decoder
    beams: list[list[int]] = [[]]  # tokens of each live hypothesis
    beam_weights: list[list[torch.Tensor]] = [[]]
    scores = torch.zeros(1, device=device)  # (num_live,)
    inputs = torch.full((1, 1), bos_index, dtype=torch.long, device=device)
    finished: list[Translation] = []
    for step in range(max_len):
        logits, state = decoder(inputs, state)
        log_probs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (num_live, vocab_size)
        weights = getattr(decoder, "attention_weights", None)
        candidates = (scores[:, None] + log_probs).flatten()  # (num_live * vocab_size,)
        if length_penalty > 0:  # rank by normalized score; finished ones end here
            lengths = torch.full_like(log_probs, step + 1)
            lengths[:, eos_index] = step  # <eos> does not count as a generated word
            ranks = candidates / lengths.flatten().clamp(min=1) ** length_penalty
        else:
            ranks = candidates
        top = ranks.topk(min(beam_size, ranks.numel())).indices
        vocab_size = log_probs.shape[1]
        keep, new_beams, new_weights, new_scores = [], [], [], []
        for flat in top.tolist():
            b, token = divmod(flat, vocab_size)
            tokens = beams[b]
            steps = beam_weights[b] + ([weights[b, -1].cpu()] if weights is not None else [])
            if token == eos_index:
                finished.append(
                    Translation(tokens, float(candidates[flat]), _stack(steps[:-1], weights))
                )
                continue
            keep.append(b)
            new_beams.append([*tokens, token])
            new_weights.append(steps)
            new_scores.append(candidates[flat])
        if not keep:
            break
        if step == max_len - 1:  # out of steps: the live hypotheses end here
            finished += [
                Translation(t, float(s), _stack(w, weights))
                for t, w, s in zip(new_beams, new_weights, new_scores, strict=True)
            ]
            break
        beams, beam_weights, scores = new_beams, new_weights, torch.stack(new_scores)
        state = decoder.reorder_state(state, torch.tensor(keep, device=device))
        inputs = torch.tensor([b[-1] for b in beams], device=device)[:, None]
        # Scores only fall as tokens are added: once a finished hypothesis beats every live
        # one (with no length normalization), no live one can win.
        if length_penalty == 0 and finished and max(f.score for f in finished) >= scores.max():
            break
    return max(finished, key=lambda f: _rank(f.score, len(f.tokens), length_penalty))


def _stack(steps: list[torch.Tensor], weights: torch.Tensor | None) -> torch.Tensor | None:
    if weights is None:
        return None
    if not steps:
        return torch.zeros(0, weights.shape[-1])
    return torch.stack(steps)


# --8<-- [end:beam_search]
