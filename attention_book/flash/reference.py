"""FlashAttention's algorithm in plain PyTorch: the version to read before the kernels.

From the idea to the full algorithm:

1. `online_softmax`: the softmax of one vector in a single pass over blocks, with a running
   maximum and a running sum (Milakov and Gimelshein, 2018).
2. `naive_attention`: the textbook formula, which builds the whole (q_len, k_len) score matrix.
   It is the baseline every other version is tested against.
3. `tiled_attention_forward`: FlashAttention's forward pass (Dao et al., 2022; Dao, 2023).
   Blocks of queries meet blocks of keys; each query row keeps a running maximum ``m_i``, a
   running sum ``l_i`` and an unnormalized output ``acc``. Only the output and one
   log-sum-exp per query are written.
4. `tiled_attention_backward`: the backward pass, which recomputes each block of attention
   weights from the saved log-sum-exp instead of storing them.
5. `TiledAttention`: the autograd Function that joins the two passes.

Memory grows linearly with the sequence length, on CPU and GPU alike. The conventions (tensor
layout, ``valid_lens``, bottom-right causal masking, rows that see no key) are described in
`attention_book.flash`.
"""

from __future__ import annotations

import torch

from attention_book.masking import attention_mask

__all__ = [
    "TiledAttention",
    "naive_attention",
    "online_softmax",
    "tiled_attention_backward",
    "tiled_attention_forward",
]


# --8<-- [start:online_softmax]
def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax of a vector computed in one pass over blocks, with a running max and sum.

    This is the trick at the heart of FlashAttention (Milakov and Gimelshein, 2018): after each
    block, the running sum is rescaled by ``exp(old_max - new_max)`` so that it always equals
    ``sum(exp(x - running_max))`` over the entries seen so far.

    Args:
        scores: The vector to normalize.
        block_size: How many entries are read per step.

    Returns:
        The softmax of `scores`, equal to ``torch.softmax(scores, dim=0)`` up to rounding.

    Shapes:
        - scores: (n,)
        - returns: (n,)
    """
    running_max = torch.tensor(float("-inf"), dtype=scores.dtype)
    running_sum = torch.tensor(0.0, dtype=scores.dtype)
    for start in range(0, scores.numel(), block_size):
        block = scores[start : start + block_size]
        new_max = torch.maximum(running_max, block.max())
        running_sum = (
            running_sum * torch.exp(running_max - new_max) + torch.exp(block - new_max).sum()
        )
        running_max = new_max
    # Second, cheap pass: every entry is normalized with the final max and sum.
    return torch.exp(scores - running_max) / running_sum


# --8<-- [end:online_softmax]


# --8<-- [start:naive_attention]
def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Standard attention: build every score, softmax each row, average the values.

    Fully masked rows return zeros (not the NaN a plain softmax of ``-inf`` would give).

    Args:
        q: Queries.
        k: Keys.
        v: Values.
        causal: Causal masking aligned bottom-right: query ``i`` sees key ``j`` when
            ``j <= i + k_len - q_len`` (see `attention_book.masking`).
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        return_lse: Also return the log-sum-exp of each query's scores.

    Returns:
        The output, and the log-sum-exp if `return_lse`.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - valid_lens: (batch,)
        - returns: (batch, num_heads, q_len, head_dim) [and (batch, num_heads, q_len)]
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (batch, num_heads, q_len, k_len)
    mask = attention_mask(
        q.shape[-2], k.shape[-2], causal=causal, valid_lens=valid_lens, device=q.device
    )
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (batch, num_heads, q_len)
    # exp(-inf - (-inf)) is NaN: give fully masked rows an lse of 0 so their weights are 0.
    weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = weights @ v  # (batch, num_heads, q_len, head_dim)
    return (out, lse) if return_lse else out


# --8<-- [end:naive_attention]


# --8<-- [start:tiled_forward]
def tiled_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    block_m: int = 128,
    block_n: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention's forward pass in PyTorch: blocks of queries against blocks of keys.

    For each block of `block_m` queries, the loop reads the keys and values `block_n` at a time
    and keeps three running quantities per query row: the maximum score ``m_i``, the sum of
    exponentials ``l_i`` (relative to ``m_i``) and the unnormalized output ``acc``. Nothing of
    size (q_len, k_len) is ever allocated. Arithmetic is float32 (float64 for float64 inputs).

    Args:
        q: Queries.
        k: Keys.
        v: Values.
        causal: Causal masking aligned bottom-right (see `naive_attention`); key blocks
            entirely above the diagonal are skipped.
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per block.
        block_n: Keys per block.

    Returns:
        The output (in the inputs' dtype) and the natural log-sum-exp of each query's scores
        (``-inf`` for rows that see no key).

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - valid_lens: (batch,)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    compute_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.empty_like(q)
    lse = torch.empty(batch, num_heads, q_len, dtype=compute_dtype, device=q.device)
    masking = (q_len, k_len, causal, valid_lens)  # what decides the masks of a tile
    for start_m in range(0, q_len, block_m):  # one block of queries at a time
        rows = slice(start_m, start_m + block_m)
        q_i = q[:, :, rows].to(compute_dtype)  # (b, h, block_m, d)
        m_i, l_i, acc = _attend_query_block(q_i, k, v, start_m, scale, block_n, masking)
        l_safe = torch.where(l_i == 0, 1.0, l_i)  # a row that saw no key: output 0, lse -inf
        out[:, :, rows] = (acc / l_safe[..., None]).to(q.dtype)
        lse[:, :, rows] = torch.where(l_i == 0, float("-inf"), m_i + torch.log(l_safe))
        del m_i, l_i, acc  # this block's state is written: free it before the next block's
    return out, lse


# --8<-- [end:tiled_forward]
# --8<-- [start:tiled_query_block]
def _attend_query_block(
    q_i: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    start_m: int,
    scale: float,
    block_n: int,
    masking: tuple[int, int, bool, torch.Tensor | None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block of queries against the key blocks it must read: the online softmax."""
    batch, num_heads, rows, head_dim = q_i.shape
    q_len, k_len, causal, valid_lens = masking
    m_i = torch.full((batch, num_heads, rows), float("-inf"), **_like(q_i))  # running max
    l_i = torch.zeros(batch, num_heads, rows, **_like(q_i))  # running sum of exponentials
    acc = torch.zeros(batch, num_heads, rows, head_dim, **_like(q_i))  # unnormalized output
    for start_n in range(0, _keys_to_visit(start_m, rows, *masking), block_n):
        k_j = k[:, :, start_n : start_n + block_n].to(q_i.dtype)  # (b, h, block_n, d)
        v_j = v[:, :, start_n : start_n + block_n].to(q_i.dtype)
        s_ij = _tile_scores(q_i, k_j, scale, q_len, k_len, start_m, start_n, causal, valid_lens)
        m_new = torch.maximum(m_i, s_ij.amax(dim=-1))
        # A row that has seen only masked keys has m_new = -inf; subtract 0 instead.
        m_safe = torch.where(torch.isinf(m_new), 0.0, m_new)
        p_ij = torch.exp(s_ij - m_safe[..., None])  # (b, h, block_m, block_n)
        alpha = torch.exp(m_i - m_safe)  # rescales what was summed with the old max
        l_i = alpha * l_i + p_ij.sum(dim=-1)
        acc = alpha[..., None] * acc + p_ij @ v_j
        m_i = m_new
    return m_i, l_i, acc


# --8<-- [end:tiled_query_block]
# --8<-- [start:tiled_masks]
def _keys_to_visit(
    start_m: int,
    rows: int,
    q_len: int,
    k_len: int,
    causal: bool,
    valid_lens: torch.Tensor | None,
) -> int:
    """How many keys a block of queries must read: the rest are padding or in its future."""
    end_n = k_len
    if valid_lens is not None and valid_lens.numel() > 0:  # an empty batch has no lengths
        end_n = min(k_len, int(valid_lens.max()))
    if causal:  # the block's last query sees keys up to (start_m + rows - 1) + k_len - q_len
        end_n = max(0, min(end_n, start_m + rows + k_len - q_len))
    return end_n


def _tile_scores(
    q_i: torch.Tensor,
    k_j: torch.Tensor,
    scale: float,
    q_len: int,
    k_len: int,
    start_m: int,
    start_n: int,
    causal: bool,
    valid_lens: torch.Tensor | None,
) -> torch.Tensor:
    """Scores of one (query block, key block) tile, ``-inf`` where the pair may not attend."""
    s_ij = q_i @ k_j.transpose(-2, -1) * scale  # (b, h, block_m, block_n)
    mask = attention_mask(
        q_len, k_len, causal=causal, valid_lens=valid_lens, query_offset=start_m,
        key_offset=start_n, num_queries=q_i.shape[-2], num_keys=k_j.shape[-2],
        device=q_i.device,
    )  # fmt: skip
    return s_ij if mask is None else s_ij.masked_fill(~mask, float("-inf"))


# --8<-- [end:tiled_masks]


def _like(tensor: torch.Tensor) -> dict:
    """Keyword arguments that make a new tensor with `tensor`'s dtype and device."""
    return {"dtype": tensor.dtype, "device": tensor.device}


# --8<-- [start:tiled_backward]
def tiled_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    block_m: int = 128,
    block_n: int = 128,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's backward pass: recompute each block of weights from the log-sum-exp.

    With ``P = exp(S - lse)`` recomputed block by block, the gradients are
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)`` with ``D = rowsum(dO * O)``,
    ``dQ = scale * dS K`` and ``dK = scale * dS^T Q``. Only blocks are ever materialized.

    Args:
        q: Queries saved by the forward pass.
        k: Keys.
        v: Values.
        out: The forward output.
        lse: The forward log-sum-exp.
        grad_out: Gradient of the loss with respect to `out`.
        causal: Causal masking aligned bottom-right, as in the forward pass.
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per block.
        block_n: Keys per block.

    Returns:
        The gradients with respect to `q`, `k` and `v`, in the inputs' dtype.

    Shapes:
        - q, out, grad_out: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - lse: (batch, num_heads, q_len)
        - returns: the shapes of q, k and v
    """
    q_len, head_dim = q.shape[-2:]
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    compute_dtype = lse.dtype
    delta = (grad_out.to(compute_dtype) * out.to(compute_dtype)).sum(-1)  # (b, h, q_len)
    # Rows that saw no key have lse = -inf and all scores -inf: subtracting 0 gives P = 0.
    lse = torch.where(torch.isinf(lse), 0.0, lse)
    grad_q = torch.zeros_like(q, dtype=compute_dtype)
    grad_k = torch.zeros_like(k, dtype=compute_dtype)
    grad_v = torch.zeros_like(v, dtype=compute_dtype)
    for start_m in range(0, q_len, block_m):
        rows_slice = slice(start_m, start_m + block_m)
        q_i = q[:, :, rows_slice].to(compute_dtype)  # (b, h, block_m, d)
        do_i = grad_out[:, :, rows_slice].to(compute_dtype)
        rows = q_i.shape[-2]
        end_n = _keys_to_visit(start_m, rows, q_len, k_len, causal, valid_lens)
        for start_n in range(0, end_n, block_n):
            cols_slice = slice(start_n, start_n + block_n)
            k_j = k[:, :, cols_slice].to(compute_dtype)  # (b, h, block_n, d)
            v_j = v[:, :, cols_slice].to(compute_dtype)
            s_ij = _tile_scores(q_i, k_j, scale, q_len, k_len, start_m, start_n, causal, valid_lens)
            p_ij = torch.exp(s_ij - lse[:, :, rows_slice, None])
            grad_v[:, :, cols_slice] += p_ij.transpose(-2, -1) @ do_i
            dp_ij = do_i @ v_j.transpose(-2, -1)
            ds_ij = p_ij * (dp_ij - delta[:, :, rows_slice, None])
            grad_q[:, :, rows_slice] += ds_ij @ k_j
            grad_k[:, :, cols_slice] += ds_ij.transpose(-2, -1) @ q_i
    grad_q, grad_k = grad_q * scale, grad_k * scale
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


# --8<-- [end:tiled_backward]


# --8<-- [start:tiled_function]
class TiledAttention(torch.autograd.Function):
    """Autograd wrapper of the tiled reference: saves only q, k, v, the output and the lse.

    ``out, lse = TiledAttention.apply(q, k, v, causal, valid_lens, scale, block_m, block_n)``
    takes the arguments of `tiled_attention_forward`, in that order, and returns the output
    and the log-sum-exp, which is not differentiable. Its backward pass is
    `tiled_attention_backward`. Every tensor the backward needs, `valid_lens` included, goes
    through ``ctx.save_for_backward``, so autograd notices if one is modified in between.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """

    @staticmethod
    def forward(q, k, v, causal, valid_lens, scale, block_m, block_n):  # noqa: D102
        return tiled_attention_forward(q, k, v, causal, valid_lens, scale, block_m, block_n)

    @staticmethod
    def setup_context(ctx, inputs, output):  # noqa: D102
        q, k, v, causal, valid_lens, scale, block_m, block_n = inputs
        out, lse = output
        padding = () if valid_lens is None else (valid_lens,)  # saved only when given
        ctx.save_for_backward(q, k, v, out, lse, *padding)
        ctx.options = {"causal": causal, "scale": scale, "block_m": block_m, "block_n": block_n}
        ctx.mark_non_differentiable(lse)

    @staticmethod
    def saved(ctx) -> tuple[torch.Tensor, ...]:
        """What `setup_context` saved: q, k, v, out, lse and valid_lens (or None)."""
        q, k, v, out, lse, *padding = ctx.saved_tensors
        return q, k, v, out, lse, padding[0] if padding else None

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # noqa: D102
        q, k, v, out, lse, valid_lens = TiledAttention.saved(ctx)
        grads = tiled_attention_backward(
            q, k, v, out, lse, grad_out, valid_lens=valid_lens, **ctx.options
        )
        return (*grads, None, None, None, None, None)


# --8<-- [end:tiled_function]
