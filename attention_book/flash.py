"""FlashAttention: exact attention that never stores the (q_len, k_len) score matrix.

Three implementations of the same function live here, from the easiest to read to the fastest:

1. `naive_attention`: the textbook formula. It builds the full score matrix and the full
   attention-weight matrix, so its memory grows with ``q_len * k_len``.
2. `TiledAttention`: a pure PyTorch reference of FlashAttention's algorithm (Dao et al., 2022;
   Dao, 2023). It walks over blocks of queries and blocks of keys with the *online softmax*
   (running maximum ``m_i``, running sum ``l_i``, accumulator ``acc``), keeps only the output and
   the log-sum-exp of each query row, and recomputes the attention weights block by block in the
   backward pass. Its memory grows linearly with the sequence length. It runs on CPU and GPU.
3. `TritonAttention`: the same algorithm as Triton kernels (forward, and a backward made of a
   key/value kernel and a query kernel, as in FlashAttention-2). On a CUDA GPU they are compiled;
   on a CPU they run under Triton's interpreter when ``TRITON_INTERPRET=1`` is set.

`flash_attention` is the one entry point; it picks an implementation with ``backend``.

Conventions shared by all three:

- Tensors are shaped (batch, num_heads, seq_len, head_dim), as
  `torch.nn.functional.scaled_dot_product_attention` takes them.
- ``valid_lens`` (batch,) gives the number of real keys of each sequence; keys at positions
  ``>= valid_lens[b]`` are padding and get no weight (a key padding mask).
- ``causal=True`` uses **bottom-right** alignment, as FlashAttention 2.1 and later do: query ``i``
  may see key ``j`` when ``j <= i + (k_len - q_len)``. The last query always lines up with the
  last key, which is what decoding with a key/value cache needs. PyTorch's ``is_causal=True``
  uses top-left alignment (``j <= i``). The two agree when ``q_len == k_len``.
- A query row that may see no key at all (``valid_lens[b] == 0``, or a causal row with
  ``q_len > k_len``) returns zeros and has log-sum-exp ``-inf``; no NaN is produced, forward or
  backward.

How Triton is imported. ``import attention_book`` never imports Triton. The kernels below, and
the device function they call (`_attn_fwd_inner`), are written as plain Python functions;
`_load_triton_kernels` imports Triton and applies ``triton.jit`` the first time a Triton kernel
is needed, once per mode (compiled or interpreted), because Triton reads ``TRITON_INTERPRET``
when ``triton.jit`` is applied; `_bind` points the module's ``tl`` and helper names at the
current mode's versions before each launch. Triton's own library functions that the kernels
call (``tl.max``, ``tl.sum``, ``tl.zeros``) are decorated when Triton is first imported, in
the mode in force then, and PyTorch itself imports Triton on many paths (``torch._dynamo``, a
``TorchDispatchMode``, ``torch.nn.attention.bias``). So when the interpreter is asked for after
Triton was imported in compiled mode, the kernels see ``tl`` through `_InterpreterLanguage`,
which re-wraps those functions for the interpreter and passes everything else through. Either
way, setting ``TRITON_INTERPRET=1`` before the first Triton call is enough. Under the
interpreter the kernels upcast their tiles to float32 before each ``tl.dot`` (the
interpreter's dot does not handle bfloat16), use fixed block sizes from `_triton_block_sizes`,
and never autotune or query a GPU driver.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = [
    "TiledAttention",
    "TritonAttention",
    "attention_mask",
    "flash_attention",
    "measure_tensor_memory",
    "naive_attention",
    "online_softmax",
    "tiled_attention_backward",
    "tiled_attention_forward",
    "triton_attention_backward",
    "triton_attention_forward",
]

#: Bound to ``triton.language`` by `_bind_language`; the kernels look ``tl`` up at run time.
tl = None
_triton_language = None

_REFERENCE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TRITON_HEAD_DIMS = (16, 128)


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


def _check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    valid_lens: torch.Tensor | None,
    dtypes: tuple[torch.dtype, ...],
) -> None:
    """Raise a ValueError naming the argument when shapes, dtypes or devices do not fit."""
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 4:
            raise ValueError(
                f"{name} must have shape (batch, num_heads, seq_len, head_dim), "
                f"got shape {tuple(tensor.shape)}"
            )
        if tensor.dtype not in dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
            raise ValueError(f"{name} must have dtype in ({names}), got {tensor.dtype}")
    batch, num_heads, _, head_dim = q.shape
    if k.shape[:2] != (batch, num_heads) or k.shape[-1] != head_dim:
        raise ValueError(
            f"k must have shape ({batch}, {num_heads}, k_len, {head_dim}) to match q "
            f"{tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if v.shape != k.shape:
        raise ValueError(f"v must have the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if valid_lens is not None and (valid_lens.shape != (batch,) or valid_lens.is_floating_point()):
        raise ValueError(
            f"valid_lens must be an integer tensor of shape ({batch},), got "
            f"{valid_lens.dtype} of shape {tuple(valid_lens.shape)}"
        )


# --8<-- [start:attention_mask]
def attention_mask(
    q_len: int,
    k_len: int,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    query_offset: int = 0,
    key_offset: int = 0,
    num_queries: int | None = None,
    num_keys: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """Which (query, key) pairs take part in attention: True means "may attend".

    Causal masking is aligned bottom-right: query ``i`` sees key ``j`` when
    ``j <= i + (k_len - q_len)``. With `query_offset`/`key_offset` and `num_queries`/`num_keys`
    the function returns the mask of one block (rows ``query_offset ...``, columns
    ``key_offset ...``), which is how the tiled code asks for it.

    Args:
        q_len: Number of queries of the whole sequence.
        k_len: Number of keys of the whole sequence.
        causal: Whether to apply the bottom-right causal mask.
        valid_lens: Number of real keys per sequence; later keys are padding.
        query_offset: Index of the block's first query.
        key_offset: Index of the block's first key.
        num_queries: Number of queries in the block (default: all from `query_offset`).
        num_keys: Number of keys in the block (default: all from `key_offset`).
        device: Device of the returned mask.

    Returns:
        A boolean mask, or None when every pair may attend.

    Shapes:
        - valid_lens: (batch,)
        - returns: (batch or 1, 1, num_queries, num_keys)
    """
    num_queries = q_len - query_offset if num_queries is None else num_queries
    num_keys = k_len - key_offset if num_keys is None else num_keys
    keys = torch.arange(key_offset, key_offset + num_keys, device=device)
    mask = None
    if causal:
        queries = torch.arange(query_offset, query_offset + num_queries, device=device)
        # (1, 1, num_queries, num_keys)
        mask = (keys[None, :] <= queries[:, None] + (k_len - q_len))[None, None]
    if valid_lens is not None:
        # (batch, 1, 1, num_keys)
        padding = keys[None, None, None, :] < valid_lens.to(device)[:, None, None, None]
        mask = padding if mask is None else mask & padding
    return mask


# --8<-- [end:attention_mask]


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
        causal: Bottom-right causal masking (see `attention_mask`).
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
    mask = attention_mask(q.shape[-2], k.shape[-2], causal, valid_lens, device=q.device)
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
        causal: Bottom-right causal masking; key blocks above the diagonal are skipped.
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
    max_keys = k_len if valid_lens is None else min(k_len, int(valid_lens.max()))
    for start_m in range(0, q_len, block_m):
        q_i = q[:, :, start_m : start_m + block_m].to(compute_dtype)  # (b, h, block_m, d)
        rows = q_i.shape[-2]
        m_i = torch.full((batch, num_heads, rows), float("-inf"), **_like(q_i))
        l_i = torch.zeros(batch, num_heads, rows, **_like(q_i))
        acc = torch.zeros(batch, num_heads, rows, head_dim, **_like(q_i))
        end_n = max_keys
        if causal:  # the block's last query sees keys up to (start_m + rows - 1) + k_len - q_len
            end_n = max(0, min(end_n, start_m + rows + k_len - q_len))
        for start_n in range(0, end_n, block_n):
            k_j = k[:, :, start_n : start_n + block_n].to(compute_dtype)  # (b, h, block_n, d)
            v_j = v[:, :, start_n : start_n + block_n].to(compute_dtype)
            s_ij = q_i @ k_j.transpose(-2, -1) * scale  # (b, h, block_m, block_n)
            mask = attention_mask(
                q_len, k_len, causal, valid_lens, start_m, start_n, rows, k_j.shape[-2], q.device
            )
            if mask is not None:
                s_ij = s_ij.masked_fill(~mask, float("-inf"))
            m_new = torch.maximum(m_i, s_ij.amax(dim=-1))
            # A row that has seen only masked keys has m_new = -inf; subtract 0 instead.
            m_safe = torch.where(torch.isinf(m_new), 0.0, m_new)
            p_ij = torch.exp(s_ij - m_safe[..., None])  # (b, h, block_m, block_n)
            alpha = torch.exp(m_i - m_safe)  # rescales what was summed with the old max
            l_i = alpha * l_i + p_ij.sum(dim=-1)
            acc = alpha[..., None] * acc + p_ij @ v_j
            m_i = m_new
        l_safe = torch.where(l_i == 0, 1.0, l_i)
        out[:, :, start_m : start_m + block_m] = (acc / l_safe[..., None]).to(q.dtype)
        lse[:, :, start_m : start_m + block_m] = torch.where(
            l_i == 0, float("-inf"), m_i + torch.log(l_safe)
        )
    return out, lse


# --8<-- [end:tiled_forward]


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
        causal: Bottom-right causal masking.
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
    max_keys = k_len if valid_lens is None else min(k_len, int(valid_lens.max()))
    for start_m in range(0, q_len, block_m):
        rows_slice = slice(start_m, start_m + block_m)
        q_i = q[:, :, rows_slice].to(compute_dtype)  # (b, h, block_m, d)
        do_i = grad_out[:, :, rows_slice].to(compute_dtype)
        rows = q_i.shape[-2]
        end_n = max_keys
        if causal:
            end_n = max(0, min(end_n, start_m + rows + k_len - q_len))
        for start_n in range(0, end_n, block_n):
            cols_slice = slice(start_n, start_n + block_n)
            k_j = k[:, :, cols_slice].to(compute_dtype)  # (b, h, block_n, d)
            v_j = v[:, :, cols_slice].to(compute_dtype)
            s_ij = q_i @ k_j.transpose(-2, -1) * scale  # (b, h, block_m, block_n)
            mask = attention_mask(
                q_len, k_len, causal, valid_lens, start_m, start_n, rows, k_j.shape[-2], q.device
            )
            if mask is not None:
                s_ij = s_ij.masked_fill(~mask, float("-inf"))
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
    `tiled_attention_backward`.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, valid_lens, scale, block_m, block_n):  # noqa: D102
        out, lse = tiled_attention_forward(q, k, v, causal, valid_lens, scale, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, valid_lens, scale, block_m, block_n)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        grads = tiled_attention_backward(q, k, v, out, lse, grad_out, *ctx.options)
        return (*grads, None, None, None, None, None)


# --8<-- [end:tiled_function]


# ---------------------------------------------------------------------------------------------
# Triton kernels. Plain functions here; `_load_triton_kernels` applies `triton.jit` lazily.
# ---------------------------------------------------------------------------------------------


# --8<-- [start:triton_forward_kernel]
def _attn_fwd_inner(
    acc, l_i, m_i, q, k_base, v_base,
    stride_kn, stride_kk, stride_vn, stride_vk,
    offs_m, offs_n, offs_d, d_mask, lo, hi, kv_len, q_len, k_len, qk_scale,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # The online softmax over the key blocks lo, lo + BLOCK_N, ..., < hi. MASKED is False for
    # blocks that every query of the program sees whole: no bounds or causal mask to apply.
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < kv_len
        # K is loaded transposed, (HEAD_DIM, BLOCK_N), so that q @ k is (BLOCK_M, BLOCK_N).
        k_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kk
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk
        if MASKED:
            k = tl.load(k_ptrs, mask=col_ok[None, :] & d_mask[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=col_ok[:, None] & d_mask[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs, mask=d_mask[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=d_mask[None, :], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, k, input_precision=INPUT_PRECISION) * qk_scale
        if MASKED:
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + (k_len - q_len))
            qk = tl.where(keep, qk, float("-inf"))
        # New running max; rescale what was accumulated; add this block.
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        if MASKED:  # a row that has seen no key yet has m_new = -inf: subtract 0 instead  # noqa: SIM108
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_sub = m_new
        p = tl.math.exp2(qk - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        p = p.to(v.dtype)  # P is rounded to the input dtype, as the GPU's MMA takes it
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc += tl.dot(p, v, input_precision=INPUT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


def _attn_fwd(
    Q, K, V, Out, LSE, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    num_heads, q_len, k_len, head_dim: tl.constexpr, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # One program computes BLOCK_M rows of the output of one (batch, head).
    start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)  # HEAD_DIM is head_dim rounded up to a power of two
    d_mask = offs_d < head_dim  # all true, and folded away, when head_dim == HEAD_DIM
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh
    q_ptrs += offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < q_len) & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    kv_len = k_len
    if HAS_VALID_LENS:
        kv_len = tl.minimum(tl.load(ValidLens + off_z), k_len)
    # Key blocks [0, full) are seen whole by every query here; [full, hi) need a mask.
    full = kv_len // BLOCK_N * BLOCK_N
    hi = kv_len
    if CAUSAL:  # query start_m sees keys <= start_m + k_len - q_len (bottom-right diagonal)
        full = tl.minimum(full, tl.maximum(start_m + 1 + k_len - q_len, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(hi, start_m + BLOCK_M + k_len - q_len)  # skip blocks above it
    qk_scale = sm_scale * 1.4426950408889634  # work in base 2: exp(x) = exp2(x * log2(e))
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    shared = (
        stride_kn, stride_kk, stride_vn, stride_vk, offs_m, offs_n, offs_d, d_mask,
    )  # fmt: skip
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, *shared, 0, full, kv_len, q_len, k_len, qk_scale,
        BLOCK_N, False, CAUSAL, UPCAST, INPUT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, *shared, full, hi, kv_len, q_len, k_len, qk_scale,
        BLOCK_N, True, CAUSAL, UPCAST, INPUT_PRECISION,
    )  # fmt: skip
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows that saw no key: output 0, lse -inf
    acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    tl.store(LSE + off_hz * q_len + offs_m, lse, mask=offs_m < q_len)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh
    o_ptrs += offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    o_mask = (offs_m[:, None] < q_len) & d_mask[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=o_mask)


# --8<-- [end:triton_forward_kernel]

#: Device functions the kernels call, as plain functions. `_triton_setup` binds each name in
#: this module to its ``triton.jit`` version for the current mode before a launch.
_KERNEL_HELPERS = {"_attn_fwd_inner": _attn_fwd_inner}  # the backward helpers join below


# --8<-- [start:triton_backward_kernels]
def _attn_bwd_dkdv_inner(
    dk, dv, k, v, q_base, do_base, LSE, Delta, off_hz,
    stride_qm, stride_qk, stride_dom, stride_dok,
    offs_m, offs_d, d_mask, cols, col_ok, lo, hi, q_len, k_len, qk_scale,
    BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # Accumulate dK and dV of this program's keys over the query blocks lo, ..., < hi.
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        row_ok = rows < q_len
        q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qk
        do_ptrs = do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dok
        if MASKED:
            q = tl.load(q_ptrs, mask=row_ok[:, None] & d_mask[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None] & d_mask[None, :], other=0.0)
            lse = tl.load(LSE + off_hz * q_len + rows, mask=row_ok, other=0.0)
            delta = tl.load(Delta + off_hz * q_len + rows, mask=row_ok, other=0.0)
            lse = tl.where(lse == float("-inf"), 0.0, lse)  # rows that see no key: P = 0
        else:
            q = tl.load(q_ptrs, mask=d_mask[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=d_mask[None, :], other=0.0)
            lse = tl.load(LSE + off_hz * q_len + rows)
            delta = tl.load(Delta + off_hz * q_len + rows)
        if UPCAST:
            q = q.to(tl.float32)
            do = do.to(tl.float32)
        # Transposed scores, (BLOCK_N, BLOCK_M): rows are this program's keys.
        qk_t = tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale
        qk_t = qk_t - lse[None, :] * 1.4426950408889634
        if MASKED:
            keep = col_ok[:, None] & row_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[:, None] <= rows[None, :] + (k_len - q_len))
            qk_t = tl.where(keep, qk_t, float("-inf"))
        p_t = tl.math.exp2(qk_t)  # P^T, recomputed from the log-sum-exp
        p_low = p_t.to(q_base.dtype.element_ty)
        if UPCAST:
            p_low = p_low.to(tl.float32)
        dv += tl.dot(p_low, do, input_precision=INPUT_PRECISION)  # dV = P^T dO
        dp_t = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)  # (dO V^T)^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS = P * (dP - D)
        ds_low = ds_t.to(q_base.dtype.element_ty)
        if UPCAST:
            ds_low = ds_low.to(tl.float32)
        dk += tl.dot(ds_low, q, input_precision=INPUT_PRECISION)  # dK = dS^T Q (times scale)
    return dk, dv


def _attn_bwd_dkdv(
    Q, K, V, DO, LSE, Delta, DK, DV, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    num_heads, q_len, k_len, head_dim: tl.constexpr, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # One program owns BLOCK_N keys of one (batch, head) and loops over the query blocks.
    # DK and DV are contiguous (batch, num_heads, k_len, head_dim) tensors.
    start_n = tl.program_id(0) * BLOCK_N
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_m = tl.arange(0, BLOCK_M)
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    d_mask = offs_d < head_dim
    kv_len = k_len
    if HAS_VALID_LENS:
        kv_len = tl.minimum(tl.load(ValidLens + off_z), k_len)
    col_ok = cols < kv_len
    kv_mask = col_ok[:, None] & d_mask[None, :]
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh
    k = tl.load(k_ptrs + cols[:, None] * stride_kn + offs_d[None, :] * stride_kk, mask=kv_mask)
    v_ptrs = V + off_z * stride_vz + off_h * stride_vh
    v = tl.load(v_ptrs + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk, mask=kv_mask)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    do_base = DO + off_z * stride_doz + off_h * stride_doh
    qk_scale = sm_scale * 1.4426950408889634
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # Query blocks: [lo, mid) cross the causal diagonal (masked), [mid, q_full) see these keys
    # whole (no mask), [q_full, q_len) is the ragged end of the queries (masked).
    lo = 0
    mid = 0
    if CAUSAL:  # the first query that sees key start_n is start_n - (k_len - q_len)
        lo = tl.maximum(start_n - (k_len - q_len), 0) // BLOCK_M * BLOCK_M
        # Query start_n + BLOCK_N - 1 - (k_len - q_len) is the first to see all these keys.
        first_full = tl.maximum(start_n + BLOCK_N - 1 - (k_len - q_len), 0)
        mid = tl.maximum((first_full + BLOCK_M - 1) // BLOCK_M * BLOCK_M, lo)
    # Padding keys (or the end of the keys) in this block: every query block needs the mask.
    mid = tl.where(start_n + BLOCK_N > kv_len, q_len, mid)
    q_full = tl.maximum(q_len // BLOCK_M * BLOCK_M, mid)
    shared = (
        q_base, do_base, LSE, Delta, off_hz, stride_qm, stride_qk, stride_dom, stride_dok,
        offs_m, offs_d, d_mask, cols, col_ok,
    )  # fmt: skip
    dk, dv = _attn_bwd_dkdv_inner(
        dk, dv, k, v, *shared, lo, mid, q_len, k_len, qk_scale, BLOCK_M, True, CAUSAL, UPCAST,
        INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = _attn_bwd_dkdv_inner(
        dk, dv, k, v, *shared, mid, q_full, q_len, k_len, qk_scale, BLOCK_M, False, CAUSAL,
        UPCAST, INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = _attn_bwd_dkdv_inner(
        dk, dv, k, v, *shared, q_full, q_len, q_len, k_len, qk_scale, BLOCK_M, True, CAUSAL,
        UPCAST, INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * k_len * head_dim + cols[:, None] * head_dim + offs_d[None, :]
    out_mask = (cols[:, None] < k_len) & d_mask[None, :]
    tl.store(DK + out_offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=out_mask)


def _attn_bwd_dq_inner(
    dq, q, do, lse, delta, k_base, v_base,
    stride_kn, stride_kk, stride_vn, stride_vk,
    rows, row_ok, offs_n, offs_d, d_mask, lo, hi, kv_len, q_len, k_len, qk_scale,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # Accumulate dQ of this program's queries over the key blocks lo, ..., < hi.
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < kv_len
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kk
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk
        if MASKED:
            k = tl.load(k_ptrs, mask=col_ok[:, None] & d_mask[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=col_ok[:, None] & d_mask[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs, mask=d_mask[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=d_mask[None, :], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale
        qk = qk - lse[:, None] * 1.4426950408889634
        if MASKED:
            keep = col_ok[None, :] & row_ok[:, None]
            if CAUSAL:
                keep = keep & (cols[None, :] <= rows[:, None] + (k_len - q_len))
            qk = tl.where(keep, qk, float("-inf"))
        p = tl.math.exp2(qk)  # P, recomputed from the log-sum-exp
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
        ds = p * (dp - delta[:, None])
        ds_low = ds.to(k_base.dtype.element_ty)
        if UPCAST:
            ds_low = ds_low.to(tl.float32)
        dq += tl.dot(ds_low, k, input_precision=INPUT_PRECISION)  # dQ = dS K (times scale)
    return dq


def _attn_bwd_dq(
    Q, K, V, DO, LSE, Delta, DQ, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    num_heads, q_len, k_len, head_dim: tl.constexpr, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    # One program owns BLOCK_M queries of one (batch, head) and loops over the key blocks.
    # DQ is a contiguous (batch, num_heads, q_len, head_dim) tensor.
    start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    d_mask = offs_d < head_dim
    row_ok = rows < q_len
    q_mask = row_ok[:, None] & d_mask[None, :]
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh
    q = tl.load(q_ptrs + rows[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=q_mask)
    do_ptrs = DO + off_z * stride_doz + off_h * stride_doh
    do = tl.load(do_ptrs + rows[:, None] * stride_dom + offs_d[None, :] * stride_dok, mask=q_mask)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse = tl.load(LSE + off_hz * q_len + rows, mask=row_ok, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)  # rows that see no key: every P is 0
    delta = tl.load(Delta + off_hz * q_len + rows, mask=row_ok, other=0.0)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    kv_len = k_len
    if HAS_VALID_LENS:
        kv_len = tl.minimum(tl.load(ValidLens + off_z), k_len)
    # As in the forward: key blocks [0, full) need no mask, [full, hi) do.
    full = kv_len // BLOCK_N * BLOCK_N
    hi = kv_len
    if CAUSAL:
        full = tl.minimum(full, tl.maximum(start_m + 1 + k_len - q_len, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(hi, start_m + BLOCK_M + k_len - q_len)
    qk_scale = sm_scale * 1.4426950408889634
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    shared = (
        q, do, lse, delta, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        rows, row_ok, offs_n, offs_d, d_mask,
    )  # fmt: skip
    dq = _attn_bwd_dq_inner(
        dq, *shared, 0, full, kv_len, q_len, k_len, qk_scale, BLOCK_N, False, CAUSAL, UPCAST,
        INPUT_PRECISION,
    )  # fmt: skip
    dq = _attn_bwd_dq_inner(
        dq, *shared, full, hi, kv_len, q_len, k_len, qk_scale, BLOCK_N, True, CAUSAL, UPCAST,
        INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * q_len * head_dim + rows[:, None] * head_dim + offs_d[None, :]
    tl.store(DQ + out_offs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


# --8<-- [end:triton_backward_kernels]

_KERNEL_HELPERS |= {
    "_attn_bwd_dkdv_inner": _attn_bwd_dkdv_inner,
    "_attn_bwd_dq_inner": _attn_bwd_dq_inner,
}


def _triton_interpreting() -> bool:
    """Whether Triton would run kernels under its CPU interpreter (``TRITON_INTERPRET=1``)."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def _triton_library_interpreted() -> bool:
    """Whether triton.language was imported in interpreter mode (its ``tl.max`` can run)."""
    import triton.language
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(triton.language.max, InterpretedFunction)


class _InterpreterLanguage:
    """``triton.language`` whose library functions are rebuilt for the interpreter.

    Used only when the interpreter is requested after Triton was imported in compiled mode:
    Triton's own ``@triton.jit`` library functions (``tl.max``, ``tl.sum``, ``tl.zeros``) are
    then compiled-mode functions that cannot run on a CPU, so each is wrapped again as an
    interpreted function. Every other name is looked up on ``triton.language`` at call time, so
    the builtins the interpreter patches while a kernel runs are the ones the kernel gets.
    """

    def __init__(self) -> None:
        import triton.language

        self._language = triton.language
        self._rebuilt: dict[str, object] = {}

    def __getattr__(self, name: str):
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        value = getattr(self._language, name)
        if not isinstance(value, JITFunction):
            return value
        if name not in self._rebuilt:
            self._rebuilt[name] = InterpretedFunction(value.fn)
        return self._rebuilt[name]


def _bind_language(interpret: bool) -> None:
    """Point the kernels' global ``tl`` at the right ``triton.language`` for this launch."""
    global tl, _triton_language
    import triton.language

    _triton_language = triton.language  # the interpreter looks for the module in the globals
    if interpret and not _triton_library_interpreted():
        tl = _interpreter_language()
    else:
        tl = triton.language


def _bind(kernels: SimpleNamespace, interpret: bool) -> None:
    """Before a launch: bind ``tl`` and the helpers' global names to this mode's versions."""
    _bind_language(interpret)
    globals().update(kernels.helpers)  # the kernels call helpers by their global names


@functools.cache
def _interpreter_language() -> _InterpreterLanguage:
    return _InterpreterLanguage()


def _triton_block_sizes(interpret: bool, dtype: torch.dtype) -> tuple[int, int] | None:
    """Block sizes (BLOCK_M, BLOCK_N) for a Triton launch, chosen without asking any GPU.

    Under the interpreter, small fixed blocks keep the CPU emulation quick. On a GPU, float32
    products run in exact float32 on the CUDA cores, where large tiles only make compilation
    slow: fixed 64 x 32 tiles. For 16-bit inputs, None means "let the autotuner choose among
    `_autotune_configs`".
    """
    if interpret:
        return (16, 16)
    return (64, 32) if dtype == torch.float32 else None


def _autotune_configs(kind: str) -> list:
    """A few launch configurations per kernel, from the Triton fused-attention tutorial."""
    import triton

    shapes = {
        "fwd": [(128, 64, 8, 3), (128, 128, 8, 3), (128, 32, 4, 4), (64, 64, 4, 3), (64, 32, 4, 4)],
        "dkdv": [(32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 4)],
        "dq": [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 4)],
    }[kind]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
        for m, n, w, s in shapes
    ]


@functools.cache
def _load_triton_kernels(interpret: bool) -> SimpleNamespace:
    """Import Triton and build the kernels for one mode (compiled, or interpreted on a CPU).

    Autotuned variants are built only in compiled mode on a machine with a CUDA device; under
    the interpreter nothing here queries a driver or autotunes.
    """
    import triton

    _bind_language(interpret)
    kernels = SimpleNamespace(
        helpers={name: triton.jit(function) for name, function in _KERNEL_HELPERS.items()},
        fwd=triton.jit(_attn_fwd),
        dkdv=triton.jit(_attn_bwd_dkdv),
        dq=triton.jit(_attn_bwd_dq),
        tuned=None,
    )
    if not interpret and torch.cuda.is_available():
        key = ["q_len", "k_len", "head_dim", "CAUSAL", "HAS_VALID_LENS"]
        kernels.tuned = SimpleNamespace(
            fwd=triton.autotune(_autotune_configs("fwd"), key=key)(triton.jit(_attn_fwd)),
            dkdv=triton.autotune(_autotune_configs("dkdv"), key=key)(triton.jit(_attn_bwd_dkdv)),
            dq=triton.autotune(_autotune_configs("dq"), key=key)(triton.jit(_attn_bwd_dq)),
        )
    return kernels


def _triton_setup(
    q: torch.Tensor, block_m: int | None, block_n: int | None
) -> tuple[SimpleNamespace, dict]:
    """Pick the kernels for the current mode and the launch options shared by every kernel."""
    try:
        interpret = _triton_interpreting()
    except ImportError as error:
        raise ImportError(
            "backend='triton' needs the triton package (pip install triton); "
            "use backend='reference' without it"
        ) from error
    if not interpret and not q.is_cuda:
        raise RuntimeError(
            f"backend='triton' needs CUDA tensors, got tensors on {q.device}; set the "
            "environment variable TRITON_INTERPRET=1 to run the kernels on a CPU (slowly)"
        )
    if interpret and q.is_cuda:
        raise RuntimeError("TRITON_INTERPRET=1 runs kernels on CPU tensors; move q, k, v to CPU")
    kernels = _load_triton_kernels(interpret)
    _bind(kernels, interpret)
    head_dim = q.shape[-1]
    options = {
        "HEAD_DIM": max(16, 1 << (head_dim - 1).bit_length()),  # next power of two
        "UPCAST": interpret,
        # float32 inputs: exact float32 products (no TF32); other dtypes: Triton's default.
        "INPUT_PRECISION": "ieee" if q.dtype == torch.float32 else None,
    }
    if block_m is None and block_n is None:
        fixed = _triton_block_sizes(interpret, q.dtype)
    else:
        default = _triton_block_sizes(True, q.dtype)
        fixed = (block_m or default[0], block_n or default[1])
    if fixed is None:  # compiled, on a CUDA device: the autotuner picks the block sizes
        return kernels.tuned, options
    options.update(BLOCK_M=fixed[0], BLOCK_N=fixed[1])
    if not interpret:
        options.update(num_warps=4, num_stages=2)
    return kernels, options


def _strides(tensor: torch.Tensor) -> tuple[int, int, int, int]:
    return tuple(tensor.stride())


# --8<-- [start:triton_launch]
def triton_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the Triton forward kernel: one program per (query block, batch x head).

    Args:
        q: Queries (CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``).
        k: Keys.
        v: Values.
        causal: Bottom-right causal masking.
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per program (default: `_triton_block_sizes`: autotuned on a GPU for
            16-bit inputs, 64 for float32, 16 under the interpreter).
        block_n: Keys per inner step (default: autotuned, 32 for float32, 16 interpreted).

    Returns:
        The output (inputs' dtype) and the float32 natural log-sum-exp.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """
    kernels, options = _triton_setup(q, block_m, block_n)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, num_heads, q_len, dtype=torch.float32, device=q.device)
    lens = _valid_lens_arg(valid_lens, q)
    grid = lambda meta: (_cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    kernels.fwd[grid](
        q, k, v, out, lse, lens,
        *_strides(q), *_strides(k), *_strides(v), *_strides(out),
        num_heads, q_len, k_len, head_dim, scale,
        CAUSAL=causal, HAS_VALID_LENS=valid_lens is not None, **options,
    )  # fmt: skip
    return out, lse


def triton_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    causal: bool = False,
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the Triton backward: D = rowsum(dO * O), then the dK/dV and the dQ kernels.

    Args:
        q: Queries saved by the forward pass.
        k: Keys.
        v: Values.
        out: The forward output.
        lse: The forward log-sum-exp (float32).
        grad_out: Gradient of the loss with respect to `out`.
        causal: Bottom-right causal masking.
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per block (default: as in `triton_attention_forward`).
        block_n: Keys per block.

    Returns:
        The gradients with respect to `q`, `k` and `v`, in the inputs' dtype.

    Shapes:
        - q, out, grad_out: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - lse: (batch, num_heads, q_len)
        - returns: the shapes of q, k and v
    """
    kernels, options = _triton_setup(q, block_m, block_n)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    delta = (grad_out.float() * out.float()).sum(-1)  # (batch, num_heads, q_len)
    grad_q = torch.empty_like(q, memory_format=torch.contiguous_format)
    grad_k = torch.empty_like(k, memory_format=torch.contiguous_format)
    grad_v = torch.empty_like(v, memory_format=torch.contiguous_format)
    lens = _valid_lens_arg(valid_lens, q)
    common = (
        *_strides(q), *_strides(k), *_strides(v), *_strides(grad_out),
        num_heads, q_len, k_len, head_dim, scale,
    )  # fmt: skip
    flags = {"CAUSAL": causal, "HAS_VALID_LENS": valid_lens is not None, **options}
    grid_kv = lambda meta: (_cdiv(k_len, meta["BLOCK_N"]), batch * num_heads)  # noqa: E731
    kernels.dkdv[grid_kv](q, k, v, grad_out, lse, delta, grad_k, grad_v, lens, *common, **flags)
    grid_q = lambda meta: (_cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    kernels.dq[grid_q](q, k, v, grad_out, lse, delta, grad_q, lens, *common, **flags)
    return grad_q, grad_k, grad_v


# --8<-- [end:triton_launch]


def _cdiv(numerator: int, denominator: int) -> int:
    """Ceiling division, as ``triton.cdiv``."""
    return -(-numerator // denominator)


def _valid_lens_arg(valid_lens: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """``valid_lens`` as int32 on q's device, or a one-element placeholder the kernel ignores."""
    if valid_lens is None:
        return torch.zeros(1, dtype=torch.int32, device=q.device)
    return valid_lens.to(device=q.device, dtype=torch.int32).contiguous()


class TritonAttention(torch.autograd.Function):
    """Autograd wrapper of the Triton kernels, with the same call as `TiledAttention`.

    ``out, lse = TritonAttention.apply(q, k, v, causal, valid_lens, scale, block_m, block_n)``
    takes the arguments of `triton_attention_forward`, in that order (CUDA tensors, or CPU
    tensors under ``TRITON_INTERPRET=1``), and returns the output and the float32 log-sum-exp,
    which is not differentiable. Its backward pass is `triton_attention_backward`.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, valid_lens, scale, block_m, block_n):  # noqa: D102
        out, lse = triton_attention_forward(q, k, v, causal, valid_lens, scale, block_m, block_n)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, valid_lens, scale, block_m, block_n)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # noqa: D102
        q, k, v, out, lse = ctx.saved_tensors
        grads = triton_attention_backward(q, k, v, out, lse, grad_out.contiguous(), *ctx.options)
        return (*grads, None, None, None, None, None)


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


# --8<-- [start:flash_attention]
def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    backend: str = "auto",
    valid_lens: torch.Tensor | None = None,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Exact attention without the (q_len, k_len) matrix: FlashAttention's algorithm.

    Args:
        q: Queries.
        k: Keys.
        v: Values.
        causal: Bottom-right causal masking: query ``i`` sees key ``j`` when
            ``j <= i + k_len - q_len`` (PyTorch's ``is_causal`` is top-left: ``j <= i``).
        backend: ``"auto"`` (the Triton kernel for CUDA tensors when Triton is installed, the
            tiled reference otherwise), ``"reference"`` (pure PyTorch, CPU or GPU) or
            ``"triton"`` (CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``).
        valid_lens: Number of real keys per sequence (a key padding mask).
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per block (reference default 128; Triton default autotuned on a GPU
            for 16-bit inputs, 64 for float32 and 16 under the interpreter).
        block_n: Keys per block (reference default 128; Triton default autotuned on a GPU for
            16-bit inputs, 32 for float32 and 16 under the interpreter).
        return_lse: Also return the log-sum-exp of each query row.

    Returns:
        The attention output, and the log-sum-exp if `return_lse`.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - valid_lens: (batch,)
        - returns: (batch, num_heads, q_len, head_dim) [and (batch, num_heads, q_len)]

    Raises:
        ValueError: For shapes, dtypes, head dims, block sizes or a backend that do not fit.
        RuntimeError: For ``backend="triton"`` on CPU tensors without ``TRITON_INTERPRET=1``.
    """
    if backend not in ("auto", "reference", "triton"):
        raise ValueError(f"backend must be 'auto', 'reference' or 'triton', got {backend!r}")
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    if backend == "auto":
        fits = q.dtype in _TRITON_DTYPES and _fits_triton_head_dim(q)
        backend = "triton" if q.is_cuda and fits and _triton_available() else "reference"
    if backend == "reference":
        _check_inputs(q, k, v, valid_lens, _REFERENCE_DTYPES)
        out, lse = TiledAttention.apply(
            q, k, v, causal, valid_lens, scale, block_m or 128, block_n or 128
        )
    else:
        _check_inputs(q, k, v, valid_lens, _TRITON_DTYPES)
        if not _fits_triton_head_dim(q):
            low, high = _TRITON_HEAD_DIMS
            raise ValueError(
                f"backend='triton' needs head_dim in [{low}, {high}], got q of shape "
                f"{tuple(q.shape)} (use backend='reference' for other sizes)"
            )
        for name, size in (("block_m", block_m), ("block_n", block_n)):
            if size is not None and (size < 16 or size & (size - 1)):
                raise ValueError(f"{name} must be a power of two >= 16 for Triton, got {size}")
        out, lse = TritonAttention.apply(q, k, v, causal, valid_lens, scale, block_m, block_n)
    return (out, lse) if return_lse else out


# --8<-- [end:flash_attention]


def _fits_triton_head_dim(q: torch.Tensor) -> bool:
    low, high = _TRITON_HEAD_DIMS
    return q.dim() == 4 and low <= q.shape[-1] <= high


# --8<-- [start:measure_tensor_memory]
class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of every tensor storage that PyTorch operators create while active.

    Each new storage is added when an operator returns it and subtracted when Python frees it
    (a `weakref.finalize` on the storage object), so ``peak`` is the most memory that tensors
    made inside the mode held at one time. Storages of the inputs, and views of them, are not
    counted. Scratch space an operator uses internally and frees before returning is not seen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.largest = 0
        self._tracked: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = tree_leaves((args, kwargs))
        inputs = {id(t.untyped_storage()) for t in leaves if isinstance(t, torch.Tensor)}
        result = func(*args, **kwargs)
        for tensor in tree_leaves(result):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = id(storage)
            if key in inputs or key in self._tracked:
                continue
            nbytes = storage.nbytes()
            self._tracked.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            self.largest = max(self.largest, nbytes)
            weakref.finalize(storage, self._release, key, nbytes)
        return result


def measure_tensor_memory(
    function: Callable, *args: object, **kwargs: object
) -> tuple[object, int, int]:
    """Run ``function(*args, **kwargs)`` and measure the tensor memory it allocates.

    The count is exact and deterministic: it adds the size of every tensor storage an operator
    returns and subtracts it when the storage is freed. It leaves out the inputs, memory
    that operators use internally and free before returning, and the allocator's own overhead.

    Args:
        function: The function to run.
        *args: Its positional arguments.
        **kwargs: Its keyword arguments.

    Returns:
        The function's result, the peak bytes held by new tensors at one time, and the size
        in bytes of the largest single tensor allocated.
    """
    with _LiveTensorBytes() as counter:
        result = function(*args, **kwargs)
    return result, counter.peak, counter.largest


# --8<-- [end:measure_tensor_memory]
