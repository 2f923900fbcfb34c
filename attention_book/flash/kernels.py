"""FlashAttention as Triton kernels: one forward kernel and the three kernels of the backward.

Plain Triton, laid out like Triton's fused-attention tutorial: module-level ``@triton.jit``
functions, ``import triton.language as tl``, and the tutorial's names (``BLOCK_M`` queries and
``BLOCK_N`` keys per tile, ``HEAD_DIM``, the running maximum ``m_i``, the running sum ``l_i``
and the accumulator ``acc``). One program computes one tile of one (batch, head) pair:

- `attn_fwd` walks over the key blocks of its ``BLOCK_M`` queries with `attn_fwd_inner` (the
  online softmax) and writes the output and the natural log-sum-exp of each query row. It
  reads and writes through tensor descriptors: on Hopper GPUs each tile is one copy by the
  Tensor Memory Accelerator (TMA), and rows or columns outside the tensor read as zeros and
  are not written, so the loads need no masks.
- `attn_bwd_preprocess` computes ``D = rowsum(dO * O)`` and the log-sum-exp in base 2.
- `attn_bwd_dkdv` owns ``BLOCK_N`` keys and accumulates their dK and dV over the query blocks
  (`attn_bwd_dkdv_inner`); `attn_bwd_dq` owns ``BLOCK_M`` queries and accumulates their dQ
  over the key blocks (`attn_bwd_dq_inner`). No two programs write the same rows, so no
  atomic additions are needed.

Conventions of every kernel:

- The scores are computed in base 2, since ``exp2`` is one GPU instruction: the launcher passes
  ``qk_scale = scale * LOG2_E``, and the kernels multiply each raw score by it inside the
  exponent, ``exp2(qk * qk_scale - m)``, one fused multiply-add. The running maximum is that
  of the raw scores times ``qk_scale`` (the scale is positive, so the maximum commutes with it).
- Causal masking is aligned bottom-right (see `attention_book.masking`): query ``i`` sees key
  ``j`` when ``j <= i + k_len - q_len``. ``ValidLens`` holds the number of real keys of each
  sequence when ``HAS_VALID_LENS``. A row that sees no key gets output 0 and log-sum-exp
  ``-inf``, never NaN.
- Each loop runs in parts: tiles that every query of the program sees whole are processed with
  ``MASKED=False`` (no mask is computed); the tiles at the ragged ends and on the causal
  diagonal with ``MASKED=True``. ``MASKED`` is a compile-time constant, so each part is
  compiled without the other's code.
- ``HEAD_DIM`` is ``head_dim`` rounded up to a power of two. The forward's descriptors know the
  true ``head_dim``; the backward masks the extra columns only when there are any
  (``head_dim < HEAD_DIM``, decided at compile time).
- ``UPCAST`` (set under Triton's interpreter, whose ``tl.dot`` does not take bfloat16) turns
  tiles into float32 before each ``tl.dot``, after they were rounded to the input dtype.

Triton decides when this module is imported whether ``triton.jit`` builds compiled kernels or
interpreted ones (``TRITON_INTERPRET=1``, read when Triton is first imported). The package
imports this module only when a Triton backend is first used; see `attention_book.flash`.
"""

import triton
import triton.language as tl

__all__ = [
    "LN_2",
    "LOG2_E",
    "NO_KEY",
    "attn_bwd_dkdv",
    "attn_bwd_dkdv_inner",
    "attn_bwd_dq",
    "attn_bwd_dq_inner",
    "attn_bwd_preprocess",
    "attn_fwd",
    "attn_fwd_inner",
    "key_block_ranges",
    "load_rows",
    "num_real_keys",
]

#: log2(e): ``exp(x) == exp2(x * LOG2_E)``. The launcher folds it into the scale once.
LOG2_E = tl.constexpr(1.4426950408889634)
#: ln(2) = 1 / log2(e): a base-2 log-sum-exp times LN_2 is the natural one.
LN_2 = tl.constexpr(0.6931471805599453)
#: Where the forward's running maximum starts: below any real score times the scale, finite.
NO_KEY = tl.constexpr(-1.0e38)


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
    acc, l_i, m_i, q, desc_k, desc_v, off_z, off_h,
    offs_n, last_key, kv_len, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr,
    HAS_VALID_LENS: tl.constexpr, UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Online softmax over the key blocks ``lo, lo + BLOCK_N, ... < hi`` of one query block."""
    for start_n in range(lo, hi, BLOCK_N):
        # One tile of keys, (BLOCK_N, HEAD_DIM): keys past k_len read as zeros.
        k = desc_k.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION)  # raw scores q . k
        if MASKED:  # keys past each query's last key get no weight
            qk = tl.where((start_n + offs_n)[None, :] <= last_key[:, None], qk, float("-inf"))
        # New running max, in the units of exp2: the scale multiplies one number per row.
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])  # the scale folded into the exponent
        alpha = tl.math.exp2(m_i - m_new)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([off_z, off_h, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        if MASKED and HAS_VALID_LENS:  # padding keys may hold anything, even NaN: zero them
            v = tl.where((start_n + offs_n)[:, None] < kv_len, v, 0.0)
        p = p.to(v.dtype)  # P is rounded to the input dtype, as the GPU's MMA takes it
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc, input_precision=INPUT_PRECISION)
        l_i = l_i * alpha + l_ij
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd(
    desc_q, desc_k, desc_v, desc_o, LSE, ValidLens,
    num_heads, q_len, k_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_VALID_LENS: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Forward pass: ``BLOCK_M`` rows of the output and of the log-sum-exp of one head.

    ``desc_q, desc_k, desc_v, desc_o`` are tensor descriptors of the four (batch, num_heads,
    seq_len, head_dim) tensors, with blocks of ``[1, 1, BLOCK_M or BLOCK_N, HEAD_DIM]``:
    one tile never crosses from one head into the next.
    """
    start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([off_z, off_h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    if UPCAST:
        q = q.to(tl.float32)
    kv_len = num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS=HAS_VALID_LENS)
    full, hi = key_block_ranges(
        start_m, kv_len, q_len, k_len, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL
    )  # key blocks [0, full) need no mask, [full, hi) do
    last_key = tl.zeros([BLOCK_M], dtype=tl.int32) + (kv_len - 1)  # of each query
    if CAUSAL:  # or the bottom-right diagonal, if it comes first
        last_key = tl.minimum(last_key, offs_m + (k_len - q_len))
    # The running max starts at NO_KEY, not -inf: a row whose keys are all masked so far then
    # subtracts a finite number, and its weights exp2(-inf - NO_KEY) are 0, with no NaN.
    m_i = tl.full([BLOCK_M], NO_KEY, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, desc_k, desc_v, off_z, off_h, offs_n, last_key, kv_len, qk_scale,
        lo=0, hi=full, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, MASKED=False,
        HAS_VALID_LENS=HAS_VALID_LENS, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = attn_fwd_inner(
        acc, l_i, m_i, q, desc_k, desc_v, off_z, off_h, offs_n, last_key, kv_len, qk_scale,
        lo=full, hi=hi, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, MASKED=True,
        HAS_VALID_LENS=HAS_VALID_LENS, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # rows that saw no key: output 0, lse -inf
    acc = acc / l_safe[:, None]
    lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.math.log2(l_safe)) * LN_2)
    tl.store(LSE + off_hz * q_len + offs_m, lse, mask=offs_m < q_len)
    out = acc.to(desc_o.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM)
    desc_o.store([off_z, off_h, start_m, 0], out)  # rows past q_len are not written


# --8<-- [end:triton_forward_kernel]


# --8<-- [start:triton_backward_kernels]
@triton.jit
def load_rows(ptrs, row_ok, d_mask, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """Load a (rows, HEAD_DIM) tile, masking only what may fall outside the tensor."""
    if MASK_ROWS and MASK_COLS:
        tile = tl.load(ptrs, mask=row_ok[:, None] & d_mask[None, :], other=0.0)
    elif MASK_ROWS:
        tile = tl.load(ptrs, mask=row_ok[:, None], other=0.0)
    elif MASK_COLS:
        tile = tl.load(ptrs, mask=d_mask[None, :], other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit
def attn_bwd_preprocess(
    Out, DO, LSE, Delta, LSE2,
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_doz, stride_doh, stride_dom, stride_dok,
    num_heads, q_len,
    head_dim: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """``Delta = rowsum(dO * O)`` and ``LSE2``, the log-sum-exp in base 2, of ``BLOCK_M`` rows.

    A row that sees no key (log-sum-exp ``-inf``) gets ``LSE2 = 0``: its scores are all
    masked to ``-inf`` in the backward kernels, so its weights ``exp2(-inf - 0)`` are zero.
    """
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = rows < q_len
    mask = row_ok[:, None] & (offs_d[None, :] < head_dim)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh
    o = tl.load(o_ptrs + rows[:, None] * stride_om + offs_d[None, :] * stride_ok, mask=mask)
    do_ptrs = DO + off_z * stride_doz + off_h * stride_doh
    do = tl.load(do_ptrs + rows[:, None] * stride_dom + offs_d[None, :] * stride_dok, mask=mask)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + off_hz * q_len + rows, delta, mask=row_ok)
    lse = tl.load(LSE + off_hz * q_len + rows, mask=row_ok, other=0.0)
    lse2 = tl.where(lse == float("-inf"), 0.0, lse * LOG2_E)
    tl.store(LSE2 + off_hz * q_len + rows, lse2, mask=row_ok)


@triton.jit
def attn_bwd_dkdv_inner(
    dk, dv, k, v, q_base, do_base, LSE2, Delta, off_hz,
    stride_qm, stride_qk, stride_dom, stride_dok,
    offs_m, offs_d, d_mask, cols, col_ok, kv_len, q_len, k_len, qk_scale, lo, hi,
    BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Add to dK and dV of one block of keys the query blocks ``lo, ..., < hi``."""
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + offs_m
        row_ok = rows < q_len
        q_ptrs = q_base + rows[:, None] * stride_qm + offs_d[None, :] * stride_qk
        do_ptrs = do_base + rows[:, None] * stride_dom + offs_d[None, :] * stride_dok
        q = load_rows(q_ptrs, row_ok, d_mask, MASK_ROWS=MASKED, MASK_COLS=not EVEN_D)
        do = load_rows(do_ptrs, row_ok, d_mask, MASK_ROWS=MASKED, MASK_COLS=not EVEN_D)
        if MASKED:
            lse2 = tl.load(LSE2 + off_hz * q_len + rows, mask=row_ok, other=0.0)
            delta = tl.load(Delta + off_hz * q_len + rows, mask=row_ok, other=0.0)
        else:
            lse2 = tl.load(LSE2 + off_hz * q_len + rows)
            delta = tl.load(Delta + off_hz * q_len + rows)
        if UPCAST:
            q = q.to(tl.float32)
            do = do.to(tl.float32)
        # Transposed scores, (BLOCK_N, BLOCK_M): rows are this program's keys.
        qk_t = tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION)
        if MASKED:  # rows past q_len need no mask: their q and dO are zeros, so add nothing
            if CAUSAL:  # the last key each of these queries may see
                last_key = tl.minimum(rows + (k_len - q_len), kv_len - 1)
                qk_t = tl.where(cols[:, None] <= last_key[None, :], qk_t, float("-inf"))
            else:
                qk_t = tl.where(col_ok[:, None], qk_t, float("-inf"))
        p_t = tl.math.exp2(qk_t * qk_scale - lse2[None, :])  # P^T, from the base-2 log-sum-exp
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
    Q, K, V, DO, LSE2, Delta, DK, DV, ValidLens,
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
    EVEN_D: tl.constexpr = head_dim == HEAD_DIM  # no padded columns: no column mask at all
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
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh
    k_ptrs += cols[:, None] * stride_kn + offs_d[None, :] * stride_kk
    k = load_rows(k_ptrs, col_ok, d_mask, MASK_ROWS=True, MASK_COLS=not EVEN_D)
    v_ptrs = V + off_z * stride_vz + off_h * stride_vh
    v_ptrs += cols[:, None] * stride_vn + offs_d[None, :] * stride_vk
    v = load_rows(v_ptrs, col_ok, d_mask, MASK_ROWS=True, MASK_COLS=not EVEN_D)
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
        dk, dv, k, v, q_base, do_base, LSE2, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, kv_len, q_len, k_len, qk_scale, lo=lo,
        hi=mid, BLOCK_M=BLOCK_M, MASKED=True, CAUSAL=CAUSAL, EVEN_D=EVEN_D, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = attn_bwd_dkdv_inner(
        dk, dv, k, v, q_base, do_base, LSE2, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, kv_len, q_len, k_len, qk_scale, lo=mid,
        hi=q_full, BLOCK_M=BLOCK_M, MASKED=False, CAUSAL=CAUSAL, EVEN_D=EVEN_D, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dk, dv = attn_bwd_dkdv_inner(
        dk, dv, k, v, q_base, do_base, LSE2, Delta, off_hz, stride_qm, stride_qk, stride_dom,
        stride_dok, offs_m, offs_d, d_mask, cols, col_ok, kv_len, q_len, k_len, qk_scale, lo=q_full,
        hi=q_len, BLOCK_M=BLOCK_M, MASKED=True, CAUSAL=CAUSAL, EVEN_D=EVEN_D, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * k_len * head_dim + cols[:, None] * head_dim + offs_d[None, :]
    out_mask = (cols[:, None] < k_len) & d_mask[None, :]
    tl.store(DK + out_offs, (dk * sm_scale).to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def attn_bwd_dq_inner(
    dq, q, do, lse2, delta, k_base, v_base,
    stride_kn, stride_kk, stride_vn, stride_vk,
    offs_n, offs_d, d_mask, last_key, kv_len, qk_scale, lo, hi,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, EVEN_D: tl.constexpr, UPCAST: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Add to dQ of one block of queries the key blocks ``lo, ..., < hi``."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < kv_len
        k_ptrs = k_base + cols[:, None] * stride_kn + offs_d[None, :] * stride_kk
        v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk
        k = load_rows(k_ptrs, col_ok, d_mask, MASK_ROWS=MASKED, MASK_COLS=not EVEN_D)
        v = load_rows(v_ptrs, col_ok, d_mask, MASK_ROWS=MASKED, MASK_COLS=not EVEN_D)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION)
        if MASKED:  # rows past q_len are not stored, so only keys need the mask
            qk = tl.where(cols[None, :] <= last_key[:, None], qk, float("-inf"))
        p = tl.math.exp2(qk * qk_scale - lse2[:, None])  # P, from the base-2 log-sum-exp
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
        ds = p * (dp - delta[:, None])
        ds_low = ds.to(k_base.dtype.element_ty)
        if UPCAST:
            ds_low = ds_low.to(tl.float32)
        dq += tl.dot(ds_low, k, input_precision=INPUT_PRECISION)  # dQ = dS K (times scale)
    return dq


@triton.jit
def attn_bwd_dq(
    Q, K, V, DO, LSE2, Delta, DQ, ValidLens,
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
    EVEN_D: tl.constexpr = head_dim == HEAD_DIM
    start_m = tl.program_id(0) * BLOCK_M
    off_hz = tl.program_id(1)
    off_z = off_hz // num_heads
    off_h = off_hz % num_heads
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    d_mask = offs_d < head_dim
    row_ok = rows < q_len
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh
    q_ptrs += rows[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = load_rows(q_ptrs, row_ok, d_mask, MASK_ROWS=True, MASK_COLS=not EVEN_D)
    do_ptrs = DO + off_z * stride_doz + off_h * stride_doh
    do_ptrs += rows[:, None] * stride_dom + offs_d[None, :] * stride_dok
    do = load_rows(do_ptrs, row_ok, d_mask, MASK_ROWS=True, MASK_COLS=not EVEN_D)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    lse2 = tl.load(LSE2 + off_hz * q_len + rows, mask=row_ok, other=0.0)
    delta = tl.load(Delta + off_hz * q_len + rows, mask=row_ok, other=0.0)
    k_base = K + off_z * stride_kz + off_h * stride_kh
    v_base = V + off_z * stride_vz + off_h * stride_vh
    kv_len = num_real_keys(ValidLens, off_z, k_len, HAS_VALID_LENS=HAS_VALID_LENS)
    full, hi = key_block_ranges(
        start_m, kv_len, q_len, k_len, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=CAUSAL
    )  # as in the forward: key blocks [0, full) need no mask, [full, hi) do
    last_key = tl.zeros([BLOCK_M], dtype=tl.int32) + (kv_len - 1)  # of each query
    if CAUSAL:  # or the bottom-right diagonal, if it comes first
        last_key = tl.minimum(last_key, rows + (k_len - q_len))
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    dq = attn_bwd_dq_inner(
        dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        offs_n, offs_d, d_mask, last_key, kv_len, qk_scale, lo=0, hi=full,
        BLOCK_N=BLOCK_N, MASKED=False, EVEN_D=EVEN_D, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    dq = attn_bwd_dq_inner(
        dq, q, do, lse2, delta, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
        offs_n, offs_d, d_mask, last_key, kv_len, qk_scale, lo=full, hi=hi,
        BLOCK_N=BLOCK_N, MASKED=True, EVEN_D=EVEN_D, UPCAST=UPCAST,
        INPUT_PRECISION=INPUT_PRECISION,
    )  # fmt: skip
    out_offs = off_hz * q_len * head_dim + rows[:, None] * head_dim + offs_d[None, :]
    out_mask = row_ok[:, None] & d_mask[None, :]
    tl.store(DQ + out_offs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=out_mask)


# --8<-- [end:triton_backward_kernels]
