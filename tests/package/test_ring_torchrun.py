"""examples/ring_attention.py, launched as a user launches it: with torchrun.

On the CPU (gloo): 2 and 4 processes of one ``torchrun --standalone``, two torchrun "nodes" on
this machine joined by a c10d rendezvous on the loopback interface, and a rank that fails
mid-ring, which must fail the launch with its message, never hang. Each launch takes a few
seconds. With CUDA, the same script on NCCL (skipped, with the reason, without a GPU).
"""

import os
import subprocess
import sys

import pytest
import torch
from repo import ROOT

from attention_book.distributed import free_port
from attention_book.flash.reference import naive_attention
from attention_book.ring_attention import ring_attention_backward, ring_attention_forward

SCRIPT = ROOT / "examples" / "ring_attention.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # this venv's torchrun
QUANTITIES = ("out", "grad_q", "grad_k", "grad_v")
LAUNCH_SECONDS = 120  # a launch takes seconds; this bounds one that hangs
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def launch(*torchrun_args: str, script_args=(), timeout=LAUNCH_SECONDS):
    command = [*TORCHRUN, *torchrun_args, str(SCRIPT), *script_args]
    return subprocess.run(
        command, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=timeout
    )


def assert_all_equal(output: str, world_size: int, tolerance: str = "1e-12") -> None:
    """Rank 0 printed its header and one line per quantity, each within the tolerance."""
    assert f"ring attention on {world_size} processes" in output, output
    for name in QUANTITIES:
        assert f"{name:<7} equal to SDPA within {tolerance}: True" in output, output
    assert "False" not in output, output


@pytest.mark.parametrize(
    ("world_size", "script_args"),
    [(2, ("--layout", "zigzag", "--causal")), (4, ("--layout", "contiguous"))],
)
def test_torchrun_standalone_matches_sdpa(world_size, script_args):
    done = launch("--standalone", f"--nproc-per-node={world_size}", script_args=script_args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_all_equal(done.stdout, world_size)
    assert "(gloo, cpu, float64)" in done.stdout


@pytest.mark.parametrize("rendezvous", ["c10d", "static"])
def test_two_torchrun_nodes_on_one_machine(rendezvous):
    """Two launches, as on two machines: a c10d rendezvous, or node ranks and a master."""
    port = free_port()
    if rendezvous == "c10d":  # the rendezvous numbers the nodes
        joins = [["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=ring"]] * 2
    else:  # the page's two lines: each node says its rank
        master = ["--master-addr=127.0.0.1", f"--master-port={port}"]
        joins = [[f"--node-rank={rank}", *master] for rank in (0, 1)]
    nodes = [
        subprocess.Popen(
            [*TORCHRUN, "--nnodes=2", "--nproc-per-node=2", *join, str(SCRIPT), "--causal"],
            cwd=ROOT,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for join in joins
    ]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=LAUNCH_SECONDS)[0])
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert_all_equal("".join(outputs), 4)  # rank 0 is on whichever node the rendezvous says


def test_a_failing_rank_fails_the_launch_with_its_message():
    done = launch(
        "--standalone", "--nproc-per-node=2", script_args=("--fail-rank", "1", "--timeout", "20")
    )
    assert done.returncode != 0
    report = done.stdout + done.stderr
    assert "rank 1 fails on purpose (--fail-rank) mid-ring" in report, report
    assert "rank      : 1" in report, report  # torchrun's summary names the failed rank


def test_a_mismatch_exits_nonzero_with_a_message():
    """A tolerance of 0, which float64 rounding misses, is reported as a mismatch."""
    done = launch("--standalone", "--nproc-per-node=2", script_args=("--tolerance", "0"))
    assert done.returncode != 0
    assert "equal to SDPA within 0e+00: False" in done.stdout, done.stdout
    assert "error: ring attention differs from SDPA: out by" in done.stderr, done.stderr


def test_ring_allocates_on_the_inputs_device():
    """No buffer of the ring lands on the CPU when the inputs are elsewhere (one process).

    The meta device has no data, and an operation that mixes it with a CPU tensor raises: the
    CPU-side check of what CUDA tensors need.
    """
    q, k, v, grad_out = torch.randn(4, 1, 2, 64, 16, device="meta")
    out, lse = ring_attention_forward(q, k, v, layout="zigzag", causal=True)
    grads = ring_attention_backward(q, k, v, out, lse, grad_out, layout="zigzag", causal=True)
    assert {t.device.type for t in (out, lse, *grads)} == {"meta"}


@needs_cuda
def test_ring_attention_on_cuda_one_process():
    generator = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 256, 32, generator=generator).cuda()
    out, _ = ring_attention_forward(q, k, v, layout="zigzag", causal=True)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out, naive_attention(q, k, v, causal=True), atol=1e-4, rtol=0)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torchrun_nccl_on_the_gpus(dtype):
    """World size 1 on one GPU; with several GPUs, one process per GPU (NCCL)."""
    world_size = min(torch.cuda.device_count(), 4)
    done = launch(
        "--standalone", f"--nproc-per-node={world_size}",
        script_args=(
            "--layout", "zigzag", "--causal", "--dtype", dtype, "--seq-len", "1024",
            "--head-dim", "64",
        ),  # the size the tolerances were read at (float32 and bfloat16 on the CPU)
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"(nccl, cuda, {dtype})" in done.stdout
    assert_all_equal(done.stdout, world_size, {"float32": "1e-04", "bfloat16": "5e-02"}[dtype])
