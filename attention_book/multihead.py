"""Multi-head attention: several scaled dot-product attentions side by side.

Each head projects queries, keys and values to a smaller space of ``head_dim`` features and
attends there. The heads run in parallel as one batched computation: the projected features
are split into ``num_heads`` chunks, attention runs on the 4-D tensor
``(batch, num_heads, n, head_dim)``, and the heads' outputs are concatenated and projected.

`GroupedQueryAttention` lets groups of query heads share key and value heads (multi-query
attention when all share one), which shrinks what a decoder must cache. `NeighborReader`, one
multi-head layer between embeddings and a read-out, is the model of the chapter's experiment.
"""

from __future__ import annotations

from torch import Tensor, nn

from attention_book.attention import DotProductAttention
from attention_book.positional import LearnedPositionalEmbedding
from attention_book.validation import check_attention_inputs, check_dims

__all__ = [
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "NeighborReader",
    "merge_heads",
    "split_heads",
]


# --8<-- [start:helpers]
def _head_dim(num_hiddens: int, num_heads: int) -> int:
    """The size of one head, ``num_hiddens // num_heads``, after checking that it divides."""
    if num_heads <= 0 or num_hiddens <= 0 or num_hiddens % num_heads != 0:
        raise ValueError(
            f"num_hiddens={num_hiddens} must be divisible by num_heads={num_heads}, both positive"
        )
    return num_hiddens // num_heads


def _check_split(X: Tensor, num_heads: int) -> None:
    """Raise ``ValueError`` unless ``X`` is ``(batch, n, num_hiddens)`` and the heads divide it."""
    check_dims("X", X, (3,), "(batch, n, num_hiddens)")
    if X.shape[-1] % num_heads != 0:
        raise ValueError(
            f"num_hiddens={X.shape[-1]} (last dim of X, shape {tuple(X.shape)}) must be "
            f"divisible by num_heads={num_heads}"
        )


def _check_inputs(layer: nn.Module, queries: Tensor, keys: Tensor, values: Tensor) -> None:
    """Raise ``ValueError`` unless the inputs fit the layer's projections ``W_q, W_k, W_v``."""
    sizes = layer.W_q.in_features, layer.W_k.in_features, layer.W_v.in_features
    check_attention_inputs(queries, keys, values, sizes)


def _check_groups(num_heads: int, num_kv_heads: int) -> None:
    """Raise ``ValueError`` unless ``num_kv_heads`` divides ``num_heads`` (grouped-query heads)."""
    if num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads} "
            "(each key/value head serves a group of query heads)"
        )


def _head_axis(attn_mask: Tensor | None) -> Tensor | None:
    """Give a 3-D mask ``(batch, num_queries, num_keys)`` a head axis, so all heads share it."""
    if attn_mask is not None and attn_mask.dim() == 3:
        return attn_mask.unsqueeze(1)  # (batch, 1, num_queries, num_keys)
    return attn_mask


# --8<-- [end:helpers]


# --8<-- [start:split_heads]
def split_heads(X: Tensor, num_heads: int) -> Tensor:
    """Split the feature axis into heads and move the heads next to the batch axis.

    Args:
        X: Projected queries, keys or values.
        num_heads: Number of heads; must divide ``num_hiddens``.

    Returns:
        A view of ``X`` with one ``head_dim = num_hiddens // num_heads`` slice per head.

    Shapes:
        - X: ``(batch, n, num_hiddens)``
        - returns: ``(batch, num_heads, n, head_dim)``

    Raises:
        ValueError: If ``X`` is not 3-D or ``num_heads`` does not divide its last axis.
    """
    _check_split(X, num_heads)
    batch_size, n, num_hiddens = X.shape
    X = X.view(batch_size, n, num_heads, num_hiddens // num_heads)  # (batch, n, heads, head_dim)
    return X.transpose(1, 2)  # (batch, num_heads, n, head_dim)


# --8<-- [end:split_heads]


# --8<-- [start:merge_heads]
def merge_heads(X: Tensor) -> Tensor:
    """Concatenate the heads' features again: the inverse of :func:`split_heads`.

    Args:
        X: Per-head outputs.

    Returns:
        The heads' outputs side by side on the feature axis.

    Shapes:
        - X: ``(batch, num_heads, n, head_dim)``
        - returns: ``(batch, n, num_heads * head_dim)``

    Raises:
        ValueError: If ``X`` is not 4-D.
    """
    check_dims("X", X, (4,), "(batch, num_heads, n, head_dim)")
    batch_size, num_heads, n, head_dim = X.shape
    X = X.transpose(1, 2)  # (batch, n, num_heads, head_dim)
    return X.reshape(batch_size, n, num_heads * head_dim)  # (batch, n, num_hiddens)


# --8<-- [end:merge_heads]


# --8<-- [start:MultiHeadAttention]
class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017).

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_o`` with
    ``head_i = Attention(Q W_q^i, K W_k^i, V W_v^i)``. The projections of all heads are stored
    together in ``W_q``, ``W_k`` and ``W_v`` (``num_hiddens`` outputs each) and split with
    :func:`split_heads`; each head has ``head_dim = num_hiddens // num_heads`` features.

    Given the same weights it computes what ``torch.nn.MultiheadAttention(batch_first=True)``
    computes. Two differences in the interface: masks here are ``True`` where a query **may**
    attend (as in ``scaled_dot_product_attention``; ``nn.MultiheadAttention`` uses ``True`` for
    "ignore"), and fully masked rows give zero output instead of NaN.

    With ``need_weights=True`` (default) the explicit path keeps the per-head weights in
    ``attention_weights``; with ``need_weights=False`` attention runs through PyTorch's fused
    ``scaled_dot_product_attention`` and ``attention_weights`` is ``None``.

    Args:
        num_hiddens: Size of the projected queries, keys, values and of the output.
        num_heads: Number of heads; must divide ``num_hiddens``.
        dropout: Dropout probability on the attention weights.
        bias: Whether the four linear layers have a bias.
        query_size: Size of the input queries (default ``num_hiddens``).
        key_size: Size of the input keys (default ``num_hiddens``).
        value_size: Size of the input values (default ``num_hiddens``).
        need_weights: Default path: explicit with weights (``True``) or fused (``False``).

    Shapes:
        - queries: ``(batch, num_queries, query_size)``
        - keys: ``(batch, num_keys, key_size)``
        - values: ``(batch, num_keys, value_size)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``, shared by all heads
        - attn_mask: bool, broadcastable to ``(batch, num_heads, num_queries, num_keys)``;
          a 3-D mask ``(batch, num_queries, num_keys)`` is shared by all heads
        - output: ``(batch, num_queries, num_hiddens)``
        - attention_weights: ``(batch, num_heads, num_queries, num_keys)``

    Raises:
        ValueError: If ``num_hiddens`` is not a positive multiple of ``num_heads``.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        *,
        query_size: int | None = None,
        key_size: int | None = None,
        value_size: int | None = None,
        need_weights: bool = True,
    ):
        super().__init__()
        self.head_dim = _head_dim(num_hiddens, num_heads)  # features per head
        self.num_heads = num_heads
        self.W_q = nn.Linear(query_size or num_hiddens, num_hiddens, bias=bias)  # all heads
        self.W_k = nn.Linear(key_size or num_hiddens, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size or num_hiddens, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.attention = DotProductAttention(dropout, need_weights=need_weights)

    # --8<-- [end:MultiHeadAttention]
    # --8<-- [start:MultiHeadAttention-forward]
    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool | None = None,
    ) -> Tensor:
        """Project, attend in every head, concatenate and project again.

        Args:
            queries: Query vectors.
            keys: Key vectors.
            values: Value vectors, one per key.
            valid_lens: Optional number of valid keys per sequence or per query.
            attn_mask: Optional boolean mask, ``True`` = may attend.
            is_causal: If ``True``, query ``i`` may attend only keys ``j <= i`` (top-left
                alignment, see `attention_book.masking`).
            need_weights: Overrides the constructor's choice of path for this call.

        Returns:
            The attention output.

        Raises:
            ValueError: If an input is not 3-D, has a feature size other than the layer's
                input size, keys and values differ in length, or a mask is malformed.
        """
        _check_inputs(self, queries, keys, values)
        attn_mask = _head_axis(attn_mask)  # a (batch, n_q, n_k) mask is shared by the heads
        queries = split_heads(self.W_q(queries), self.num_heads)  # (batch, heads, n_q, head_dim)
        keys = split_heads(self.W_k(keys), self.num_heads)  # (batch, heads, n_k, head_dim)
        values = split_heads(self.W_v(values), self.num_heads)  # (batch, heads, n_k, head_dim)
        output = self.attention(
            queries, keys, values, valid_lens, attn_mask, is_causal, need_weights
        )  # every head at once: (batch, num_heads, num_queries, head_dim)
        return self.W_o(merge_heads(output))  # (batch, num_queries, num_hiddens)

    # --8<-- [end:MultiHeadAttention-forward]

    @property
    def attention_weights(self) -> Tensor | None:
        """Last per-head attention weights, ``(batch, num_heads, num_queries, num_keys)``."""
        return self.attention.attention_weights


# --8<-- [start:GroupedQueryAttention]
class GroupedQueryAttention(nn.Module):
    """Grouped-query attention (Ainslie et al., 2023): fewer key/value heads than query heads.

    The ``num_heads`` query heads are split into ``num_kv_heads`` groups of
    ``num_heads // num_kv_heads`` consecutive heads, and each group shares one key head and one
    value head. ``W_k`` and ``W_v`` project to ``num_kv_heads * head_dim`` features only, so a
    decoder caches ``num_heads / num_kv_heads`` times fewer keys and values. With
    ``num_kv_heads == num_heads`` this is `MultiHeadAttention` (same weights, same output);
    with ``num_kv_heads == 1`` it is multi-query attention (Shazeer, 2019).

    Called like `MultiHeadAttention`. `project` and `attend` are its two halves, for callers
    that transform or cache the projected keys and values in between (rotary embeddings, a
    key/value cache).

    Args:
        num_hiddens: Size of the projected queries and of the output.
        num_heads: Number of query heads; must divide ``num_hiddens``.
        num_kv_heads: Number of key/value heads; must divide ``num_heads``.
        dropout: Dropout probability on the attention weights.
        bias: Whether the four linear layers have a bias.
        query_size: Size of the input queries (default ``num_hiddens``).
        key_size: Size of the input keys (default ``num_hiddens``).
        value_size: Size of the input values (default ``num_hiddens``).
        need_weights: Default path: explicit with weights (``True``) or fused (``False``).

    Shapes:
        - queries: ``(batch, num_queries, query_size)``
        - keys: ``(batch, num_keys, key_size)``
        - values: ``(batch, num_keys, value_size)``
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``, shared by all heads
        - attn_mask: bool, broadcastable to ``(batch, num_heads, num_queries, num_keys)``;
          a 3-D mask ``(batch, num_queries, num_keys)`` is shared by all heads
        - output: ``(batch, num_queries, num_hiddens)``
        - attention_weights: ``(batch, num_heads, num_queries, num_keys)``

    Raises:
        ValueError: If ``num_hiddens`` is not a positive multiple of ``num_heads`` or
            ``num_kv_heads`` does not divide ``num_heads``.
    """

    def __init__(
        self,
        num_hiddens: int,
        num_heads: int,
        num_kv_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        *,
        query_size: int | None = None,
        key_size: int | None = None,
        value_size: int | None = None,
        need_weights: bool = True,
    ):
        super().__init__()
        self.head_dim = _head_dim(num_hiddens, num_heads)
        _check_groups(num_heads, num_kv_heads)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        kv_hiddens = num_kv_heads * self.head_dim  # narrower than num_hiddens
        self.W_q = nn.Linear(query_size or num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size or num_hiddens, kv_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size or num_hiddens, kv_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.attention = DotProductAttention(dropout, need_weights=need_weights)

    # --8<-- [end:GroupedQueryAttention]
    # --8<-- [start:GroupedQueryAttention-project]
    @property
    def attention_weights(self) -> Tensor | None:
        """Last per-head attention weights, ``(batch, num_heads, num_queries, num_keys)``."""
        return self.attention.attention_weights

    def project(self, queries: Tensor, keys: Tensor, values: Tensor) -> tuple[Tensor, ...]:
        """Check and project the inputs, and split them into heads.

        Args:
            queries: Query vectors.
            keys: Key vectors.
            values: Value vectors, one per key.

        Returns:
            The projected queries, keys and values, split into heads.

        Shapes:
            - returns: ``(batch, num_heads, num_queries, head_dim)``,
              ``(batch, num_kv_heads, num_keys, head_dim)`` twice

        Raises:
            ValueError: If an input is not 3-D, has a feature size other than the layer's
                input size, or keys and values differ in length.
        """
        sizes = self.W_q.in_features, self.W_k.in_features, self.W_v.in_features
        check_attention_inputs(queries, keys, values, sizes)
        queries = split_heads(self.W_q(queries), self.num_heads)  # (batch, h, n_q, head_dim)
        keys = split_heads(self.W_k(keys), self.num_kv_heads)  # (batch, h_kv, n_k, head_dim)
        values = split_heads(self.W_v(values), self.num_kv_heads)  # (batch, h_kv, n_k, head_dim)
        return queries, keys, values

    # --8<-- [end:GroupedQueryAttention-project]
    # --8<-- [start:GroupedQueryAttention-attend]
    def attend(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool | None = None,
    ) -> Tensor:
        """Share each key/value head with its group of query heads, attend, merge, project.

        Args:
            queries: Projected queries, split into heads.
            keys: Projected keys, ``num_kv_heads`` heads.
            values: Projected values, ``num_kv_heads`` heads.
            valid_lens: Optional number of valid keys per sequence or per query.
            attn_mask: Optional boolean mask, ``True`` = may attend.
            is_causal: Top-left causal mask, as in `MultiHeadAttention`.
            need_weights: Overrides the constructor's choice of path for this call.

        Returns:
            The attention output.

        Shapes:
            - queries: ``(batch, num_heads, num_queries, head_dim)``
            - keys, values: ``(batch, num_kv_heads, num_keys, head_dim)``
            - returns: ``(batch, num_queries, num_hiddens)``
        """
        group = self.num_heads // self.num_kv_heads
        if group > 1:  # query head i uses key/value head i // group: repeat each one `group` times
            keys = keys.repeat_interleave(group, dim=1)  # (batch, num_heads, num_keys, head_dim)
            values = values.repeat_interleave(group, dim=1)  # (batch, num_heads, num_keys, d)
        attn_mask = _head_axis(attn_mask)  # a 3-D mask gets a head axis, shared by all heads
        output = self.attention(
            queries, keys, values, valid_lens, attn_mask, is_causal, need_weights
        )  # (batch, num_heads, num_queries, head_dim)
        return self.W_o(merge_heads(output))  # (batch, num_queries, num_hiddens)

    # --8<-- [end:GroupedQueryAttention-attend]
    # --8<-- [start:GroupedQueryAttention-forward]

    def forward(
        self,
        queries: Tensor,
        keys: Tensor,
        values: Tensor,
        valid_lens: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool | None = None,
    ) -> Tensor:
        """Project, attend with shared key/value heads, concatenate and project again.

        Args:
            queries: Query vectors.
            keys: Key vectors.
            values: Value vectors, one per key.
            valid_lens: Optional number of valid keys per sequence or per query.
            attn_mask: Optional boolean mask, ``True`` = may attend.
            is_causal: If ``True``, query ``i`` may attend only keys ``j <= i`` (top-left).
            need_weights: Overrides the constructor's choice of path for this call.

        Returns:
            The attention output.

        Raises:
            ValueError: As `project`, or for a malformed mask.
        """
        queries, keys, values = self.project(queries, keys, values)
        return self.attend(queries, keys, values, valid_lens, attn_mask, is_causal, need_weights)

    # --8<-- [end:GroupedQueryAttention-forward]


# --8<-- [start:NeighborReader]
class NeighborReader(nn.Module):
    """Embeddings, one multi-head self-attention layer, and a linear read-out of two answers.

    Args:
        vocab_size: Number of distinct tokens.
        num_steps: Sequence length (number of learned positions).
        num_hiddens: Width of the embeddings and of the attention layer (all heads together).
        num_heads: Number of heads; each has ``num_hiddens // num_heads`` features.

    Shapes:
        - tokens: ``(batch, num_steps)``
        - output: ``(batch, num_steps, 2, vocab_size)``, logits of the two answers
    """

    def __init__(self, vocab_size: int, num_steps: int, num_hiddens: int, num_heads: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        # Unit-scale initial positions, so the heads can tell positions apart from the start.
        self.positions = LearnedPositionalEmbedding(num_hiddens, max_len=num_steps, init_std=1.0)
        self.attention = MultiHeadAttention(num_hiddens, num_heads)
        self.read_out = nn.Linear(num_hiddens, 2 * vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        """Return the logits of the left and the right neighbour of every position."""
        X = self.positions(self.embedding(tokens))  # (batch, num_steps, num_hiddens)
        Y = self.attention(X, X, X)  # self-attention: (batch, num_steps, num_hiddens)
        logits = self.read_out(Y)  # (batch, num_steps, 2 * vocab_size)
        return logits.unflatten(-1, (2, self.vocab_size))  # (batch, num_steps, 2, vocab)


# --8<-- [end:NeighborReader]
