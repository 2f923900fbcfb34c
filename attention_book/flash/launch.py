"""Launching the Triton kernels, and the autograd Function that joins their two passes.

Importing this module imports Triton and `attention_book.flash.kernels`. Triton reads
``TRITON_INTERPRET`` once, when it is first imported, and builds its own library functions
(``tl.max``, ``tl.sum``) and every ``@triton.jit`` kernel for that mode: compiled for a CUDA GPU,
or interpreted on the CPU. `KERNEL_MODE` records what this process got, and a launch checks
that the tensors fit it; when they do not, the error says which variable to set, and when.

The forward kernel reads and writes through host-side tensor descriptors (Triton's
``TensorDescriptor``), one per tensor, over its four dimensions: on a Hopper GPU each tile is
one TMA copy, on older GPUs Triton turns them into ordinary loads, and under the interpreter
they run on the CPU. TMA needs a contiguous last dimension and 16-byte aligned strides; the
rare input that has neither (a head dim of 20 in float16, a sliced tensor) is copied first.

On a GPU, 16-bit inputs let Triton's autotuner choose among the configurations of
`TUNING_CONFIGS` for the GPU's generation and the head dim; float32 inputs use fixed 64 x 32
tiles (exact float32 products, which the compile report's tuning for 16-bit inputs does not
cover). Under the interpreter the tiles are 16 x 16 and nothing autotunes or asks a GPU driver
anything.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from attention_book.flash import kernels
from attention_book.flash.reference import TiledAttention

__all__ = [
    "AUTOTUNED",
    "KERNEL_MODE",
    "PLAIN",
    "PREPROCESS_BLOCK",
    "TUNING_CONFIGS",
    "KernelSet",
    "TritonAttention",
    "default_block_sizes",
    "padded_head_dim",
    "triton_attention_backward",
    "triton_attention_forward",
    "tuning_configs",
]


class KernelSet(NamedTuple):
    """The three kernels of one attention call whose tiles are tuned."""

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

#: Launch configurations (BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner times, by
#: kernel, GPU generation (compute capability major: 8 Ampere, 9 Hopper) and HEAD_DIM. Every
#: one compiles without register spills and within its GPU's shared memory, which
#: ``benchmarks/flash_compile.py`` checks for all of them (tests/test_flash_compile.py for a
#: subset). GPUs newer than Hopper get Hopper's lists.
TUNING_CONFIGS = {
    "fwd": {
        9: {
            16: [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)],
            32: [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)],
            64: [(128, 64, 4, 2), (128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)],
            128: [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3),
                  (64, 64, 4, 3)],
        },
        8: {
            16: [(128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)],
            32: [(128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3)],
            64: [(128, 64, 8, 3), (128, 32, 4, 3), (64, 64, 4, 3), (64, 32, 4, 4)],
            128: [(128, 32, 8, 3), (64, 32, 8, 3), (64, 64, 8, 3), (64, 32, 4, 4)],
        },
    },
    "dkdv": {
        9: {
            16: [(32, 128, 4, 3), (32, 128, 8, 3), (64, 128, 8, 3), (32, 64, 4, 3)],
            32: [(32, 128, 4, 3), (32, 128, 8, 3), (64, 128, 8, 3), (32, 64, 4, 3)],
            64: [(32, 128, 8, 3), (64, 128, 8, 3), (32, 64, 4, 3), (64, 64, 4, 3)],
            128: [(32, 128, 8, 2), (32, 128, 8, 3), (32, 64, 4, 3)],
        },
        8: {
            16: [(32, 128, 4, 3), (32, 128, 8, 3), (32, 64, 4, 3)],
            32: [(32, 128, 4, 3), (32, 128, 8, 3), (32, 64, 4, 3)],
            64: [(32, 128, 8, 2), (32, 128, 8, 3), (32, 64, 4, 3)],
            128: [(32, 64, 8, 3), (64, 64, 8, 3), (32, 64, 4, 3)],
        },
    },
    "dq": {
        9: {
            16: [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            32: [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            64: [(128, 32, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            128: [(128, 64, 8, 3), (128, 32, 8, 3), (64, 64, 4, 3), (64, 32, 4, 3)],
        },
        8: {
            16: [(128, 32, 4, 3), (128, 32, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            32: [(128, 32, 4, 3), (128, 32, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            64: [(128, 32, 8, 3), (128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
            128: [(128, 32, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)],
        },
    },
}  # fmt: skip
_TUNING_KEY = ["q_len", "k_len", "HEAD_DIM", "CAUSAL", "HAS_VALID_LENS"]

#: Rows per program of `kernels.attn_bwd_preprocess` on a GPU (4 warps).
PREPROCESS_BLOCK = 64


def padded_head_dim(head_dim: int) -> int:
    """``HEAD_DIM``: the head dim rounded up to a power of two, at least 16 (MMA's minimum)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def tuning_configs(kernel: str, capability: int, head_dim: int) -> list[tuple[int, ...]]:
    """The configurations the autotuner times for one kernel, GPU generation and head dim.

    Args:
        kernel: ``"fwd"``, ``"dkdv"`` or ``"dq"``.
        capability: The GPU's compute capability major (8 for A100, 9 for H100 and H200).
        head_dim: The head dim of the inputs.

    Returns:
        ``[(BLOCK_M, BLOCK_N, num_warps, num_stages), ...]`` from `TUNING_CONFIGS`.

    Raises:
        ValueError: If `kernel` is not one of the three, or `capability` is older than 8.
    """
    if kernel not in TUNING_CONFIGS:
        raise ValueError(f"kernel must be one of {sorted(TUNING_CONFIGS)}, got {kernel!r}")
    if capability < 8:
        raise ValueError(f"capability must be 8 (Ampere) or newer, got {capability}")
    return TUNING_CONFIGS[kernel][min(capability, 9)][padded_head_dim(head_dim)]


def _set_block_shapes(nargs: dict) -> None:
    """Give the forward's tensor descriptors the tiles of the configuration about to run."""
    rows = {"desc_q": nargs["BLOCK_M"], "desc_o": nargs["BLOCK_M"]}
    rows |= {"desc_k": nargs["BLOCK_N"], "desc_v": nargs["BLOCK_N"]}
    for name, block_rows in rows.items():
        nargs[name].block_shape = [1, 1, block_rows, nargs["HEAD_DIM"]]


def _autotuned_kernels() -> KernelSet | None:
    """The kernels wrapped in Triton's autotuner: compiled mode on a machine with a CUDA GPU."""
    if KERNEL_MODE != "compiled" or not torch.cuda.is_available():
        return None
    capability = torch.cuda.get_device_capability()[0]
    tuned = {}
    for name, kernel in PLAIN._asdict().items():
        by_head_dim = {
            head_dim: tuning_configs(name, capability, head_dim) for head_dim in (16, 32, 64, 128)
        }
        hook = _set_block_shapes if name == "fwd" else None
        configs = [
            triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s, pre_hook=hook)
            for m, n, w, s in sorted({c for listed in by_head_dim.values() for c in listed})
        ]

        def listed_for_head_dim(configs, named_args, by_head_dim=by_head_dim, **kwargs):
            listed = by_head_dim[kwargs["HEAD_DIM"]]
            return [
                c for c in configs
                if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in listed
            ]  # fmt: skip

        tuned[name] = triton.autotune(
            configs, key=_TUNING_KEY, prune_configs_by={"early_config_prune": listed_for_head_dim}
        )(kernel)
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
    plain: dict  # launch options of the kernels that are never autotuned


def _prepare(
    q: torch.Tensor, block_m: int | None, block_n: int | None, scale: float | None
) -> _Launch:
    """Check the mode and the scale, then choose the kernels and the options of the launches."""
    _check_mode(q)
    if scale is not None and not scale > 0:
        raise ValueError(
            f"scale must be positive for the Triton kernels (they take each row's maximum "
            f"before scaling), got {scale}"
        )
    interpreted = KERNEL_MODE == "interpreted"
    if block_m is None and block_n is None:
        fixed = default_block_sizes(q.dtype)
    else:
        fixed = (block_m or 16, block_n or 16)
    plain = {} if interpreted else {"num_warps": 4, "num_stages": 2}
    if fixed is None:  # compiled, on a CUDA device: the autotuner picks the block sizes
        chosen, blocks = AUTOTUNED, {}
    else:
        chosen, blocks = PLAIN, {"BLOCK_M": fixed[0], "BLOCK_N": fixed[1]} | plain
    return _Launch(
        kernels=chosen,
        HEAD_DIM=padded_head_dim(q.shape[-1]),
        UPCAST=interpreted,
        # float32 inputs: exact float32 products (no TF32); other dtypes: Triton's default.
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else None,
        blocks=blocks,
        plain=plain,
    )


def _valid_lens_arg(valid_lens: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """``valid_lens`` as int32 on q's device, or a one-element placeholder the kernel ignores."""
    if valid_lens is None:
        return torch.zeros(1, dtype=torch.int32, device=q.device)
    return valid_lens.to(device=q.device, dtype=torch.int32).contiguous()


def _fits_tma(tensor: torch.Tensor) -> bool:
    """Whether a tensor meets TMA's layout rules: unit last stride, 16-byte aligned strides."""
    size = tensor.element_size()
    aligned = all(stride * size % 16 == 0 for stride in tensor.stride()[:-1])
    return tensor.stride(-1) == 1 and aligned and tensor.data_ptr() % 16 == 0


def _tma_layout(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself if TMA can read it, else a contiguous copy, zero-padded if need be.

    The padding widens the head dim to a multiple of 16 bytes with zero columns, which change
    no dot product and give zero output columns (cut off by the caller).
    """
    if _fits_tma(tensor):
        return tensor
    per_16_bytes = 16 // tensor.element_size()
    width = -tensor.shape[-1] % per_16_bytes
    return F.pad(tensor, (0, width)).contiguous()


def _descriptor(tensor: torch.Tensor, block_rows: int, head_dim: int) -> TensorDescriptor:
    """A descriptor over the whole (batch, num_heads, seq_len, head_dim) tensor."""
    shape, strides = list(tensor.shape), list(tensor.stride())
    return TensorDescriptor(tensor, shape, strides, [1, 1, block_rows, head_dim])


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
        scale: Factor applied to the dot products, positive; default ``1 / sqrt(head_dim)``.
        block_m: Queries per program (default: `default_block_sizes`: autotuned on a GPU for
            16-bit inputs, 64 for float32, 16 under the interpreter).
        block_n: Keys per inner step (default: autotuned, 32 for float32, 16 interpreted).

    Returns:
        The output (inputs' dtype) and the float32 natural log-sum-exp. When a size is 0 (no
        batch, head, query or key) nothing is launched: the output is zeros (empty, or rows
        that see no key) and the log-sum-exp ``-inf``, as the reference computes them.

    Shapes:
        - q: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - returns: (batch, num_heads, q_len, head_dim) and (batch, num_heads, q_len)
    """
    launch = _prepare(q, block_m, block_n, scale)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    if q.numel() == 0 or k.numel() == 0:
        # Nothing to launch (a descriptor needs every size positive): no query, or queries
        # that see no key, which get zeros and an lse of -inf, as in the reference.
        out = torch.zeros_like(q, memory_format=torch.contiguous_format)
        return out, torch.full((batch, num_heads, q_len), float("-inf"), device=q.device)
    qk_scale = scale * kernels.LOG2_E.value  # the kernels compute exp(x) as exp2(x * log2(e))
    q_, k_, v_ = (_tma_layout(t) for t in (q, k, v))  # usually q, k, v themselves
    out = torch.empty_like(q_, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, num_heads, q_len, dtype=torch.float32, device=q.device)
    # Tiles of [1, 1, rows, HEAD_DIM]; when autotuning, each configuration sets its own rows.
    q_rows, kv_rows = launch.blocks.get("BLOCK_M", 16), launch.blocks.get("BLOCK_N", 16)
    descriptors = [
        _descriptor(t, rows, launch.HEAD_DIM)
        for t, rows in ((q_, q_rows), (k_, kv_rows), (v_, kv_rows), (out, q_rows))
    ]
    grid = lambda meta: (triton.cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    launch.kernels.fwd[grid](
        *descriptors, lse, _valid_lens_arg(valid_lens, q), num_heads, q_len, k_len, qk_scale,
        HEAD_DIM=launch.HEAD_DIM, CAUSAL=causal, HAS_VALID_LENS=valid_lens is not None,
        UPCAST=launch.UPCAST, INPUT_PRECISION=launch.INPUT_PRECISION, **launch.blocks,
    )  # fmt: skip
    if out.shape[-1] != head_dim:  # a zero-padded copy: cut the padding off
        out = out[..., :head_dim].contiguous()
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
    """Launch the Triton backward: D and the base-2 lse, then the dK/dV and the dQ kernels.

    Args:
        q: Queries saved by the forward pass.
        k: Keys.
        v: Values.
        out: The forward output.
        lse: The forward log-sum-exp (float32, natural).
        grad_out: Gradient of the loss with respect to `out`.
        causal: Causal masking aligned bottom-right, as in the forward pass.
        valid_lens: Number of real keys per sequence.
        scale: Factor applied to the dot products, positive; default ``1 / sqrt(head_dim)``.
        block_m: Queries per block (default: as in `triton_attention_forward`).
        block_n: Keys per block.

    Returns:
        The gradients with respect to `q`, `k` and `v`, in the inputs' dtype: zeros, launching
        nothing, when a size is 0.

    Shapes:
        - q, out, grad_out: (batch, num_heads, q_len, head_dim)
        - k, v: (batch, num_heads, k_len, head_dim)
        - lse: (batch, num_heads, q_len)
        - returns: the shapes of q, k and v
    """
    launch = _prepare(q, block_m, block_n, scale)
    if q.numel() == 0 or k.numel() == 0:  # as in the forward pass: nothing to launch
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    batch, num_heads, q_len, head_dim = q.shape
    k_len = k.shape[-2]
    scale = head_dim**-0.5 if scale is None else scale
    qk_scale = scale * kernels.LOG2_E.value
    delta = torch.empty(batch, num_heads, q_len, dtype=torch.float32, device=q.device)
    lse2 = torch.empty_like(delta)  # the log-sum-exp in base 2, as the loops use it
    rows = 16 if KERNEL_MODE == "interpreted" else PREPROCESS_BLOCK
    kernels.attn_bwd_preprocess[(triton.cdiv(q_len, rows), batch * num_heads)](
        out, grad_out, lse, delta, lse2, *out.stride(), *grad_out.stride(), num_heads, q_len,
        head_dim=head_dim, HEAD_DIM=launch.HEAD_DIM, BLOCK_M=rows, **launch.plain,
    )  # fmt: skip
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
        q, k, v, grad_out, lse2, delta, grad_k, grad_v, lens, *strides, *sizes, **flags
    )
    grid_q = lambda meta: (triton.cdiv(q_len, meta["BLOCK_M"]), batch * num_heads)  # noqa: E731
    launch.kernels.dq[grid_q](
        q, k, v, grad_out, lse2, delta, grad_q, lens, *strides, *sizes, **flags
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
