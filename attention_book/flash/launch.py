"""Launching the Triton kernels, and the autograd Function that joins their two passes.

Importing this module imports Triton and `attention_book.flash.kernels`. Triton reads
``TRITON_INTERPRET`` once, when it is first imported, and builds its own library functions
(``tl.max``, ``tl.sum``) and every ``@triton.jit`` kernel for that mode: compiled for a CUDA GPU,
or interpreted on the CPU. `KERNEL_MODE` records what this process got, and a launch checks
that the tensors fit it; when they do not, the error says which variable to set, and when.

On a GPU, float32 inputs use fixed 64 x 32 tiles and 16-bit inputs let Triton's autotuner
choose among a few configurations of the fused-attention tutorial (`AUTOTUNED`). Under the
interpreter the tiles are 16 x 16 and nothing autotunes or asks a GPU driver anything.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from attention_book.flash import kernels
from attention_book.flash.reference import TiledAttention

__all__ = [
    "AUTOTUNED",
    "KERNEL_MODE",
    "PLAIN",
    "KernelSet",
    "TritonAttention",
    "default_block_sizes",
    "triton_attention_backward",
    "triton_attention_forward",
]


class KernelSet(NamedTuple):
    """The three kernels one attention call launches."""

    fwd: object
    dkdv: object
    dq: object


def _kernel_mode() -> str:
    """How Triton built its library and the kernels: interpreted, compiled, or mixed.

    ``"mixed"`` means that ``TRITON_INTERPRET`` changed between the import of Triton and the
    import of the kernels, so the two were built for different modes and cannot run together.
    """
    modes = {isinstance(function, InterpretedFunction) for function in (tl.max, kernels.attn_fwd)}
    if len(modes) == 2:
        return "mixed"
    return "interpreted" if True in modes else "compiled"


#: How Triton runs the kernels in this process, fixed when Triton and the kernels were imported.
KERNEL_MODE = _kernel_mode()

#: The plain kernels, launched with fixed block sizes.
PLAIN = KernelSet(kernels.attn_fwd, kernels.attn_bwd_dkdv, kernels.attn_bwd_dq)

# Launch configurations (BLOCK_M, BLOCK_N, num_warps, num_stages), from the Triton
# fused-attention tutorial; the autotuner times each one once per tuning key.
_TUNING_CONFIGS = {
    "fwd": [(128, 64, 8, 3), (128, 128, 8, 3), (128, 32, 4, 4), (64, 64, 4, 3), (64, 32, 4, 4)],
    "dkdv": [(32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 4)],
    "dq": [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 4)],
}
_TUNING_KEY = ["q_len", "k_len", "head_dim", "CAUSAL", "HAS_VALID_LENS"]


def _autotuned_kernels() -> KernelSet | None:
    """The kernels wrapped in Triton's autotuner: compiled mode on a machine with a CUDA GPU."""
    if KERNEL_MODE != "compiled" or not torch.cuda.is_available():
        return None
    tuned = {}
    for name, kernel in PLAIN._asdict().items():
        configs = [
            triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
            for m, n, w, s in _TUNING_CONFIGS[name]
        ]
        tuned[name] = triton.autotune(configs, key=_TUNING_KEY)(kernel)
    return KernelSet(**tuned)


#: The autotuned kernels, or None under the interpreter and on machines without a CUDA GPU.
AUTOTUNED = _autotuned_kernels()


def default_block_sizes(dtype: torch.dtype) -> tuple[int, int] | None:
    """Block sizes (BLOCK_M, BLOCK_N) of a launch that gives none, chosen without asking a GPU.

    Under the interpreter, small 16 x 16 tiles keep the CPU emulation quick. On a GPU, float32
    products run in exact float32 on the CUDA cores, where large tiles only make compilation
    slow: 64 x 32. For 16-bit inputs on a GPU, None: the autotuner chooses.

    Args:
        dtype: The inputs' dtype.

    Returns:
        The two block sizes, or None to autotune.
    """
    if KERNEL_MODE == "interpreted":
        return (16, 16)
    return (64, 32) if dtype == torch.float32 else None


def _check_mode(q: torch.Tensor) -> None:
    """Raise a RuntimeError that says what to do when the tensors do not fit `KERNEL_MODE`."""
    restart = (
        "Triton reads TRITON_INTERPRET once, when it is first imported (PyTorch imports it on "
        "some paths of its own), so set it before Python starts (TRITON_INTERPRET=1 python ...) "
        "or at the top of a fresh session, before importing torch"
    )
    if KERNEL_MODE == "mixed":
        raise RuntimeError(
            "backend='triton' cannot run: TRITON_INTERPRET changed after Triton was imported, "
            "so Triton's own functions and this book's kernels were built for different modes "
            f"(one compiled, one interpreted). {restart}."
        )
    if KERNEL_MODE == "interpreted" and q.is_cuda:
        raise RuntimeError(
            "Triton runs under its interpreter in this process (TRITON_INTERPRET=1), which "
            "takes CPU tensors: move q, k, v to the CPU, or start Python without "
            "TRITON_INTERPRET to run the compiled kernels on the GPU"
        )
    if KERNEL_MODE == "compiled" and not q.is_cuda:
        late = (
            " TRITON_INTERPRET=1 is set now, but Triton was imported in compiled mode before."
            if triton.knobs.runtime.interpret
            else ""
        )
        raise RuntimeError(
            f"backend='triton' needs CUDA tensors, got tensors on {q.device}; to run the kernels "
            f"on a CPU (slowly), set the environment variable TRITON_INTERPRET=1.{late} "
            f"{restart}."
        )


class _Launch(NamedTuple):
    """What every kernel of one call gets: the kernels, compile-time flags, block options."""

    kernels: KernelSet
    HEAD_DIM: int
    UPCAST: bool
    INPUT_PRECISION: str | None
    blocks: dict


def _prepare(q: torch.Tensor, block_m: int | None, block_n: int | None) -> _Launch:
    """Check the mode, then choose the kernels and the options shared by all three launches."""
    _check_mode(q)
    interpreted = KERNEL_MODE == "interpreted"
    if block_m is None and block_n is None:
        fixed = default_block_sizes(q.dtype)
    else:
        fixed = (block_m or 16, block_n or 16)
    if fixed is None:  # compiled, on a CUDA device: the autotuner picks the block sizes
        chosen, blocks = AUTOTUNED, {}
    else:
        chosen, blocks = PLAIN, {"BLOCK_M": fixed[0], "BLOCK_N": fixed[1]}
        if not interpreted:
            blocks |= {"num_warps": 4, "num_stages": 2}
    return _Launch(
        kernels=chosen,
        HEAD_DIM=max(16, 1 << (q.shape[-1] - 1).bit_length()),  # next power of two
        UPCAST=interpreted,
        # float32 inputs: exact float32 products (no TF32); other dtypes: Triton's default.
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else None,
        blocks=blocks,
    )


def _valid_lens_arg(valid_lens: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """``valid_lens`` as int32 on q's device, or a one-element placeholder the kernel ignores."""
    if valid_lens is None:
        return torch.zeros(1, dtype=torch.int32, device=q.device)
    return valid_lens.to(device=q.device, dtype=torch.int32).contiguous()


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
        causal: Causal masking aligned bottom-right (see `attention_book.masking`).
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products; default ``1 / sqrt(head_dim)``.
        block_m: Queries per program (default: `default_block_sizes`: autotuned on a GPU for
            16-bit inputs, 64 for float32, 16 under the interpreter).
        block_n: Keys per inner step (default: autotuned, 32 for float32, 16 interpreted).

    Returns:
        The output (inputs' dtype) and the float32 natural log-sum-exp.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """
    launch = _prepare(q, block_m, block_n)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    qk_scale = scale * kernels.LOG2_E.value  # the kernels compute exp(x) as exp2(x * log2(e))
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, num_heads, q_len, dtype=torch.float32, device=q.device)
    grid = lambda meta: (triton.cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    launch.kernels.fwd[grid](
        q, k, v, out, lse, _valid_lens_arg(valid_lens, q),
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        num_heads, q_len, k_len, qk_scale,
        head_dim=head_dim, HEAD_DIM=launch.HEAD_DIM, CAUSAL=causal,
        HAS_VALID_LENS=valid_lens is not None, UPCAST=launch.UPCAST,
        INPUT_PRECISION=launch.INPUT_PRECISION, **launch.blocks,
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
        causal: Causal masking aligned bottom-right, as in the forward pass.
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
    launch = _prepare(q, block_m, block_n)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    qk_scale = scale * kernels.LOG2_E.value
    delta = (grad_out.float() * out.float()).sum(-1)  # (batch, num_heads, q_len)
    grad_q = torch.empty_like(q, memory_format=torch.contiguous_format)
    grad_k = torch.empty_like(k, memory_format=torch.contiguous_format)
    grad_v = torch.empty_like(v, memory_format=torch.contiguous_format)
    lens = _valid_lens_arg(valid_lens, q)
    strides = (*q.stride(), *k.stride(), *v.stride(), *grad_out.stride())
    sizes = (num_heads, q_len, k_len, qk_scale, scale)  # ..., qk_scale, sm_scale
    flags = {
        "head_dim": head_dim, "HEAD_DIM": launch.HEAD_DIM, "CAUSAL": causal,
        "HAS_VALID_LENS": valid_lens is not None, "UPCAST": launch.UPCAST,
        "INPUT_PRECISION": launch.INPUT_PRECISION, **launch.blocks,
    }  # fmt: skip
    grid_kv = lambda meta: (triton.cdiv(k_len, meta["BLOCK_N"]), batch * num_heads)  # noqa: E731
    launch.kernels.dkdv[grid_kv](
        q, k, v, grad_out, lse, delta, grad_k, grad_v, lens, *strides, *sizes, **flags
    )
    grid_q = lambda meta: (triton.cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    launch.kernels.dq[grid_q](
        q, k, v, grad_out, lse, delta, grad_q, lens, *strides, *sizes, **flags
    )
    return grad_q, grad_k, grad_v


# --8<-- [end:triton_launch]


class TritonAttention(TiledAttention):
    """Autograd wrapper of the Triton kernels, with the same call as `TiledAttention`.

    ``out, lse = TritonAttention.apply(q, k, v, causal, valid_lens, scale, block_m, block_n)``
    takes the arguments of `triton_attention_forward`, in that order (CUDA tensors, or CPU
    tensors under ``TRITON_INTERPRET=1``), and returns the output and the float32 log-sum-exp,
    which is not differentiable. Its backward pass is `triton_attention_backward`. What is
    saved for the backward, and how, is inherited from `TiledAttention`.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """

    @staticmethod
    def forward(q, k, v, causal, valid_lens, scale, block_m, block_n):  # noqa: D102
        return triton_attention_forward(q, k, v, causal, valid_lens, scale, block_m, block_n)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):  # noqa: D102
        q, k, v, out, lse, valid_lens = TiledAttention.saved(ctx)
        grads = triton_attention_backward(
            q, k, v, out, lse, grad_out.contiguous(), valid_lens=valid_lens, **ctx.options
        )
        return (*grads, None, None, None, None, None)
