"""A small decoder-only Transformer (GPT) with a key/value cache.

A GPT is the Transformer's decoder without cross-attention: token embeddings, a stack of
pre-norm blocks of causal self-attention and a feed-forward network, a final layer norm and a
linear layer to next-token logits (Radford et al., 2018, 2019). The blocks here put the layer
norm before each sublayer (pre-norm, as GPT-2 does), which trains stably without warm-up.

Generation runs the model once per new token. Without a cache each step runs the whole prefix
again; with `KVCache` each layer keeps the projected keys and values of the positions it has
seen, so a step runs only the new token and attends to the cached keys. Causal linear
attention needs no keys at all: its cache, `LinearAttentionCache`, holds the running sums of
the recurrent form, whose size does not grow with the sequence. Both caches are in
`attention_book.kv_cache`. The options of the chapter on
optimizations are keyword arguments: grouped-query attention (``num_kv_heads``), rotary,
sinusoidal, learned or ALiBi positions (``positional``), a causal sliding window (``window``)
and linear attention (``attention="linear"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_book.alibi import alibi_bias, alibi_slopes
from attention_book.kv_cache import KVCache, LinearAttentionCache
from attention_book.linear_attention import causal_linear_attention_step, linear_attention
from attention_book.masking import causal_mask, sliding_window_mask
from attention_book.multihead import GroupedQueryAttention, merge_heads
from attention_book.positional import LearnedPositionalEmbedding, PositionalEncoding
from attention_book.rotary import apply_rotary
from attention_book.validation import check_tokens

__all__ = ["GPT", "CausalSelfAttention", "GPTBlock"]

POSITIONALS = ("rope", "sinusoidal", "learned", "alibi", "none")
ATTENTIONS = ("softmax", "linear")


class CausalSelfAttention(nn.Module):
    """Causal self-attention with grouped-query heads, rotary or ALiBi positions and a cache.

    Args:
        num_hiddens: Width of the token representations.
        num_heads: Number of query heads.
        num_kv_heads: Number of key/value heads (``num_heads``: multi-head attention).
        dropout: Dropout on the attention weights.
        rotary: Whether to rotate queries and keys by their positions (RoPE).
        alibi: Whether to add ALiBi's linear distance bias to the scores (`alibi_bias`).
        window: If given, each position sees only itself and the ``window - 1`` before it.
        attention: ``"softmax"``, or ``"linear"`` for causal linear attention (elu + 1).

    Shapes:
        - X: ``(batch, n, num_hiddens)``
        - output: ``(batch, n, num_hiddens)``

    Raises:
        ValueError: If ``alibi`` is asked for with linear attention, or ``num_heads`` is not
            a power of two with ``alibi`` (see `alibi_slopes`).
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        num_kv_heads: int,
        dropout: float = 0.0,
        *,
        rotary: bool = True,
        alibi: bool = False,
        window: int | None = None,
        attention: str = "softmax",
    ):
        super().__init__()
        if alibi:
            if attention != "softmax":
                raise ValueError(f"alibi needs softmax attention, got attention={attention!r}")
            alibi_slopes(num_heads)  # a power of two, or a ValueError now rather than later
        self.heads = GroupedQueryAttention(
            num_hiddens, num_heads, num_kv_heads, dropout, need_weights=False
        )
        self.rotary, self.alibi, self.window, self.kind = rotary, alibi, window, attention

    # --8<-- [start:CausalSelfAttention-forward]
    def forward(
        self, X: Tensor, cache: KVCache | LinearAttentionCache | None = None, layer: int = 0
    ) -> Tensor:
        """Attend from each new position to itself and the positions before it.

        Args:
            X: Representations of the new positions.
            cache: Keys and values (or linear attention's sums) of earlier positions, updated
                in place; None: ``X`` is the whole sequence.
            layer: This layer's index in the cache.

        Returns:
            The attention output.
        """
        start = 0 if cache is None else cache.length
        queries, keys, values = self.heads.project(X, X, X)  # (batch, heads, n, head_dim)
        if self.rotary:  # rotate by the positions start, ..., start + n - 1
            positions = torch.arange(start, start + X.shape[1], device=X.device)
            queries, keys = apply_rotary(queries, positions), apply_rotary(keys, positions)
        if self.kind == "linear":  # no keys to cache: running sums (the linear deep dive)
            return self.heads.W_o(merge_heads(self.linear(queries, keys, values, cache, layer)))
        if cache is not None:
            keys, values = cache.update(layer, keys, values)  # (batch, h_kv, start + n, d)
        if self.window is not None or self.alibi:  # the deep dives on windows and positions
            return self.masked(queries, keys, values)
        if queries.shape[2] == keys.shape[2]:  # square: the fused kernel's causal mask
            return self.heads.attend(queries, keys, values, is_causal=True)
        # The queries are the last positions of the sequence: the mask aligned bottom-right.
        mask = causal_mask(queries.shape[2], keys.shape[2], X.device, alignment="bottom-right")
        return self.heads.attend(queries, keys, values, attn_mask=mask)

    # --8<-- [end:CausalSelfAttention-forward]
    # --8<-- [start:CausalSelfAttention-masked]
    def masked(self, queries: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """Attention under a sliding window, or with ALiBi's bias, of cached keys and values.

        Args:
            queries: Queries of the new positions, rotated if the model rotates.
            keys: Keys of every position so far (the cache's, if any).
            values: Their values.

        Returns:
            The attention output.
        """
        num_queries, num_keys = queries.shape[2], keys.shape[2]
        if self.window is not None:
            # Keys more than `window - 1` before the first query are never seen: drop them,
            # so a cached step costs O(window), not O(position).
            visible = min(num_keys, self.window + num_queries - 1)
            keys, values = keys[:, :, -visible:], values[:, :, -visible:]
            mask = sliding_window_mask(num_queries, visible, self.window, queries.device)
        else:
            mask = None  # ALiBi's bias holds the causal mask
        if self.alibi:
            return self.with_alibi(queries, keys, values, mask)
        return self.heads.attend(queries, keys, values, attn_mask=mask)

    # --8<-- [end:CausalSelfAttention-masked]
    # --8<-- [start:CausalSelfAttention-alibi]
    def with_alibi(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None
    ) -> Tensor:
        """Softmax attention with ALiBi's bias added to the scaled scores.

        Args:
            queries: Projected queries of the new positions (the last positions of the keys).
            keys: Projected keys of every visible position.
            values: Their values.
            mask: An optional boolean mask (the sliding window), ``True`` = may attend.

        Returns:
            The attention output, merged and projected.

        Shapes:
            - queries: ``(batch, num_heads, num_queries, head_dim)``
            - keys, values: ``(batch, num_kv_heads, num_keys, head_dim)``
            - mask: ``(num_queries, num_keys)``
            - returns: ``(batch, num_queries, num_hiddens)``
        """
        heads = self.heads
        group = heads.num_heads // heads.num_kv_heads
        keys = keys.repeat_interleave(group, dim=1)  # (batch, num_heads, num_keys, head_dim)
        values = values.repeat_interleave(group, dim=1)
        num_queries, num_keys = queries.shape[2], keys.shape[2]
        bias = alibi_bias(num_queries, num_keys, heads.num_heads, queries.device, queries.dtype)
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))  # (num_heads, num_queries, num_keys)
        dropout = heads.attention.dropout.p if self.training else 0.0
        output = F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=bias, dropout_p=dropout
        )  # (batch, num_heads, num_queries, head_dim)
        return heads.W_o(merge_heads(output))  # (batch, num_queries, num_hiddens)

    # --8<-- [end:CausalSelfAttention-alibi]
    # --8<-- [start:CausalSelfAttention-linear]
    def linear(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        cache: LinearAttentionCache | None,
        layer: int,
    ) -> Tensor:
        """Causal linear attention: all positions at once, or step by step from a cache.

        Args:
            queries: Projected queries of the new positions.
            keys: Their projected keys.
            values: Their projected values.
            cache: The running sums of earlier positions, or None.
            layer: This layer's index in the cache.

        Returns:
            The heads' outputs, before they are merged.

        Shapes:
            - queries: ``(batch, num_heads, n, head_dim)``
            - keys, values: ``(batch, num_kv_heads, n, head_dim)``
            - returns: ``(batch, num_heads, n, head_dim)``
        """
        group = self.heads.num_heads // self.heads.num_kv_heads
        keys = keys.repeat_interleave(group, dim=1)  # (batch, num_heads, n, head_dim)
        values = values.repeat_interleave(group, dim=1)
        if cache is None:
            return linear_attention(queries, keys, values, causal=True)
        if queries.shape[2] == 0:  # no new position: nothing to add to the sums
            return values  # (batch, num_heads, 0, head_dim)
        state, outputs = cache.read(layer), []
        for t in range(queries.shape[2]):  # the recurrent form, one position at a time
            output, state = causal_linear_attention_step(
                queries[:, :, t], keys[:, :, t], values[:, :, t], state
            )  # (batch, num_heads, head_dim)
            outputs.append(output)
        cache.write(layer, state)
        return torch.stack(outputs, dim=2)  # (batch, num_heads, n, head_dim)

    # --8<-- [end:CausalSelfAttention-linear]


class GPTBlock(nn.Module):
    """A pre-norm decoder block: ``X + attention(LN(X))``, then ``X + FFN(LN(X))``.

    Args:
        num_hiddens: Width of the token representations.
        num_heads: Number of query heads.
        num_kv_heads: Number of key/value heads.
        ffn_num_hiddens: Hidden size of the feed-forward network.
        dropout: Dropout on the attention weights and on each sublayer's output.
        rotary: Whether attention uses rotary positions.
        alibi: Whether attention adds ALiBi's distance bias.
        window: Optional sliding window of the attention.
        attention: ``"softmax"`` or ``"linear"``.

    Shapes:
        - X: ``(batch, n, num_hiddens)``
        - output: ``(batch, n, num_hiddens)``
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        num_kv_heads: int,
        ffn_num_hiddens: int,
        dropout: float = 0.0,
        *,
        rotary: bool = True,
        alibi: bool = False,
        window: int | None = None,
        attention: str = "softmax",
    ):
        super().__init__()
        self.ln1 = nn.LayerNorm(num_hiddens)
        self.attention = CausalSelfAttention(
            num_hiddens, num_heads, num_kv_heads, dropout,
            rotary=rotary, alibi=alibi, window=window, attention=attention,
        )  # fmt: skip
        self.ln2 = nn.LayerNorm(num_hiddens)
        self.ffn = nn.Sequential(
            nn.Linear(num_hiddens, ffn_num_hiddens),
            nn.GELU(),
            nn.Linear(ffn_num_hiddens, num_hiddens),
        )
        self.dropout = nn.Dropout(dropout)

    # --8<-- [start:GPTBlock-forward]
    def forward(
        self, X: Tensor, cache: KVCache | LinearAttentionCache | None = None, layer: int = 0
    ) -> Tensor:
        """Apply both sublayers with their residual connections.

        Args:
            X: Representations of the new positions.
            cache: Optional key/value cache (see `CausalSelfAttention`).
            layer: This block's index in the cache.

        Returns:
            The block's output.
        """
        X = X + self.dropout(self.attention(self.ln1(X), cache, layer))
        return X + self.dropout(self.ffn(self.ln2(X)))

    # --8<-- [end:GPTBlock-forward]


# --8<-- [start:GPT]
class GPT(nn.Module):
    """A decoder-only Transformer language model with greedy generation and a key/value cache.

    Args:
        vocab_size: Number of tokens.
        num_hiddens: Width of the token representations.
        num_heads: Number of query heads per layer.
        num_blks: Number of blocks (layers).
        ffn_num_hiddens: Hidden size of the feed-forward networks (default ``4 * num_hiddens``).
        num_kv_heads: Key/value heads per layer (default ``num_heads``; 1: multi-query).
        dropout: Dropout probability.
        max_len: Most positions of learned and sinusoidal positions, and of a default cache.
        positional: ``"rope"`` (rotary, the default), ``"sinusoidal"``, ``"learned"``,
            ``"alibi"`` (a distance bias on the scores, no position vectors) or ``"none"``.
        window: If given, every layer attends within a causal sliding window of this size.
        attention: ``"softmax"`` (the default) or ``"linear"`` (causal linear attention).

    Shapes:
        - tokens: ``(batch, n)``
        - output: ``(batch, n, vocab_size)``

    Raises:
        ValueError: For an unknown ``positional`` or ``attention``, a ``window`` below 1, a
            ``window`` or ALiBi with linear attention, ALiBi with a number of heads that is not
            a power of two, or head counts that do not divide (see `GroupedQueryAttention`).
    """

    def __init__(
        self,
        vocab_size: int,
        num_hiddens: int,
        num_heads: int,
        num_blks: int,
        *,
        ffn_num_hiddens: int | None = None,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        max_len: int = 1024,
        positional: str = "rope",
        window: int | None = None,
        attention: str = "softmax",
    ):
        super().__init__()
        if positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {POSITIONALS}, got {positional!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        if window is not None and (window < 1 or attention == "linear"):
            raise ValueError(
                f"window must be at least 1, and only with softmax attention, got window={window} "
                f"and attention={attention!r}"
            )
        if positional == "alibi" and attention == "linear":
            raise ValueError("positional='alibi' needs softmax attention, got attention='linear'")
        self.num_kv_heads = num_kv_heads or num_heads
        self.max_len, self.positional, self.kind = max_len, positional, attention
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.position: nn.Module | None = None  # rotary positions act inside attention
        if positional == "sinusoidal":
            self.position = PositionalEncoding(num_hiddens, 0.0, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(num_hiddens, 0.0, max_len)
        self.dropout = nn.Dropout(dropout)
        self.blks = nn.ModuleList(
            GPTBlock(
                num_hiddens,
                num_heads,
                self.num_kv_heads,
                ffn_num_hiddens or 4 * num_hiddens,
                dropout,
                rotary=positional == "rope",
                alibi=positional == "alibi",
                window=window,
                attention=attention,
            )
            for _ in range(num_blks)
        )
        self.ln_f = nn.LayerNorm(num_hiddens)
        self.head = nn.Linear(num_hiddens, vocab_size, bias=False)

    def forward(
        self, tokens: Tensor, cache: KVCache | LinearAttentionCache | None = None
    ) -> Tensor:
        """Next-token logits at every position of ``tokens``.

        Args:
            tokens: Token indices; with a cache, the positions that follow the cached ones.
            cache: Optional cache from `new_cache`, read and extended in place.

        Returns:
            The logits.

        Raises:
            ValueError: If ``tokens`` is not a 2-D integer tensor, or positions exceed
                ``max_len`` (learned or sinusoidal positions) or the cache.
        """
        check_tokens("tokens", tokens)
        start = 0 if cache is None else cache.length
        X = self.embedding(tokens)  # (batch, n, num_hiddens)
        if self.position is not None:
            X = self.position(X, offset=start)  # add the positions start, start + 1, ...
        X = self.dropout(X)
        for layer, blk in enumerate(self.blks):
            X = blk(X, cache, layer)
        if cache is not None:
            cache.advance(tokens.shape[1])
        return self.head(self.ln_f(X))  # (batch, n, vocab_size)

    def new_cache(
        self, batch_size: int, max_len: int | None = None
    ) -> KVCache | LinearAttentionCache:
        """An empty cache for this model, on its device and in its dtype.

        Args:
            batch_size: Number of sequences.
            max_len: Most positions of a `KVCache` (default: the model's ``max_len``); a
                `LinearAttentionCache` has no limit.

        Returns:
            A `KVCache` for softmax attention, a `LinearAttentionCache` for linear attention.
        """
        heads = self.blks[0].attention.heads
        weight = heads.W_k.weight
        if self.kind == "linear":
            return LinearAttentionCache(
                len(self.blks), batch_size, heads.num_heads, heads.head_dim,
                weight.dtype, weight.device,
            )  # fmt: skip
        return KVCache(
            len(self.blks), batch_size, self.num_kv_heads, max_len or self.max_len,
            heads.head_dim, weight.dtype, weight.device,
        )  # fmt: skip

    # --8<-- [end:GPT]
    # --8<-- [start:GPT-generate]
    @torch.no_grad()
    def generate(self, tokens: Tensor, max_new_tokens: int, use_cache: bool = True) -> Tensor:
        """Greedy decoding: append the most probable next token ``max_new_tokens`` times.

        Args:
            tokens: The prompts, all of the same length (at least 1).
            max_new_tokens: Number of tokens to append.
            use_cache: Run each step on the new token with a cache from `new_cache` (True),
                or run the whole sequence again at every step (False). Both give the same
                tokens.

        Returns:
            The prompts followed by the generated tokens.

        Shapes:
            - tokens: ``(batch, length)``
            - returns: ``(batch, length + max_new_tokens)``

        Raises:
            ValueError: If ``tokens`` is not a non-empty 2-D integer tensor or
                ``max_new_tokens`` is negative.
        """
        check_tokens("tokens", tokens)
        if tokens.shape[1] == 0 or max_new_tokens < 0:
            raise ValueError(
                f"tokens must hold at least one token per prompt and max_new_tokens must be "
                f"non-negative, got tokens of shape {tuple(tokens.shape)} and "
                f"max_new_tokens={max_new_tokens}"
            )
        was_training = self.training
        self.eval()
        length = tokens.shape[1] + max_new_tokens
        cache = self.new_cache(tokens.shape[0], length) if use_cache else None
        step_input = tokens
        for _ in range(max_new_tokens):
            # With the cache, only the new positions (all of the prompt, then one token);
            # without it, the whole sequence so far.
            logits = self(step_input, cache) if use_cache else self(tokens)  # (batch, n, vocab)
            next_token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (batch, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            step_input = next_token
        self.train(was_training)
        return tokens

    # --8<-- [end:GPT-generate]
