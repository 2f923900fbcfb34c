"""Sequence to sequence learning with recurrent networks, with and without attention.

An encoder reads the source sentence into one hidden state per token. A decoder writes the
target sentence one token at a time. The plain decoder sees the source only through a single
fixed-length context vector (the encoder's final hidden state); the Bahdanau decoder looks
back at every encoder hidden state at every step, with additive attention whose query is
the decoder's previous hidden state (Bahdanau, Cho and Bengio, 2015).

The losses of a translator (the masked cross-entropy that ignores padding, its label-smoothed
variant, and `translation_loss`, the loss function `fit` calls on a batch) live in
`attention_book.losses`, and greedy decoding and beam search in `attention_book.decoding`:
they serve the Transformer too, and are imported from there.
"""

from __future__ import annotations

import torch
from torch import nn

from attention_book.attention import AdditiveAttention
from attention_book.validation import check_sequence_lengths, check_tokens

__all__ = ["EncoderDecoder", "Seq2SeqAttentionDecoder", "Seq2SeqDecoder", "Seq2SeqEncoder"]

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
        *,
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
        check_tokens("src", src)
        check_sequence_lengths("valid_lens", valid_lens, src)
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
        *,
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
        check_tokens("tgt", tgt)
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
        *,
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

    def _project_keys(self, enc_outputs: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The keys that every step scores: for additive attention, W_k h_t, projected once.

        W_k h_t is the same at every decoder step, so additive attention projects the keys
        once per call (Bahdanau et al., 2015, appendix A.1.2): most of the work it saves.
        Any other attention module gets the encoder outputs as they are.

        Args:
            enc_outputs: The encoder's hidden states h_1..h_T.

        Returns:
            (keys, the options of the attention call that go with them).

        Shapes:
            - enc_outputs: (batch, num_src_steps, num_hiddens)
            - keys: (batch, num_src_steps, num_hiddens)
        """
        if isinstance(self.attention, AdditiveAttention):
            return self.attention.project_keys(enc_outputs), {"keys_projected": True}
        return enc_outputs, {}

    # --8<-- [end:Seq2SeqAttentionDecoder]
    # --8<-- [start:Seq2SeqAttentionDecoder-forward]
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
        check_tokens("tgt", tgt)
        # the encoder outputs h_1..h_T: (batch, num_src_steps, num_hiddens)
        enc_outputs, rnn_state, enc_valid_lens = state
        embs = self.embedding(tgt)  # (batch, num_steps, embed_size)
        keys, options = self._project_keys(enc_outputs)  # W_k h_t, once for all the steps
        outputs, weights = [], []
        for t in range(tgt.shape[1]):
            query = _top_hidden(rnn_state)[:, None, :]  # s_{t'-1}: (batch, 1, num_hiddens)
            # the context vector c_t': (batch, 1, num_hiddens)
            context = self.attention(query, keys, enc_outputs, enc_valid_lens, **options)
            # (batch, 1, embed_size + num_hiddens)
            step_input = torch.cat([embs[:, t : t + 1], context], dim=-1)
            output, rnn_state = self.rnn(step_input, rnn_state)  # s_t': (batch, 1, num_hiddens)
            outputs.append(output)
            weights.append(self.attention.attention_weights)  # (batch, 1, num_src_steps)
        self.attention_weights = torch.cat(weights, dim=1)  # (batch, num_steps, num_src_steps)
        logits = self.dense(torch.cat(outputs, dim=1))  # (batch, num_steps, vocab_size)
        return logits, (enc_outputs, rnn_state, enc_valid_lens)

    # --8<-- [end:Seq2SeqAttentionDecoder-forward]
    # --8<-- [start:Seq2SeqAttentionDecoder-reorder]
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

    # --8<-- [end:Seq2SeqAttentionDecoder-reorder]


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
        check_tokens("src", src)
        check_tokens("tgt", tgt)
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
