"""FlashAttention as Triton kernels: one forward kernel and the two kernels of the backward.

Plain Triton, laid out like Triton's fused-attention tutorial: module-level ``@triton.jit``
functions, ``import triton.language as tl``, and the tutorial's names (``BLOCK_M`` queries and
``BLOCK_N`` keys per tile, ``HEAD_DIM``, the running maximum ``m_i``, the running sum ``l_i``
and the accumulator ``acc``). One program computes one tile of one (batch, head) pair:

- `attn_fwd` walks over the key blocks of its ``BLOCK_M`` queries with `attn_fwd_inner` (the
  online softmax) and writes the output and the natural log-sum-exp of each query row.
- `attn_bwd_dkdv` owns ``BLOCK_N`` keys and accumulates their dK and dV over the query blocks
  (`attn_bwd_dkdv_inner`); `attn_bwd_dq` owns ``BLOCK_M`` queries and accumulates their dQ
  over the key blocks (`attn_bwd_dq_inner`). No two programs write the same rows, so no
  atomic additions are needed (FlashAttention-2's split).

Conventions of every kernel:

- The scores are computed in base 2, since ``exp2`` is one GPU instruction: the launcher passes
  ``qk_scale = scale * LOG2_E``, and the log-sum-exp, stored in natural units, is converted with
  the same constant `LOG2_E`.
- Causal masking is aligned bottom-right (see `attention_book.masking`): query ``i`` sees key
  ``j`` when ``j <= i + k_len - q_len``. ``ValidLens`` holds the number of real keys of each
  sequence when ``HAS_VALID_LENS``. A row that sees no key gets output 0 and log-sum-exp
  ``-inf``, never NaN.
- Each loop runs in parts: tiles that every query of the program sees whole are processed with
  ``MASKED=False`` (no mask is computed); the tiles at the ragged ends and on the causal
  diagonal with ``MASKED=True``. ``MASKED`` is a compile-time constant, so each part is
  compiled without the other's code.
- ``HEAD_DIM`` is ``head_dim`` rounded up to a power of two; the extra columns are masked.
- ``UPCAST`` (set under Triton's interpreter, whose ``tl.dot`` does not take bfloat16) turns
  tiles into float32 before each ``tl.dot``, after they were rounded to the input dtype.

Triton decides when this module is imported whether ``triton.jit`` builds compiled kernels or
interpreted ones (``TRITON_INTERPRET=1``, read when Triton is first imported). The package
imports this module only when a Triton backend is first used; see `attention_book.flash`.
"""

import triton
import triton.language as tl

__all__ = [
    "LOG2_E",
    "attn_bwd_dkdv",
    "attn_bwd_dkdv_inner",
    "attn_bwd_dq",
    "attn_bwd_dq_inner",
    "attn_fwd",
    "attn_fwd_inner",
    "key_block_ranges",
    "num_real_keys",
]

#: log2(e): ``exp(x) == exp2(x * LOG2_E)``. The launcher folds it into the scale once.
LOG2_E = tl.constexpr(1.4426950408889634)


# --8<-- [start:triton_forward_kernel]
@triton.jit
def num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS: tl.constexpr):
    """How many keys sequence ``off_z`` has before its padding: ``min(valid_lens, k_len)``."""
    kv_len = k_len
    if HAS_VALID_LENS:
        kv_len = tl.minimum(tl.load(ValidLens + off_z), k_len)
    return kv_len


@triton.jit
def key_block_ranges(
    start_m, kv_len, q_len, k_len,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    """Split the keys of the queries ``start_m, ..., start_m + BLOCK_M - 1`` into two ranges.

    Key blocks in ``[0, full)`` are seen whole by every one of these queries, so they need no
    mask; those in ``[full, hi)`` need one. Keys from ``hi`` on are padding, or lie above the
    bottom-right causal diagonal for all these queries (query ``i`` sees keys up to
    ``i + k_len - q_len``), and are skipped.
    """
    full = kv_len // BLOCK_N * BLOCK_N
    hi = kv_len
    if CAUSAL:
        full = tl.minimum(full, tl.maximum(start_m + 1 + k_len - q_len, 0) // BLOCK_N * BLOCK_N)
        hi = tl.minimum(hi, start_m + BLOCK_M + k_len - q_len)
    return full, hi


@triton.jit
def attn_fwd_inner(
    acc, l_i, m_i, q, k_base, v_base,
    stride_kn, stride_kk, stride_vn, stride_vk,
    offs_m, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """The online softmax of one block of queries over the key blocks ``lo, ..., < hi``."""
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


@triton.jit
def attn_fwd(
    Q, K, V, Out, LSE, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    num_heads, q_len, k_len, qk_scale,
    head_dim: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Forward pass: ``BLOCK_M`` rows of the output and of the log-sum-exp of one head."""
    start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    d_mask = offs_d < head_dim  # all true, and folded away, when head_dim == HEAD_DIM
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh
    q_ptrs += offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < q_len) & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    kv_len = num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS=HAS_VALID_LENS)
    full, hi = key_block_ranges(
        start_m, kv_len, q_len, k_len, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL
    )  # key blocks [0, full) need no mask, [full, hi) do
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        offs_m, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo=0, hi=full,
        BLOCK_N=BLOCK_N, MASKED=False, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        offs_m, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo=full, hi=hi,
        BLOCK_N=BLOCK_N, MASKED=True, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows that saw no key: output 0, lse -inf
    acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) / LOG2_E)
    tl.store(LSE + off_hz * q_len + offs_m, lse, mask=offs_m < q_len)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh
    o_ptrs += offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    o_mask = (offs_m[:, None] < q_len) & d_mask[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=o_mask)


# --8<-- [end:triton_forward_kernel]


# --8<-- [start:triton_backward_kernels]
@triton.jit
def attn_bwd_dkdv_inner(
    dk, dv, k, v, q_base, do_base, LSE, Delta, off_hz,
    stride_qm, stride_qk, stride_dom, stride_dok,
    offs_m, offs_d, d_mask, cols, col_ok, q_len, k_len, qk_scale, lo, hi,
    BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Add to dK and dV of one block of keys the query blocks ``lo, ..., < hi``."""
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
        qk_t = qk_t - lse[None, :] * LOG2_E
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


@triton.jit
def attn_bwd_dkdv(
    Q, K, V, DO, LSE, Delta, DK, DV, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    num_heads, q_len, k_len, qk_scale, sm_scale,
    head_dim: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Backward pass: dK and dV of ``BLOCK_N`` keys of one head, into contiguous DK, DV."""
    start_n = tl.program_id(0) * BLOCK_N
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_m = tl.arange(0, BLOCK_M)
    cols = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    d_mask = offs_d < head_dim
    kv_len = num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS=HAS_VALID_LENS)
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
    dk, dv = attn_bwd_dkdv_inner(
        dk, dv, k, v, q_base, do_base, LSE, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, q_len, k_len, qk_scale, lo=lo,
        hi=mid, BLOCK_M=BLOCK_M, MASKED=True, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = attn_bwd_dkdv_inner(
        dk, dv, k, v, q_base, do_base, LSE, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, q_len, k_len, qk_scale, lo=mid,
        hi=q_full, BLOCK_M=BLOCK_M, MASKED=False, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = attn_bwd_dkdv_inner(
        dk, dv, k, v, q_base, do_base, LSE, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, q_len, k_len, qk_scale, lo=q_full,
        hi=q_len, BLOCK_M=BLOCK_M, MASKED=True, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * k_len * head_dim + cols[:, None] * head_dim + offs_d[None, :]
    out_mask = (cols[:, None] < k_len) & d_mask[None, :]
    tl.store(DK + out_offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def attn_bwd_dq_inner(
    dq, q, do, lse, delta, k_base, v_base,
    stride_kn, stride_kk, stride_vn, stride_vk,
    rows, row_ok, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Add to dQ of one block of queries the key blocks ``lo, ..., < hi``."""
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
        qk = qk - lse[:, None] * LOG2_E
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


@triton.jit
def attn_bwd_dq(
    Q, K, V, DO, LSE, Delta, DQ, ValidLens,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    num_heads, q_len, k_len, qk_scale, sm_scale,
    head_dim: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Backward pass: dQ of ``BLOCK_M`` queries of one head, into a contiguous DQ."""
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
    kv_len = num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS=HAS_VALID_LENS)
    full, hi = key_block_ranges(
        start_m, kv_len, q_len, k_len, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL
    )  # as in the forward: key blocks [0, full) need no mask, [full, hi) do
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    dq = attn_bwd_dq_inner(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        rows, row_ok, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo=0, hi=full,
        BLOCK_N=BLOCK_N, MASKED=False, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dq = attn_bwd_dq_inner(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        rows, row_ok, offs_n, offs_d, d_mask, kv_len, q_len, k_len, qk_scale, lo=full, hi=hi,
        BLOCK_N=BLOCK_N, MASKED=True, CAUSAL=CAUSAL, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * q_len * head_dim + rows[:, None] * head_dim + offs_d[None, :]
    tl.store(DQ + out_offs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_mask)


# --8<-- [end:triton_backward_kernels]
