"""Sequence to sequence learning with recurrent networks, with and without attention.

An encoder reads the source sentence into one hidden state per token. A decoder writes the
target sentence one token at a time. The plain decoder sees the source only through a single
fixed-length context vector (the encoder's final hidden state); the Bahdanau decoder looks
back at every encoder hidden state at every step, with additive attention whose query is
the decoder's previous hidden state (Bahdanau, Cho and Bengio, 2015).

The module also holds the pieces needed to train and use such models: the masked
cross-entropy loss that ignores padding, greedy decoding and beam search, both of which
record the attention weights of every generated token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from attention_book.attention import AdditiveAttention
from attention_book.masking import masked_softmax

__all__ = [
    "EncoderDecoder",
    "MaskedSoftmaxCELoss",
    "Seq2SeqAttentionDecoder",
    "Seq2SeqDecoder",
    "Seq2SeqEncoder",
    "Translation",
    "beam_search",
    "greedy_decode",
    "masked_cross_entropy",
    "num_parameters",
]

#: A recurrent state: a GRU's hidden state, or an LSTM's (hidden state, cell state) pair.
RNNState = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


def _make_rnn(rnn: str, input_size: int, num_hiddens: int, num_layers: int, dropout: float):
    """Build a batch-first GRU or LSTM."""
    rnns = {"gru": nn.GRU, "lstm": nn.LSTM}
    if rnn not in rnns:
        raise ValueError(f"rnn must be 'gru' or 'lstm', got {rnn!r}")
    return rnns[rnn](input_size, num_hiddens, num_layers, dropout=dropout, batch_first=True)


def _top_hidden(state: RNNState) -> torch.Tensor:
    """The last layer's hidden state of a GRU or LSTM state, shape (batch, num_hiddens)."""
    hidden = state[0] if isinstance(state, tuple) else state
    return hidden[-1]


def _select_rnn_state(state: RNNState, index: torch.Tensor) -> RNNState:
    """Pick batch entries of a recurrent state (batch is dimension 1 for nn.GRU/nn.LSTM)."""
    if isinstance(state, tuple):
        return tuple(s.index_select(1, index) for s in state)
    return state.index_select(1, index)


def _check_tokens(name: str, tokens: torch.Tensor) -> None:
    if tokens.dim() != 2:
        raise ValueError(
            f"{name} must have shape (batch, num_steps) of token indices, "
            f"got shape {tuple(tokens.shape)}"
        )


def _check_valid_lens(valid_lens: torch.Tensor | None, tokens: torch.Tensor, name: str) -> None:
    if valid_lens is None:
        return
    batch, num_steps = tokens.shape
    if valid_lens.shape != (batch,):
        raise ValueError(
            f"{name} must have shape (batch,) = ({batch},), got shape {tuple(valid_lens.shape)}"
        )
    if bool((valid_lens < 1).any()) or bool((valid_lens > num_steps).any()):
        raise ValueError(
            f"{name} must lie in [1, num_steps={num_steps}], got {valid_lens.tolist()}"
        )


# --8<-- [start:Seq2SeqEncoder]
class Seq2SeqEncoder(nn.Module):
    """A recurrent encoder: one hidden state per source token, and a final state.

    Padding is skipped (the sequences are packed), so the final state is the state after
    each sentence's last real token, whatever the padding.

    Args:
        vocab_size: Size of the source vocabulary.
        embed_size: Size of the token embeddings.
        num_hiddens: Size of the recurrent hidden state.
        num_layers: Number of stacked recurrent layers.
        dropout: Dropout between recurrent layers.
        rnn: "gru" or "lstm".
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
        rnn: str = "gru",
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _make_rnn(rnn, embed_size, num_hiddens, num_layers, dropout)

    def forward(
        self, src: torch.Tensor, valid_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, RNNState]:
        """Encode a batch of source sentences.

        Args:
            src: Source token indices.
            valid_lens: Number of real (non-padding) tokens of each sentence; None means
                no padding.

        Returns:
            The hidden state of the last layer at every step (zeros at padded steps), and
            the final state of every layer.

        Shapes:
            - src: (batch, num_steps)
            - valid_lens: (batch,)
            - outputs: (batch, num_steps, num_hiddens)
            - state: (num_layers, batch, num_hiddens), a pair of those for an LSTM

        Raises:
            ValueError: If `src` is not 2-D or `valid_lens` has the wrong shape or values.
        """
        _check_tokens("src", src)
        _check_valid_lens(valid_lens, src, "valid_lens")
        embs = self.embedding(src)  # (batch, num_steps, embed_size)
        if valid_lens is None:
            return self.rnn(embs)
        packed = nn.utils.rnn.pack_padded_sequence(
            embs, valid_lens.cpu(), batch_first=True, enforce_sorted=False
        )
        outputs, state = self.rnn(packed)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(
            outputs, batch_first=True, total_length=src.shape[1]
        )  # (batch, num_steps, num_hiddens)
        return outputs, state


# --8<-- [end:Seq2SeqEncoder]


# --8<-- [start:Seq2SeqDecoder]
class Seq2SeqDecoder(nn.Module):
    """A recurrent decoder that sees the source through one fixed-length context vector.

    The context is the encoder's final hidden state (top layer); it is concatenated to the
    embedding of every input token, and the decoder starts from the encoder's final state.

    Args:
        vocab_size: Size of the target vocabulary.
        embed_size: Size of the token embeddings.
        num_hiddens: Size of the recurrent hidden state (the encoder's too).
        num_layers: Number of stacked recurrent layers.
        dropout: Dropout between recurrent layers.
        rnn: "gru" or "lstm".
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
        rnn: str = "gru",
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _make_rnn(rnn, embed_size + num_hiddens, num_hiddens, num_layers, dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)

    def init_state(
        self,
        enc_outputs: tuple[torch.Tensor, RNNState],
        enc_valid_lens: torch.Tensor | None = None,
    ) -> tuple[RNNState, torch.Tensor]:
        """Start from the encoder's final state; keep its top layer as the context vector.

        Args:
            enc_outputs: What `Seq2SeqEncoder` returned: (outputs, final state).
            enc_valid_lens: Unused (the fixed context has no padding to mask).

        Returns:
            The decoder state: (recurrent state, context vector).

        Shapes:
            - context: (batch, num_hiddens)
        """
        _, enc_state = enc_outputs
        return enc_state, _top_hidden(enc_state)

    def forward(
        self, tgt: torch.Tensor, state: tuple[RNNState, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[RNNState, torch.Tensor]]:
        """Run the decoder over target tokens (teacher forcing, or one step at a time).

        Args:
            tgt: Decoder input tokens (the target shifted right, starting with <bos>).
            state: The state from `init_state` or from the previous call.

        Returns:
            Logits over the target vocabulary at every step, and the new state.

        Shapes:
            - tgt: (batch, num_steps)
            - logits: (batch, num_steps, vocab_size)
        """
        _check_tokens("tgt", tgt)
        rnn_state, context = state
        embs = self.embedding(tgt)  # (batch, num_steps, embed_size)
        context = context[:, None, :].expand(-1, tgt.shape[1], -1)
        outputs, rnn_state = self.rnn(torch.cat([embs, context], dim=-1), rnn_state)
        return self.dense(outputs), (rnn_state, state[1])

    def reorder_state(
        self, state: tuple[RNNState, torch.Tensor], index: torch.Tensor
    ) -> tuple[RNNState, torch.Tensor]:
        """Pick (and repeat) batch entries of a state, as beam search needs."""
        rnn_state, context = state
        return _select_rnn_state(rnn_state, index), context.index_select(0, index)


# --8<-- [end:Seq2SeqDecoder]


# --8<-- [start:Seq2SeqAttentionDecoder]
def _additive_attention_step(
    attention: AdditiveAttention,
    query: torch.Tensor,
    projected_keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
) -> torch.Tensor:
    """`attention(query, keys, values, valid_lens)` given keys already projected by W_k.

    Bahdanau et al. (2015, appendix A.1.2) note that W_k h_t is the same at every decoder
    step, so it is computed once per sentence; this saves most of the decoder's work.

    Shapes:
        - query: (batch, 1, query_size)
        - projected_keys: (batch, num_keys, num_hiddens)
        - values: (batch, num_keys, value_dim)
        - returns: (batch, 1, value_dim)
    """
    # (batch, 1, 1, num_hiddens) + (batch, 1, num_keys, num_hiddens)
    features = torch.tanh(attention.W_q(query).unsqueeze(2) + projected_keys.unsqueeze(1))
    scores = attention.w_v(features).squeeze(-1)  # (batch, 1, num_keys)
    attention.attention_weights = masked_softmax(scores, valid_lens)
    return torch.bmm(attention.dropout(attention.attention_weights), values)


class Seq2SeqAttentionDecoder(nn.Module):
    """A recurrent decoder with Bahdanau (additive) attention over the encoder states.

    At step t' the query is the decoder's previous hidden state s_{t'-1} (top layer); the
    keys and values are the encoder's hidden states h_1..h_T. The context vector
    c_{t'} = sum_t alpha(s_{t'-1}, h_t) h_t is concatenated to the embedded input token.
    The weights of every step are kept in `attention_weights`.

    Args:
        vocab_size: Size of the target vocabulary.
        embed_size: Size of the token embeddings.
        num_hiddens: Size of the recurrent hidden state (the encoder's too).
        num_layers: Number of stacked recurrent layers.
        dropout: Dropout between recurrent layers and on the attention weights.
        rnn: "gru" or "lstm".
        attention: The attention module to use, called as (queries, keys, values,
            valid_lens) and keeping `attention_weights`; additive attention when None.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float = 0.0,
        rnn: str = "gru",
        attention: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if attention is None:
            attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.attention = attention
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = _make_rnn(rnn, embed_size + num_hiddens, num_hiddens, num_layers, dropout)
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.attention_weights: torch.Tensor | None = None

    def init_state(
        self,
        enc_outputs: tuple[torch.Tensor, RNNState],
        enc_valid_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, RNNState, torch.Tensor | None]:
        """Keep every encoder hidden state (keys and values) and start from the final state.

        Args:
            enc_outputs: What `Seq2SeqEncoder` returned: (outputs, final state).
            enc_valid_lens: Number of real source tokens, so padding gets no attention.

        Returns:
            The decoder state: (encoder outputs, recurrent state, valid lengths).

        Shapes:
            - encoder outputs: (batch, num_src_steps, num_hiddens)
            - enc_valid_lens: (batch,)
        """
        outputs, enc_state = enc_outputs
        return outputs, enc_state, enc_valid_lens

    def forward(
        self, tgt: torch.Tensor, state: tuple[torch.Tensor, RNNState, torch.Tensor | None]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, RNNState, torch.Tensor | None]]:
        """Run the decoder step by step, attending over the source at every step.

        Args:
            tgt: Decoder input tokens (the target shifted right, starting with <bos>).
            state: The state from `init_state` or from the previous call.

        Returns:
            Logits over the target vocabulary at every step, and the new state.

        Shapes:
            - tgt: (batch, num_steps)
            - logits: (batch, num_steps, vocab_size)
            - self.attention_weights: (batch, num_steps, num_src_steps)
        """
        _check_tokens("tgt", tgt)
        enc_outputs, rnn_state, enc_valid_lens = state
        embs = self.embedding(tgt)  # (batch, num_steps, embed_size)
        additive = isinstance(self.attention, AdditiveAttention)
        if additive:  # the keys' projection does not change from step to step: do it once
            projected_keys = self.attention.W_k(enc_outputs)  # (batch, num_src_steps, num_hiddens)
        outputs, weights = [], []
        for t in range(tgt.shape[1]):
            query = _top_hidden(rnn_state)[:, None, :]  # (batch, 1, num_hiddens)
            if additive:
                context = _additive_attention_step(
                    self.attention, query, projected_keys, enc_outputs, enc_valid_lens
                )
            else:
                context = self.attention(query, enc_outputs, enc_outputs, enc_valid_lens)
            step_input = torch.cat([embs[:, t : t + 1], context], dim=-1)
            output, rnn_state = self.rnn(step_input, rnn_state)  # (batch, 1, num_hiddens)
            outputs.append(output)
            weights.append(self.attention.attention_weights)  # (batch, 1, num_src_steps)
        self.attention_weights = torch.cat(weights, dim=1)  # (batch, num_steps, num_src_steps)
        logits = self.dense(torch.cat(outputs, dim=1))  # (batch, num_steps, vocab_size)
        return logits, (enc_outputs, rnn_state, enc_valid_lens)

    def reorder_state(
        self, state: tuple[torch.Tensor, RNNState, torch.Tensor | None], index: torch.Tensor
    ) -> tuple[torch.Tensor, RNNState, torch.Tensor | None]:
        """Pick (and repeat) batch entries of a state, as beam search needs."""
        enc_outputs, rnn_state, enc_valid_lens = state
        if enc_valid_lens is not None:
            enc_valid_lens = enc_valid_lens.index_select(0, index)
        return (
            enc_outputs.index_select(0, index),
            _select_rnn_state(rnn_state, index),
            enc_valid_lens,
        )


# --8<-- [end:Seq2SeqAttentionDecoder]


# --8<-- [start:EncoderDecoder]
class EncoderDecoder(nn.Module):
    """An encoder and a decoder trained together.

    Args:
        encoder: Maps (src, src_valid_lens) to (outputs, state).
        decoder: Has `init_state(enc_outputs, src_valid_lens)` and is called as
            (tgt, state) -> (logits, state).
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_valid_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode the source, then decode the target with teacher forcing.

        Args:
            src: Source token indices.
            tgt: Decoder input tokens (the target shifted right, starting with <bos>).
            src_valid_lens: Number of real tokens of each source sentence.

        Returns:
            Logits over the target vocabulary at every target step.

        Shapes:
            - src: (batch, num_src_steps)
            - tgt: (batch, num_tgt_steps)
            - src_valid_lens: (batch,)
            - logits: (batch, num_tgt_steps, tgt_vocab_size)

        Raises:
            ValueError: If `src` and `tgt` disagree on the batch size.
        """
        _check_tokens("src", src)
        _check_tokens("tgt", tgt)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"src and tgt must have the same batch size, got src {tuple(src.shape)} "
                f"and tgt {tuple(tgt.shape)}"
            )
        enc_outputs = self.encoder(src, src_valid_lens)
        state = self.decoder.init_state(enc_outputs, src_valid_lens)
        logits, _ = self.decoder(tgt, state)
        return logits


# --8<-- [end:EncoderDecoder]


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


def num_parameters(model: nn.Module) -> int:
    """Count the trainable parameters of a model.

    Args:
        model: Any module.

    Returns:
        The number of trainable scalars.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


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
    model: EncoderDecoder, src: torch.Tensor, src_valid_lens: torch.Tensor | None
) -> tuple[Any, torch.Tensor]:
    _check_tokens("src", src)
    if src_valid_lens is None:
        src_valid_lens = torch.full((src.shape[0],), src.shape[1], dtype=torch.long)
    _check_valid_lens(src_valid_lens, src, "src_valid_lens")
    src_valid_lens = src_valid_lens.to(src.device)
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    return state, src_valid_lens


def _check_max_len(max_len: int) -> None:
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


# --8<-- [start:greedy_decode]
@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder,
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
    model: EncoderDecoder,
    src: torch.Tensor,
    src_valid_lens: torch.Tensor | None,
    bos_index: int,
    eos_index: int,
    max_len: int,
    beam_size: int,
    length_penalty: float = 0.0,
) -> list[Translation]:
    """Translate a batch with beam search, one sentence at a time.

    At every step each of the `beam_size` best partial translations is extended by every
    token, and the `beam_size` best extensions survive. An extension ending in <eos> is
    finished and leaves the beam. Hypotheses are ranked by their summed log-probability
    divided by length**length_penalty (0 ranks by log-probability alone, which makes
    beam_size=1 exactly greedy decoding).

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
            _beam_search_one(model, state, bos_index, eos_index, max_len, beam_size, length_penalty)
        )
    model.train(was_training)
    return results


def _rank(score: float, length: int, length_penalty: float) -> float:
    return score / max(length, 1) ** length_penalty


def _beam_search_one(model, state, bos_index, eos_index, max_len, beam_size, length_penalty):
    device = next(model.parameters()).device
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
