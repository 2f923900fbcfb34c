"""`flash_attention`: the one entry point, with its input checks and its choice of backend.

The tiled PyTorch reference (`attention_book.flash.reference`) runs anywhere. The Triton
kernels run on CUDA tensors, or on CPU tensors under Triton's interpreter; their module, and
with it Triton, is imported only when a Triton backend is first used, so that
``import attention_book`` never imports Triton.
"""

from __future__ import annotations

import importlib.util

import torch

from attention_book.flash.reference import TiledAttention
from attention_book.validation import check_feature_size

__all__ = ["flash_attention"]

_REFERENCE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TRITON_HEAD_DIMS = (16, 128)


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
        causal: Causal masking aligned bottom-right: query ``i`` sees key ``j`` when
            ``j <= i + k_len - q_len`` (PyTorch's ``is_causal`` is top-left: ``j <= i``; see
            `attention_book.masking`).
        backend: ``"auto"`` (the Triton kernel for CUDA tensors when Triton is installed, the
            tiled reference otherwise), ``"reference"`` (pure PyTorch, CPU or GPU) or
            ``"triton"`` (CUDA tensors, or CPU tensors under ``TRITON_INTERPRET=1``).
        valid_lens: Number of real keys per sequence (a key padding mask).
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``. The Triton
            kernels need it positive (they take each row's maximum before scaling).
        block_m: Queries per block (reference default 128; Triton default autotuned on a GPU
            for 16-bit inputs, 64 for float32 and 16 under the interpreter).
        block_n: Keys per block (reference default 128; Triton default autotuned on a GPU for
            16-bit inputs, 32 for float32 and 16 under the interpreter).
        return_lse: Also return the log-sum-exp of each query row.

    Returns:
        The attention output, and the log-sum-exp if `return_lse`. Every size but ``head_dim``
        may be 0, with the same answer on both backends: the outputs have the shapes below
        (empty when there is no batch, head or query), a query that sees no key (no keys, a
        valid length of 0, a causal row with ``q_len > k_len``) gets zeros and an lse of
        ``-inf``, and every gradient has its input's shape, zeros where nothing was seen.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - valid_lens: (batch,)
        - returns: (batch, num_heads, q_len, head_dim) [and (batch, num_heads, q_len)]

    Raises:
        ValueError: For shapes, dtypes, head dims (0 included), block sizes, a backend or
            (for Triton) a scale that do not fit.
        ImportError: For ``backend="triton"`` when Triton is not installed.
        RuntimeError: For ``backend="triton"`` when the tensors' device does not fit the mode
            Triton runs in (CPU tensors need ``TRITON_INTERPRET=1`` set before Triton is
            imported; the message says what to do).
    """
    if backend not in ("auto", "reference", "triton"):
        raise ValueError(f"backend must be 'auto', 'reference' or 'triton', got {backend!r}")
    for name, size in (("block_m", block_m), ("block_n", block_n)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    if backend == "auto":
        fits = q.dtype in _TRITON_DTYPES and _fits_triton_head_dim(q)
        backend = "triton" if q.is_cuda and fits and _triton_installed() else "reference"
    if backend == "reference":
        _check_inputs(q, k, v, valid_lens, _REFERENCE_DTYPES)
        out, lse = TiledAttention.apply(
            q, k, v, causal, valid_lens, scale, block_m or 128, block_n or 128
        )
    else:
        _check_triton_inputs(q, k, v, valid_lens, block_m, block_n)
        from attention_book.flash.launch import TritonAttention  # imports Triton

        out, lse = TritonAttention.apply(q, k, v, causal, valid_lens, scale, block_m, block_n)
    return (out, lse) if return_lse else out


# --8<-- [end:flash_attention]


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
    check_feature_size("q", q, "head_dim")
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


def _check_triton_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    valid_lens: torch.Tensor | None,
    block_m: int | None,
    block_n: int | None,
) -> None:
    """The checks of `_check_inputs`, and what the Triton kernels need on top of them."""
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
    if not _triton_installed():
        raise ImportError(
            "backend='triton' needs the triton package (pip install triton); "
            "use backend='reference' without it"
        )


def _fits_triton_head_dim(q: torch.Tensor) -> bool:
    low, high = _TRITON_HEAD_DIMS
    return q.dim() == 4 and low <= q.shape[-1] <= high


def _triton_installed() -> bool:
    """Whether Triton can be imported, found without importing it."""
    return importlib.util.find_spec("triton") is not None
