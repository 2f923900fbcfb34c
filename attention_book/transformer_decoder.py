"""The Transformer decoder, with a key/value cache for decoding one token at a time.

A decoder block runs masked (causal) self-attention over the target, attention over the
encoder's outputs (encoder-decoder attention), and a position-wise FFN, each in an `AddNorm`.
The same weights serve training, where the whole shifted target goes in at once, and
decoding, where one token goes in per call.

Decoding keeps a key/value cache in a `DecoderState`: each block stores the projected keys and
values of every position its self-attention has seen so far (and the projected encoder outputs
of its encoder-decoder attention), so a new token costs one position's work in every block:
its own projections, one row of attention, one FFN row. `project_heads` and
`attend_projected` are the two halves of a `MultiHeadAttention` call that the cache sits
between. ``use_cache=False`` turns the cache off (every call recomputes the whole prefix), the
baseline the chapter measures it by.

With the same weights, each block computes exactly what ``torch.nn.TransformerDecoderLayer``
computes; the tests check it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attention_book.masking import causal_mask
from attention_book.multihead import MultiHeadAttention, merge_heads, split_heads
from attention_book.positional import PositionalEncoding
from attention_book.transformer_sublayers import AddNorm, PositionWiseFFN, token_embedding
from attention_book.validation import check_hidden_states, check_tokens

__all__ = [
    "DecoderState",
    "TransformerDecoder",
    "TransformerDecoderBlock",
    "attend_projected",
    "project_heads",
]


# --8<-- [start:DecoderState]
@dataclass
class DecoderState:
    """What the Transformer decoder carries from one call to the next: the key/value cache.

    Made by `TransformerDecoder.init_state`; every decoder call appends the projected keys and
    values of the positions it decoded, so the next call only needs the new tokens.

    Attributes:
        enc_outputs: The encoder's outputs.
        enc_valid_lens: Number of real source tokens per sequence, or ``None``.
        keys: One entry per decoder block: its self-attention's keys ``W_k h`` of every
            position so far, already split into heads, or ``None`` before the first call.
        values: The same for the values ``W_v h``.
        cross_keys: One entry per block: the encoder outputs projected by the block's
            encoder-decoder attention (``W_k``), computed at the first call and then reused.
        cross_values: The same for ``W_v``.
        tokens: Only without the cache (``use_cache=False``): every token given so far.

    Shapes:
        - enc_outputs: ``(batch, num_source_steps, num_hiddens)``
        - enc_valid_lens: ``(batch,)``
        - keys[i], values[i]: ``(batch, num_heads, num_decoded_steps, head_dim)``
        - cross_keys[i], cross_values[i]: ``(batch, num_heads, num_source_steps, head_dim)``
        - tokens: ``(batch, num_decoded_steps)``
    """

    enc_outputs: Tensor
    enc_valid_lens: Tensor | None
    keys: list[Tensor | None]
    values: list[Tensor | None]
    cross_keys: list[Tensor | None]
    cross_values: list[Tensor | None]
    tokens: Tensor | None = None

    @classmethod
    def empty(
        cls, enc_outputs: Tensor, enc_valid_lens: Tensor | None, num_blks: int
    ) -> DecoderState:
        """A state with nothing decoded yet, for a decoder of ``num_blks`` blocks.

        Args:
            enc_outputs: The encoder's outputs.
            enc_valid_lens: Number of real source tokens per sequence, or ``None``.
            num_blks: Number of decoder blocks (entries of each cache list).

        Returns:
            The new state.
        """
        return cls(enc_outputs, enc_valid_lens, *([None] * num_blks for _ in range(4)))

    @property
    def num_decoded_steps(self) -> int:
        """Number of target positions decoded so far."""
        if self.tokens is not None:
            return self.tokens.shape[1]
        cached = self.keys[0] if self.keys else None
        return 0 if cached is None else cached.shape[2]

    def select(self, indices: Tensor) -> DecoderState:
        """Return a new state with the batch rows ``indices`` (used by beam search).

        Args:
            indices: Integer batch indices to keep, in order; a row may repeat.

        Returns:
            The selected state; the cached tensors are new, so it can grow independently.
        """

        def pick(tensor: Tensor | None) -> Tensor | None:
            return None if tensor is None else tensor.index_select(0, indices)

        return DecoderState(
            pick(self.enc_outputs),
            pick(self.enc_valid_lens),
            [pick(cached) for cached in self.keys],
            [pick(cached) for cached in self.values],
            [pick(cached) for cached in self.cross_keys],
            [pick(cached) for cached in self.cross_values],
            pick(self.tokens),
        )


# --8<-- [end:DecoderState]


# --8<-- [start:attend_projected]
def project_heads(layer: nn.Linear, X: Tensor, num_heads: int) -> Tensor:
    """Project ``X`` with one of an attention's input layers and split it into heads.

    Args:
        layer: ``W_k`` or ``W_v`` (or ``W_q``) of a `MultiHeadAttention`.
        X: The vectors to project.
        num_heads: The attention's number of heads.

    Returns:
        The projected vectors, one ``head_dim`` slice per head.

    Shapes:
        - X: ``(batch, n, num_hiddens)``
        - returns: ``(batch, num_heads, n, head_dim)``
    """
    return split_heads(layer(X), num_heads)


def attend_projected(
    attention: MultiHeadAttention,
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    valid_lens: Tensor | None = None,
    attn_mask: Tensor | None = None,
) -> Tensor:
    """Run a `MultiHeadAttention` on keys and values that are already projected (cached).

    It computes ``attention(queries, K, V, ...)`` where ``keys = project_heads(W_k, K)`` and
    ``values = project_heads(W_v, V)``: only the queries are projected here.

    Args:
        attention: The multi-head attention whose ``W_q``, ``W_o`` and attention are used.
        queries: Query vectors, not yet projected.
        keys: Keys projected by ``attention.W_k`` and split into heads.
        values: Values projected by ``attention.W_v`` and split into heads.
        valid_lens: Optional number of valid keys per sequence.
        attn_mask: Optional boolean mask, ``True`` = may attend.

    Returns:
        The attention output.

    Shapes:
        - queries: ``(batch, num_queries, num_hiddens)``
        - keys, values: ``(batch, num_heads, num_keys, head_dim)``
        - attn_mask: broadcastable to ``(batch, num_heads, num_queries, num_keys)``
        - returns: ``(batch, num_queries, num_hiddens)``
    """
    Q = project_heads(attention.W_q, queries, attention.num_heads)  # (batch, h, n_q, head_dim)
    output = attention.attention(Q, keys, values, valid_lens, attn_mask)  # (batch, h, n_q, d_h)
    return attention.W_o(merge_heads(output))  # (batch, num_queries, num_hiddens)


# --8<-- [end:attend_projected]


# --8<-- [start:TransformerDecoderBlock]
class TransformerDecoderBlock(nn.Module):
    """One decoder block: masked self-attention, encoder-decoder attention, then an FFN.

    The self-attention is causal: a position attends to itself and to earlier positions only.
    Its keys and values are every position decoded so far: the block projects only the new
    positions and appends them to ``state.keys[block_index]`` and
    ``state.values[block_index]`` (the key/value cache), so it works the same whether it gets
    the whole target sequence at once (training) or one new token per call (decoding). The
    encoder-decoder attention uses the block's position vectors as queries and the encoder's
    outputs as keys and values (projected at the first call, kept in ``state.cross_keys`` and
    ``state.cross_values``), ignoring source padding past ``state.enc_valid_lens``.

    With the same weights and ``use_bias=True`` it computes what
    ``nn.TransformerDecoderLayer(batch_first=True, norm_first=norm_first)`` computes with a
    causal ``tgt_mask`` and a ``memory_key_padding_mask`` made from the valid lengths.

    Args:
        num_hiddens: Model width.
        ffn_num_hiddens: Hidden width of the FFN.
        num_heads: Number of attention heads.
        dropout: Dropout on attention weights, inside the FFN and on each sublayer's output.
        block_index: This block's index in the decoder: its slot in the state's caches.
        use_bias: Whether the attention projections have biases.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.
        activation: FFN activation, ``"relu"`` or ``"gelu"``.

    Shapes:
        - X: ``(batch, num_new_steps, num_hiddens)``
        - returns: ``(batch, num_new_steps, num_hiddens)`` and the updated state
    """

    def __init__(
        self,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        dropout: float,
        block_index: int,
        *,
        use_bias: bool = False,
        norm_first: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.block_index = block_index
        self.num_hiddens = num_hiddens
        self.self_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first=norm_first)
        self.cross_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first=norm_first)
        self.ffn = PositionWiseFFN(
            num_hiddens, ffn_num_hiddens, num_hiddens, activation=activation, dropout=dropout
        )
        self.addnorm3 = AddNorm(num_hiddens, dropout, norm_first=norm_first)

    # --8<-- [end:TransformerDecoderBlock]

    # --8<-- [start:TransformerDecoderBlock-forward]
    def forward(self, X: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Run the block on the new target positions ``X``, which follow the cached ones.

        Args:
            X: Vectors of the positions to decode now, which follow the cached ones.
            state: The decoder state; its caches of slot ``self.block_index`` are extended by
                this call.

        Returns:
            The output vectors of the new positions, and the same (updated) state.

        Raises:
            ValueError: If ``X`` does not have shape (batch, num_new_steps, num_hiddens).
        """
        check_hidden_states("X", X, self.num_hiddens)  # X: (batch, num_new_steps, num_hiddens)
        H = self.addnorm1.sublayer_input(X)  # X in post-norm, LayerNorm(X) in pre-norm
        X = self.addnorm1(X, self.masked_self_attention(H, state))  # sees earlier positions
        H = self.addnorm2.sublayer_input(X)
        X = self.addnorm2(X, self.encoder_decoder_attention(H, state))  # sees the source
        H = self.addnorm3.sublayer_input(X)
        return self.addnorm3(X, self.ffn(H)), state  # (batch, num_new_steps, num_hiddens)

    # --8<-- [end:TransformerDecoderBlock-forward]

    # --8<-- [start:masked_self_attention]
    def masked_self_attention(self, H: Tensor, state: DecoderState) -> Tensor:
        """Causal self-attention of the new positions over all positions so far, cached.

        Args:
            H: What the sublayer reads at the new positions (`AddNorm.sublayer_input`).
            state: The decoder state; ``keys[block_index]`` and ``values[block_index]`` grow
                by the new positions.

        Returns:
            The attention output at the new positions.

        Shapes:
            - H: ``(batch, num_new_steps, num_hiddens)``
            - returns: ``(batch, num_new_steps, num_hiddens)``
        """
        i, num_heads = self.block_index, self.self_attention.num_heads
        K = project_heads(self.self_attention.W_k, H, num_heads)  # (batch, h, new, head_dim)
        V = project_heads(self.self_attention.W_v, H, num_heads)  # (batch, h, new, head_dim)
        if state.keys[i] is not None:  # the cache: earlier positions' keys and values
            K = torch.cat((state.keys[i], K), dim=2)  # (batch, h, num_decoded_steps, head_dim)
            V = torch.cat((state.values[i], V), dim=2)
        state.keys[i], state.values[i] = K, V
        # New query t is position num_cached + t: it may see keys 0 .. num_cached + t.
        mask = causal_mask(H.shape[1], K.shape[2], device=H.device, alignment="bottom-right")
        return attend_projected(self.self_attention, H, K, V, attn_mask=mask)

    # --8<-- [end:masked_self_attention]

    # --8<-- [start:encoder_decoder_attention]
    def encoder_decoder_attention(self, H: Tensor, state: DecoderState) -> Tensor:
        """Attention of the new positions over the encoder's outputs, projected once.

        Args:
            H: What the sublayer reads at the new positions (`AddNorm.sublayer_input`).
            state: The decoder state; its ``cross_keys[block_index]`` and
                ``cross_values[block_index]`` are filled at the first call.

        Returns:
            The attention output at the new positions; source padding gets no weight.

        Shapes:
            - H: ``(batch, num_new_steps, num_hiddens)``
            - returns: ``(batch, num_new_steps, num_hiddens)``
        """
        i, attention, source = self.block_index, self.cross_attention, state.enc_outputs
        if state.cross_keys[i] is None:  # the first call projects the source, once
            state.cross_keys[i] = project_heads(attention.W_k, source, attention.num_heads)
            state.cross_values[i] = project_heads(attention.W_v, source, attention.num_heads)
        K, V = state.cross_keys[i], state.cross_values[i]  # (batch, h, source, head_dim)
        return attend_projected(attention, H, K, V, state.enc_valid_lens)

    # --8<-- [end:encoder_decoder_attention]


# --8<-- [start:TransformerDecoder]
class TransformerDecoder(nn.Module):
    """The Transformer decoder: embedding, positional encoding, blocks and an output layer.

    Give it the whole (shifted) target sequence to train; give it one token per call to decode
    step by step. Both give the same outputs, because each call continues from the positions
    cached in the state: the positional encoding starts at the first new position, and the
    causal self-attention sees every cached position.

    With ``use_cache=False`` (an attribute too, so it can be switched on a trained model) the
    state keeps the tokens instead of keys and values, and every call runs the whole prefix
    through every block again, returning the logits of the new positions only: the same
    outputs, at the cost a decoder without a cache pays.

    After each call ``self_attention_weights[i]`` and ``cross_attention_weights[i]`` hold block
    ``i``'s weights for the positions of that call; ``attention_weights`` is the last block's
    cross-attention averaged over heads (what the decoding functions of
    `attention_book.seq2seq` record), and `reorder_state` serves their beam search.

    Args:
        vocab_size: Number of tokens in the target vocabulary.
        num_hiddens: Model width.
        ffn_num_hiddens: Hidden width of each FFN.
        num_heads: Number of attention heads.
        num_blks: Number of decoder blocks.
        dropout: Dropout rate used throughout.
        use_bias: Whether the attention projections have biases.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.
        activation: FFN activation, ``"relu"`` or ``"gelu"``.
        max_len: Longest target sequence the positional encoding covers.
        use_cache: Keep projected keys and values between calls (``True``) or recompute the
            whole prefix at every call (``False``).
        embedding: An embedding table to use instead of a new one, for example the encoder's
            (with one vocabulary for both languages); it must be ``(vocab_size, num_hiddens)``.
        tie_embeddings: Make the output layer's weight the embedding table itself, one
            parameter for both (Vaswani et al., 2017, section 3.4; Press and Wolf, 2017). The
            lookup is still multiplied by ``sqrt(num_hiddens)``; the output layer is not.

    Raises:
        ValueError: If ``embedding`` is not a ``(vocab_size, num_hiddens)`` table.

    Shapes:
        - X: ``(batch, num_new_steps)`` token indices
        - returns: logits ``(batch, num_new_steps, vocab_size)`` and the updated state
        - self_attention_weights[i]: ``(batch, num_heads, num_new_steps, num_decoded_steps)``
        - cross_attention_weights[i]: ``(batch, num_heads, num_new_steps, num_source_steps)``
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        ffn_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        dropout: float,
        *,
        use_bias: bool = False,
        norm_first: bool = False,
        activation: str = "relu",
        max_len: int = 1000,
        use_cache: bool = True,
        embedding: nn.Embedding | None = None,
        tie_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.num_hiddens = num_hiddens
        self.num_blks = num_blks
        self.use_cache = use_cache
        if embedding is None:
            embedding = token_embedding(vocab_size, num_hiddens)
        elif tuple(embedding.weight.shape) != (vocab_size, num_hiddens):
            raise ValueError(
                f"embedding must have shape (vocab_size, num_hiddens) = ({vocab_size}, "
                f"{num_hiddens}), got {tuple(embedding.weight.shape)}"
            )
        self.embedding = embedding
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.blks = nn.ModuleList(
            TransformerDecoderBlock(
                num_hiddens,
                ffn_num_hiddens,
                num_heads,
                dropout,
                i,
                use_bias=use_bias,
                norm_first=norm_first,
                activation=activation,
            )
            for i in range(num_blks)
        )
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else nn.Identity()
        self.dense = nn.Linear(num_hiddens, vocab_size)
        if tie_embeddings:  # one Parameter of (vocab_size, num_hiddens) for both uses
            self.dense.weight = self.embedding.weight
        self.self_attention_weights: list[Tensor | None] = [None] * num_blks
        self.cross_attention_weights: list[Tensor | None] = [None] * num_blks

    def init_state(self, enc_outputs: Tensor, enc_valid_lens: Tensor | None = None) -> DecoderState:
        """Start decoding a batch: remember the encoder's outputs, with an empty cache.

        Args:
            enc_outputs: The encoder's outputs.
            enc_valid_lens: Number of real source tokens per sequence, or ``None``.

        Returns:
            A fresh `DecoderState`.

        Raises:
            ValueError: If ``enc_outputs`` does not have shape
                (batch, num_source_steps, num_hiddens).
        """
        check_hidden_states("enc_outputs", enc_outputs, self.num_hiddens)
        return DecoderState.empty(enc_outputs, enc_valid_lens, self.num_blks)

    def forward(self, X: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        """Decode the next ``num_new_steps`` target tokens.

        Args:
            X: Target token indices at the positions that follow the cached ones (the whole
                shifted target in training, the last emitted token when decoding).
            state: From `init_state` or the previous call; updated in place.

        Returns:
            Logits over the target vocabulary for each new position, and the updated state.

        Raises:
            ValueError: If ``X`` is not a 2-D integer tensor, or the sequence grows past
                ``max_len``.
        """
        check_tokens("X", X)
        if not self.use_cache:  # no cache: run the whole prefix again, keep the new rows
            num_new_steps = X.shape[1]
            state.tokens = X if state.tokens is None else torch.cat((state.tokens, X), dim=1)
            fresh = DecoderState.empty(state.enc_outputs, state.enc_valid_lens, self.num_blks)
            logits = self._decode(state.tokens, fresh)
            first_new = state.tokens.shape[1] - num_new_steps  # not -num_new_steps: it may be 0
            for weights in (self.self_attention_weights, self.cross_attention_weights):
                weights[:] = [None if w is None else w[..., first_new:, :] for w in weights]
            return logits[:, first_new:], state
        return self._decode(X, state), state

    # --8<-- [start:TransformerDecoder-decode]
    def _decode(self, X: Tensor, state: DecoderState) -> Tensor:
        """Logits of the tokens ``X``, which follow the positions cached in ``state``."""
        offset = state.num_decoded_steps  # positions already in the cache
        X = self.embedding(X) * math.sqrt(self.num_hiddens)  # (batch, new, num_hiddens)
        X = self.pos_encoding(X, offset=offset)  # positions offset, offset + 1, ...
        for i, blk in enumerate(self.blks):
            X, state = blk(X, state)
            self.self_attention_weights[i] = blk.self_attention.attention_weights
            self.cross_attention_weights[i] = blk.cross_attention.attention_weights
        return self.dense(self.final_norm(X))  # (batch, new, vocab_size)

    # --8<-- [end:TransformerDecoder-decode]

    def reorder_state(self, state: DecoderState, indices: Tensor) -> DecoderState:
        """Keep (and repeat) the batch rows ``indices`` of a state, as beam search needs.

        Args:
            state: A decoder state.
            indices: Integer batch indices to keep, in order.

        Returns:
            The selected state (see `DecoderState.select`).
        """
        return state.select(indices)

    @property
    def attention_weights(self) -> Tensor | None:
        """The last block's encoder-decoder attention weights of the last call, mean over heads.

        This is the one weight matrix per sentence that decoding functions such as
        `attention_book.decoding.greedy_decode` record (how much each new target
        position looks at each source token). Every block and head is in
        ``cross_attention_weights``; ``None`` before the first call.

        Shapes:
            - returns: ``(batch, num_new_steps, num_source_steps)``
        """
        weights = self.cross_attention_weights[-1] if self.num_blks else None
        return None if weights is None else weights.mean(dim=1)


# --8<-- [end:TransformerDecoder]
