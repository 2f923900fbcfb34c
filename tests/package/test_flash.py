"""Tests of attention_book.flash: the tiled reference, the Triton kernels and the
`flash_attention` entry point.

How the kernels run here. Triton picks compiled kernels or its CPU interpreter once, when it is
first imported, from ``TRITON_INTERPRET``; tests/conftest.py sets that variable for the whole
session when there is no CUDA GPU. The fixture `triton_device` then gives the device the
kernels take: "cpu" under the interpreter (with guard rails: no autotuning, no GPU driver
query), "cuda" when they are compiled on a GPU. What needs another mode runs in a subprocess:
the error for CPU tensors in compiled mode, the error when the variable is set too late, the
interpreter's guard rails from a fresh import, and the compile check for sm_90.

Error rule for the kernels (FlashAttention's own tests, Dao et al.): at a given precision, the
kernel's error against a float64 reference is at most twice the error of PyTorch's plain
attention computed at that same precision, plus a floor of twice the rounding error of the
reference values in that dtype (``(ref + 0.3 - 0.3 - ref)``): a few ulps, which keeps the rule
from failing where PyTorch happens to be exact.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from attention_book import flash, masking, memory
from attention_book.flash import (
    TiledAttention,
    flash_attention,
    measure_tensor_memory,
    naive_attention,
    online_softmax,
    tiled_attention_backward,
    tiled_attention_forward,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed")


def make_inputs(batch, num_heads, q_len, k_len, head_dim, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, num_heads, q_len, head_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(batch, num_heads, k_len, head_dim, generator=generator, dtype=torch.float64)
    v = torch.randn(batch, num_heads, k_len, head_dim, generator=generator, dtype=torch.float64)
    grad_out = torch.randn(batch, num_heads, q_len, head_dim, generator=generator)
    return (*(t.to(dtype) for t in (q, k, v)), grad_out.to(dtype))


def forward_backward(attention, q, k, v, grad_out, **options):
    """Output, lse and the three gradients of ``attention(q, k, v, **options)``."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out, lse = attention(q, k, v, **options)
    grads = torch.autograd.grad(out, (q, k, v), grad_out.to(out.device))
    return tuple(t.detach().cpu() for t in (out, lse, *grads))


def naive(q, k, v, causal=False, valid_lens=None):
    return naive_attention(q, k, v, causal=causal, valid_lens=valid_lens, return_lse=True)


def reference(q, k, v, causal=False, valid_lens=None, block_m=16, block_n=16):
    return flash_attention(
        q,
        k,
        v,
        causal=causal,
        valid_lens=valid_lens,
        backend="reference",
        block_m=block_m,
        block_n=block_n,
        return_lse=True,
    )


def assert_finite_lse_close(lse, expected, atol):
    """LSE equal, where ``-inf`` (rows that see no key) must match exactly."""
    assert torch.equal(torch.isinf(lse), torch.isinf(expected))
    finite = ~torch.isinf(expected)
    torch.testing.assert_close(lse[finite].double(), expected[finite].double(), atol=atol, rtol=0)


# (q_len, k_len, head_dim, causal, valid_lens, block_m, block_n)
CASES = [
    pytest.param(40, 40, 16, False, None, 16, 16, id="square"),
    pytest.param(37, 37, 24, True, None, 16, 8, id="causal-ragged-blocks"),
    pytest.param(23, 51, 32, True, None, 8, 16, id="causal-q<k"),
    pytest.param(51, 23, 16, True, None, 16, 16, id="causal-q>k-masked-rows"),
    pytest.param(30, 45, 16, False, [45, 7], 32, 16, id="padding"),
    pytest.param(33, 33, 8, True, [0, 20], 10, 7, id="padding-empty-sequence"),
]


# ---------------------------------------------------------------------------------------------
# The tiled reference
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("q_len,k_len,head_dim,causal,valid_lens,block_m,block_n", CASES)
def test_reference_matches_naive(
    dtype, atol, q_len, k_len, head_dim, causal, valid_lens, block_m, block_n
):
    q, k, v, grad_out = make_inputs(2, 3, q_len, k_len, head_dim, dtype)
    lens = None if valid_lens is None else torch.tensor(valid_lens)
    got = forward_backward(
        reference, q, k, v, grad_out, causal=causal, valid_lens=lens, block_m=block_m,
        block_n=block_n,
    )  # fmt: skip
    # The naive path, always in float64: the reference at `dtype` is compared with exact math.
    expected = forward_backward(
        naive, *(t.double() for t in (q, k, v, grad_out)), causal=causal, valid_lens=lens
    )
    for name, a, b in zip(
        ("out", "dq", "dk", "dv"), got[:1] + got[2:], expected[:1] + expected[2:], strict=True
    ):
        assert a.dtype == dtype, name
        assert not a.isnan().any(), name
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=0, msg=name)
    assert_finite_lse_close(got[1], expected[1], atol)


def test_fully_masked_rows_are_zero_without_nan():
    # q_len > k_len with bottom-right alignment: the first q_len - k_len queries see no key.
    q, k, v, grad_out = make_inputs(1, 2, 12, 5, 16, torch.float32)
    out, lse, dq, dk, dv = forward_backward(reference, q, k, v, grad_out, causal=True)
    assert torch.equal(out[:, :, :7], torch.zeros_like(out[:, :, :7]))
    assert torch.isinf(lse[:, :, :7]).all() and (lse[:, :, :7] < 0).all()
    assert torch.equal(dq[:, :, :7], torch.zeros_like(dq[:, :, :7]))
    for tensor in (out, dq, dk, dv):
        assert not tensor.isnan().any()
    assert out[:, :, 7:].abs().sum() > 0


@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_pytorch_sdpa(causal):
    q, k, v, grad_out = make_inputs(2, 4, 50, 50, 32, torch.float32)
    got = forward_backward(reference, q, k, v, grad_out, causal=causal)
    sdpa = lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=causal), q)  # noqa: E731
    expected = forward_backward(sdpa, q, k, v, grad_out)
    for a, b in zip(got[:1] + got[2:], expected[:1] + expected[2:], strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)


def test_causal_alignment_is_bottom_right_like_causal_lower_right():
    """q_len != k_len: equal to SDPA with PyTorch's lower-right causal bias, not is_causal."""
    q, k, v, _ = make_inputs(1, 2, 6, 10, 16, torch.float32)
    out = flash_attention(q, k, v, causal=True, backend="reference")
    lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(6, 10))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, lower_right, atol=1e-5, rtol=1e-5)
    assert (out - top_left).abs().max() > 0.1


def test_tiled_functions_with_autograd_function_directly():
    q, k, v, grad_out = make_inputs(1, 1, 20, 20, 16, torch.float64)
    out, lse = tiled_attention_forward(q, k, v, block_m=8, block_n=8)
    grads = tiled_attention_backward(q, k, v, out, lse, grad_out, block_m=8, block_n=8)
    q_, k_, v_ = (t.clone().requires_grad_() for t in (q, k, v))
    out2, lse2 = TiledAttention.apply(q_, k_, v_, False, None, None, 8, 8)
    assert not lse2.requires_grad
    torch.testing.assert_close(out2, out)
    torch.testing.assert_close(torch.autograd.grad(out2, (q_, k_, v_), grad_out), grads)


def test_reference_never_allocates_the_score_matrix():
    """Forward and backward of the tiled reference: no tensor as large as q_len x k_len."""
    q, k, v, grad_out = make_inputs(1, 1, 192, 192, 16, torch.float32)
    (out, lse), _, largest_forward = measure_tensor_memory(
        tiled_attention_forward, q, k, v, causal=True, block_m=48, block_n=48
    )
    _, _, largest_backward = measure_tensor_memory(
        tiled_attention_backward, q, k, v, out, lse, grad_out, True, block_m=48, block_n=48
    )
    score_matrix_bytes = 192 * 192 * 4
    assert max(largest_forward, largest_backward) < score_matrix_bytes / 4
    _, _, largest_naive = measure_tensor_memory(naive_attention, q, k, v)
    assert largest_naive >= score_matrix_bytes


def test_online_softmax_equals_softmax():
    scores = torch.randn(103, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 9
    for block_size in (1, 7, 32, 103, 200):
        torch.testing.assert_close(online_softmax(scores, block_size), torch.softmax(scores, 0))


# ---------------------------------------------------------------------------------------------
# Errors of the entry point
# ---------------------------------------------------------------------------------------------


def test_errors_name_the_argument_and_shapes():
    q = torch.randn(2, 3, 10, 16)
    with pytest.raises(ValueError, match=r"q must have shape \(batch, num_heads.*\(3, 10, 16\)"):
        flash_attention(q[0], q, q)
    with pytest.raises(ValueError, match=r"k must have shape \(2, 3, k_len, 16\).*\(2, 3, 10, 8\)"):
        flash_attention(q, q[..., :8], q)
    with pytest.raises(ValueError, match=r"v must have the shape of k"):
        flash_attention(q, q, q[:, :, :5])
    with pytest.raises(ValueError, match=r"q must have dtype in .*got torch.int64"):
        flash_attention(q.long(), q.long(), q.long())
    with pytest.raises(ValueError, match=r"valid_lens must be an integer tensor of shape \(2,\)"):
        flash_attention(q, q, q, valid_lens=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"backend must be"):
        flash_attention(q, q, q, backend="cuda")
    with pytest.raises(ValueError, match=r"block_m must be a positive int"):
        flash_attention(q, q, q, block_m=0)


def test_triton_input_errors():
    """Checked before Triton is used, so these hold in any mode and without Triton."""
    q = torch.randn(1, 2, 10, 8)
    with pytest.raises(ValueError, match=r"head_dim in \[16, 128\].*\(1, 2, 10, 8\)"):
        flash_attention(q, q, q, backend="triton")
    q = torch.randn(1, 2, 10, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"q must have dtype in \(float16, bfloat16, float32\)"):
        flash_attention(q, q, q, backend="triton")
    with pytest.raises(ValueError, match=r"block_n must be a power of two >= 16"):
        flash_attention(q.float(), q.float(), q.float(), backend="triton", block_n=24)


@needs_triton
def test_auto_backend_uses_the_reference_on_cpu(monkeypatch):
    def fail(*args):
        raise AssertionError("auto must not use Triton for CPU tensors")

    monkeypatch.setattr(flash.TritonAttention, "apply", fail)
    q, k, v, _ = make_inputs(1, 2, 20, 20, 16, torch.float32)
    torch.testing.assert_close(
        flash_attention(q, k, v), flash_attention(q, k, v, backend="reference")
    )


def test_every_public_name_is_reexported():
    assert flash.attention_mask is masking.attention_mask
    assert flash.measure_tensor_memory is memory.measure_tensor_memory
    names = [name for name in flash.__all__ if not name.lower().startswith("triton")]
    assert all(callable(getattr(flash, name)) for name in names)


@needs_triton
def test_triton_names_are_reexported_from_launch():
    from attention_book.flash import launch

    for name in ("TritonAttention", "triton_attention_forward", "triton_attention_backward"):
        assert getattr(flash, name) is getattr(launch, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = flash.nothing


# ---------------------------------------------------------------------------------------------
# The Triton kernels: interpreted on a CPU, compiled on a CUDA GPU
# ---------------------------------------------------------------------------------------------


class NoDriver:
    def __getattr__(self, name):
        raise AssertionError(f"a GPU driver query ran under the interpreter: {name}")


def no_autotune(*args, **kwargs):
    raise AssertionError("triton.autotune ran under the interpreter")


@pytest.fixture
def triton_device(monkeypatch):
    """The device the kernels take in this session; under the interpreter, with guard rails."""
    if not HAS_TRITON:
        pytest.skip("Triton is not installed")
    import triton
    from triton.runtime import driver  # the DriverConfig object behind driver.active

    from attention_book.flash import launch

    if launch.KERNEL_MODE == "compiled" and torch.cuda.is_available():
        return "cuda"
    if launch.KERNEL_MODE != "interpreted":
        pytest.skip("Triton is compiled and there is no CUDA GPU: set TRITON_INTERPRET=1")
    monkeypatch.setattr(triton, "autotune", no_autotune)
    monkeypatch.setattr(driver, "_active", NoDriver())
    monkeypatch.setattr(driver, "_default", NoDriver())
    return "cpu"


def on(device, *tensors):
    return tuple(t.to(device) for t in tensors)


def triton_kernel(q, k, v, causal=False, valid_lens=None):
    return flash_attention(
        q, k, v, causal=causal, valid_lens=valid_lens, backend="triton", return_lse=True
    )


def low_precision_naive(q, k, v, causal=False, valid_lens=None):
    """PyTorch's plain attention carried out entirely at the inputs' precision."""
    return naive_attention(q, k, v, causal=causal, valid_lens=valid_lens, return_lse=True)


def rounding_floor(reference, dtype):
    low = reference.to(dtype)
    return 2 * (low + 0.3 - 0.3 - low).abs().max().item()


# (q_len, k_len, head_dim, causal, valid_lens)
TRITON_CASES = [
    pytest.param(40, 40, 32, False, None, id="square-d32"),
    pytest.param(29, 45, 48, True, None, id="causal-q<k-d48-padded"),
    pytest.param(45, 29, 16, True, [29, 0], id="causal-q>k-padding-empty"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("q_len,k_len,head_dim,causal,valid_lens", TRITON_CASES)
def test_triton_kernel_error_rule(triton_device, dtype, q_len, k_len, head_dim, causal, valid_lens):
    q, k, v, grad_out = make_inputs(2, 2, q_len, k_len, head_dim, dtype)
    lens = None if valid_lens is None else torch.tensor(valid_lens)
    options = {"causal": causal, "valid_lens": lens}
    kernel = forward_backward(triton_kernel, *on(triton_device, q, k, v, grad_out), **options)
    exact = forward_backward(naive, *(t.double() for t in (q, k, v, grad_out)), **options)
    pytorch = forward_backward(
        low_precision_naive, *on(triton_device, q, k, v, grad_out), **options
    )
    for name, index in (("out", 0), ("dq", 2), ("dk", 3), ("dv", 4)):
        assert kernel[index].dtype == dtype and not kernel[index].isnan().any(), name
        kernel_error = (kernel[index].double() - exact[index]).abs().max().item()
        pytorch_error = (pytorch[index].double() - exact[index]).abs().max().item()
        bound = 2 * pytorch_error + rounding_floor(exact[index], dtype)
        assert kernel_error <= bound, f"{name}: {kernel_error:.2e} > {bound:.2e} ({dtype})"
    assert_finite_lse_close(kernel[1], exact[1], atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_triton_matches_reference_with_strided_inputs_and_block_sizes(triton_device):
    # (batch, seq_len, num_heads, head_dim) memory seen as (batch, num_heads, seq_len, head_dim)
    q, k, v, grad_out = make_inputs(2, 3, 19, 19, 64, torch.float32)
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not q.is_contiguous()
    got = forward_backward(
        lambda *a, **o: flash_attention(*a, **o, backend="triton", return_lse=True),
        *on(triton_device, q, k, v, grad_out), causal=True, block_m=32, block_n=16,
    )  # fmt: skip
    expected = forward_backward(reference, q, k, v, grad_out, causal=True)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b.to(a.dtype), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "q_len,k_len,causal,valid_lens",
    [(64, 64, True, None), (70, 33, True, None), (33, 70, True, None), (48, 80, False, [80, 31])],
)
def test_triton_unmasked_and_masked_block_ranges(triton_device, q_len, k_len, causal, valid_lens):
    """Lengths around block edges, so that every unmasked/masked split of the loops is used."""
    q, k, v, grad_out = make_inputs(2, 1, q_len, k_len, 16, torch.float32, seed=3)
    lens = None if valid_lens is None else torch.tensor(valid_lens)
    got = forward_backward(
        triton_kernel, *on(triton_device, q, k, v, grad_out), causal=causal, valid_lens=lens
    )
    expected = forward_backward(reference, q, k, v, grad_out, causal=causal, valid_lens=lens)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, expected, strict=True):
        torch.testing.assert_close(a, b.to(a.dtype), atol=2e-5, rtol=1e-5, msg=name)


def assert_valid_lens_is_saved_for_backward(function, device):
    """Changing valid_lens in place between the passes is caught, as for q, k and v."""
    q, k, v, _ = make_inputs(1, 1, 16, 16, 16, torch.float32)
    q, k, v = (t.to(device).requires_grad_() for t in (q, k, v))
    valid_lens = torch.tensor([9], device=device)
    out, _ = function.apply(q, k, v, False, valid_lens, None, 16, 16)
    valid_lens += 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_tiled_attention_saves_valid_lens_for_backward():
    assert_valid_lens_is_saved_for_backward(TiledAttention, "cpu")


def test_triton_attention_saves_valid_lens_for_backward(triton_device):
    assert_valid_lens_is_saved_for_backward(flash.TritonAttention, triton_device)


def run_python(script, **env_changes):
    """Run `script` in a fresh Python without TRITON_INTERPRET (plus `env_changes`)."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env |= env_changes
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


@needs_triton
def test_interpreter_mode_never_autotunes_or_queries_the_driver():
    """From a fresh import: autotune and the driver fail when used, and the kernels still run."""
    result = run_python(
        """
        import triton
        from triton.runtime import driver

        class NoDriver:
            def __getattr__(self, name):
                raise AssertionError(f"a GPU driver query ran under the interpreter: {name}")

        def no_autotune(*args, **kwargs):
            raise AssertionError("triton.autotune ran under the interpreter")

        triton.autotune, driver._active, driver._default = no_autotune, NoDriver(), NoDriver()
        import torch
        from attention_book.flash import flash_attention, kernels, launch
        q, k, v = (torch.randn(1, 1, 17, 16, requires_grad=True) for _ in range(3))
        out = flash_attention(q, k, v, backend="triton")
        out.sum().backward()
        assert launch.KERNEL_MODE == "interpreted" and launch.AUTOTUNED is None
        assert type(kernels.attn_fwd).__name__ == "InterpretedFunction"
        assert launch.default_block_sizes(torch.float16) == (16, 16)
        print(bool(out.isfinite().all() and q.grad.isfinite().all()))
        """,
        TRITON_INTERPRET="1",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True"]


@needs_triton
def test_cpu_tensors_in_compiled_mode_say_to_set_triton_interpret():
    """Without the variable, Triton compiles; CPU tensors get an error that says what to do.

    Setting the variable afterwards changes nothing (Triton reads it once), and the error says
    that too. Importing the package and using the reference backend never import Triton.
    """
    result = run_python(
        """
        import os, sys, torch
        from attention_book.flash import flash_attention
        q = torch.randn(1, 2, 10, 16)
        flash_attention(q, q, q, backend="reference")
        print("triton" in sys.modules)
        for interpret in ("0", "1"):
            os.environ["TRITON_INTERPRET"] = interpret
            try:
                flash_attention(q, q, q, backend="triton")
            except RuntimeError as error:
                print(repr(str(error)))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported, *errors = result.stdout.splitlines()
    assert imported == "False"
    assert len(errors) == 2
    for error in errors:
        assert re.search(r"needs CUDA tensors.*TRITON_INTERPRET=1", error), error
        assert "before Python starts" in error
    assert "set now, but Triton was imported in compiled mode before" in errors[1]


@needs_triton
def test_interpreter_requested_after_triton_was_imported_is_a_clear_error():
    """PyTorch imports Triton on many paths; setting the variable after that cannot work.

    Triton's own functions (``tl.max``) are then compiled-mode functions, which the interpreter
    cannot call; the launch stops with an error that says to set the variable earlier, instead
    of failing deep inside Triton.
    """
    result = run_python(
        """
        import os, torch, triton
        from triton.runtime.jit import JITFunction
        import triton.language as tl
        assert isinstance(tl.max, JITFunction)  # imported in compiled mode
        os.environ["TRITON_INTERPRET"] = "1"
        from attention_book.flash import flash_attention
        q = torch.randn(1, 2, 20, 16)
        try:
            flash_attention(q, q, q, causal=True, backend="triton")
        except RuntimeError as error:
            print(repr(str(error)))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TRITON_INTERPRET changed after Triton was imported" in result.stdout
    assert "before Python starts" in result.stdout


# ---------------------------------------------------------------------------------------------
# The chapter's measurements and figures (attention_book.experiments.flash, figures.flash)
# ---------------------------------------------------------------------------------------------


def test_intensity_model_limits():
    from attention_book.experiments.flash import flash_attention_intensity

    for head_dim in (64, 128):
        long = flash_attention_intensity(2**20, head_dim)
        assert long["naive"] == pytest.approx(head_dim / 2, rel=1e-3)  # d/2 FLOP per byte
        assert long["flash"] == pytest.approx(2**20 / 2, rel=1e-3)  # n/2 with perfect reuse
        capped = flash_attention_intensity(2**20, head_dim, block_m=128)["flash"]
        assert capped == pytest.approx(128, rel=1e-3)


def test_naive_intensity_is_far_below_every_ridge_point_of_the_table():
    """The core page: d/2 FLOP per byte, 64 at d = 128, is "far below every ridge point in the
    table" of `GPUS` (flash_gpu_specs); here, less than half of each."""
    from attention_book.experiments.flash import GPUS, flash_attention_intensity

    naive = flash_attention_intensity(2**20, 128)["naive"]
    ridges = {name: gpu["tflops"] / gpu["hbm_tb_s"] for name, gpu in GPUS.items()}
    for name, ridge in ridges.items():
        assert ridge > 2 * naive, name
    # "The H200 has the same arithmetic as the H100 and more bandwidth, so its ridge point is
    # lower."
    h100, h200 = GPUS["H100 SXM"], GPUS["H200 SXM"]
    assert h200["tflops"] == h100["tflops"] and h200["hbm_tb_s"] > h100["hbm_tb_s"]
    assert ridges["H200 SXM"] < ridges["H100 SXM"]


def test_gpu_results_note_without_a_file_and_figure_with_one(tmp_path):
    import json

    from attention_book.figures.flash_gpu import flash_gpu_results

    missing = flash_gpu_results(tmp_path / "absent")
    assert "No GPU run yet" in missing and "benchmarks/flash_gpu.py" in missing
    # A synthetic file (test data, not a measurement) exercises the drawing code.
    row = {"dtype": "bfloat16", "head_dim": 128, "causal": False, "batch": 4, "num_heads": 16}
    results = [
        {**row, "provider": p, "seq_len": n, "fwd_tflops": t, "fwd_bwd_tflops": t / 2}
        for p, t in (("triton", 1.0), ("sdpa-flash", 2.0))
        for n in (512, 1024)
    ] + [{**row, "provider": "sdpa-cudnn", "seq_len": 512, "error": "RuntimeError: none"}]
    environment = {"gpu": "Test GPU", "driver": "0", "cuda": "0", "torch": "0", "triton": "0"}
    path = tmp_path / "flash_gpu.json"
    path.write_text(
        json.dumps({"environment": environment | {"date_utc": "x"}, "results": results})
    )
    markdown = flash_gpu_results(tmp_path)
    assert "Test GPU" in markdown and "data:image/svg+xml;base64," in markdown
    assert markdown.count("| triton |") == 2 and "sdpa-cudnn" not in markdown


def test_triton_inputs_tma_cannot_read_are_copied_first(triton_device):
    """Rows of 40 bytes (head dim 20 in float16), a misaligned slice, a transposed last dim.

    TMA needs 16-byte aligned strides and a unit last stride; the launcher copies such inputs
    (zero-padding the head dim) and cuts the padding off the output.
    """
    q, k, v, grad_out = make_inputs(1, 2, 21, 19, 20, torch.float16, seed=5)
    sliced = make_inputs(1, 2, 21, 19, 21, torch.float16, seed=6)[0][..., 1:]  # offset 2 bytes
    transposed = q.transpose(-1, -2).contiguous().transpose(-1, -2)  # last stride is 21
    assert sliced.data_ptr() % 16 and transposed.stride(-1) != 1
    for query in (q, sliced, transposed):
        got = forward_backward(triton_kernel, *on(triton_device, query, k, v, grad_out))
        expected = forward_backward(naive, *(t.double() for t in (query, k, v, grad_out)))
        assert got[0].shape == query.shape
        for a, b in zip(got[:1] + got[2:], expected[:1] + expected[2:], strict=True):
            torch.testing.assert_close(a.double(), b, atol=1e-2, rtol=0)
    out = flash_attention(*on(triton_device, sliced, sliced, sliced), backend="triton")
    expected = naive_attention(*(sliced.double() for _ in range(3)))
    torch.testing.assert_close(out.double().cpu(), expected, atol=1e-2, rtol=0)


def test_triton_padding_keys_holding_nan_get_no_weight(triton_device):
    """Keys and values past valid_lens may be garbage, even NaN: the output stays finite."""
    q, k, v, grad_out = make_inputs(2, 2, 20, 37, 32, torch.float32, seed=7)
    lens = torch.tensor([37, 11])
    k[1, :, 11:] = float("nan")
    v[1, :, 11:] = float("nan")
    got = forward_backward(triton_kernel, *on(triton_device, q, k, v, grad_out), valid_lens=lens)
    k[1, :, 11:], v[1, :, 11:] = 0.0, 0.0
    expected = forward_backward(naive, q, k, v, grad_out, valid_lens=lens)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, expected, strict=True):
        assert not a.isnan().any(), name  # padding keys get gradient 0, as with zeros there
        torch.testing.assert_close(a, b.to(a.dtype), atol=2e-5, rtol=1e-5, msg=name)


def test_triton_scale_must_be_positive(triton_device):
    q = torch.randn(1, 1, 16, 16, device=triton_device)
    for scale in (0.0, -0.5):
        with pytest.raises(ValueError, match=rf"scale must be positive.*got {scale}"):
            flash_attention(q, q, q, backend="triton", scale=scale)
    out = flash_attention(q, q, q, backend="triton", scale=0.3)
    torch.testing.assert_close(
        out.cpu(), naive_attention(q.cpu(), q.cpu(), q.cpu(), scale=0.3), atol=1e-5, rtol=1e-5
    )


@needs_triton
def test_tuning_configs_by_gpu_generation_and_head_dim():
    from attention_book.flash import launch

    assert launch.padded_head_dim(48) == 64 and launch.padded_head_dim(8) == 16
    assert launch.tuning_configs("fwd", 9, 48) == launch.TUNING_CONFIGS["fwd"][9][64]
    assert launch.tuning_configs("dq", 10, 128) == launch.TUNING_CONFIGS["dq"][9][128]
    assert launch.tuning_configs("dkdv", 8, 16) == launch.TUNING_CONFIGS["dkdv"][8][16]
    with pytest.raises(ValueError, match="kernel must be one of"):
        launch.tuning_configs("bwd", 9, 64)
    with pytest.raises(ValueError, match="capability must be 8"):
        launch.tuning_configs("fwd", 7, 64)
    for kernel in launch.TUNING_CONFIGS.values():
        for by_head_dim in kernel.values():
            assert sorted(by_head_dim) == [16, 32, 64, 128]


# ---------------------------------------------------------------------------------------------
# Empty inputs: the same answer from both backends (tests/package/test_empty_inputs.py draws more)
# ---------------------------------------------------------------------------------------------


def test_reference_with_an_empty_batch_and_valid_lens_gives_an_empty_output():
    q = torch.randn(0, 2, 8, 32)
    out = flash_attention(
        q, q, q, backend="reference", valid_lens=torch.zeros(0, dtype=torch.long)
    )  # was: RuntimeError: max(): Expected reduction dim to be specified ...
    assert out.shape == (0, 2, 8, 32)


def test_triton_with_zero_keys_gives_zeros_and_lse_minus_inf_like_the_reference(triton_device):
    q = torch.randn(2, 2, 8, 32)
    k = torch.randn(2, 2, 0, 32)
    out, lse = flash_attention(q, k, k, backend="reference", return_lse=True)
    assert torch.equal(out, torch.zeros(2, 2, 8, 32))
    assert torch.equal(lse, torch.full((2, 2, 8), float("-inf")))
    q, k = on(triton_device, q, k)
    out, lse = flash_attention(q, k, k, backend="triton", return_lse=True)  # was: AssertionError
    assert torch.equal(out.cpu(), torch.zeros(2, 2, 8, 32))
    assert torch.equal(lse.cpu(), torch.full((2, 2, 8), float("-inf")))


# (batch, num_heads, q_len, k_len, valid_lens)
EMPTY_CASES = [
    pytest.param(0, 2, 8, 8, None, id="batch-0"),
    pytest.param(0, 2, 8, 8, [], id="batch-0-valid_lens"),
    pytest.param(2, 0, 8, 8, [3, 0], id="heads-0"),
    pytest.param(2, 2, 0, 8, [3, 0], id="queries-0"),
    pytest.param(2, 2, 8, 0, None, id="keys-0"),
    pytest.param(2, 2, 8, 0, [3, 0], id="keys-0-valid_lens"),
    pytest.param(0, 2, 0, 0, [], id="all-0"),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch,num_heads,q_len,k_len,valid_lens", EMPTY_CASES)
def test_empty_inputs_give_the_same_answer_on_both_backends(
    triton_device, batch, num_heads, q_len, k_len, valid_lens, causal
):
    """Output and lse shaped as always, zeros and -inf where a row sees no key, and gradients
    of the inputs' shapes: zeros, never NaN, from the reference and from the kernels."""
    q, k, v, grad_out = make_inputs(batch, num_heads, q_len, k_len, 16, torch.float32)
    lens = None if valid_lens is None else torch.tensor(valid_lens, dtype=torch.long)
    options = {"causal": causal, "valid_lens": lens}
    expected = forward_backward(reference, q, k, v, grad_out, **options)
    zeros = (
        torch.zeros_like(q),
        torch.full((batch, num_heads, q_len), float("-inf")),
        torch.zeros_like(q),
        torch.zeros_like(k),
        torch.zeros_like(v),
    )
    lens = None if lens is None else lens.to(triton_device)
    got = forward_backward(
        triton_kernel, *on(triton_device, q, k, v, grad_out), causal=causal, valid_lens=lens
    )
    names = ("out", "lse", "dq", "dk", "dv")
    for name, a, b, zero in zip(names, got, expected, zeros, strict=True):
        assert torch.equal(b, zero), f"reference {name}"
        assert torch.equal(a, zero), f"triton {name}"


def test_a_head_dim_of_zero_is_a_value_error_on_both_backends():
    q = torch.randn(2, 2, 4, 0)
    for backend in ("reference", "triton"):
        with pytest.raises(ValueError, match=r"head_dim.*\(2, 2, 4, 0\)"):
            flash_attention(q, q, q, backend=backend)
