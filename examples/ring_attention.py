"""Ring attention under torchrun, checked against scaled_dot_product_attention.

One machine, P processes (NCCL and one GPU each where there are GPUs, gloo on the CPU
otherwise)::

    torchrun --standalone --nproc-per-node=4 examples/ring_attention.py --layout zigzag --causal

Two machines with 8 GPUs each, HOST an address of the first that the second can reach: on the
first, then on the second with ``--node-rank=1``::

    torchrun --nnodes=2 --node-rank=0 --nproc-per-node=8 --master-addr=HOST --master-port=29500 \
        examples/ring_attention.py --layout zigzag --causal

(or, on both, ``--rdzv-backend=c10d --rdzv-id=ring --rdzv-endpoint=HOST:29500`` in place of the
node rank and master: the c10d rendezvous numbers the nodes itself).

Every rank builds the same whole sequence from a random seed and runs its share of ring
attention forward and backward with `beyond_ring_worker`, the function each process runs in
the chapter's `run_workers` proof. The ranks' parts are then gathered and compared with
PyTorch's `scaled_dot_product_attention` on the whole sequence, forward and backward. Rank 0
prints one line per quantity; the exit status is 1 when one of them differs by more than the
tolerance of its dtype (`TOLERANCES`), and torchrun's own when a rank fails.

With NCCL, each process needs a GPU of its own. The ring's `isend` and `irecv` (one
`batch_isend_irecv`) run on NCCL's own CUDA stream, so the next block travels while the
current stream computes with this one; on gloo a transfer thread does the same.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record

from attention_book.experiments.beyond_one_device import beyond_ring_worker
from attention_book.ring_attention import LAYOUTS, RingComm, gather_sequence

#: Largest absolute difference from SDPA allowed, per dtype. float64 is the chapter's check.
#: In float32 and bfloat16 the ring adds its blocks in another order than SDPA's kernel, and
#: in bfloat16 every output and gradient is rounded to 8 bits of mantissa.
TOLERANCES = {"float64": 1e-12, "float32": 1e-4, "bfloat16": 5e-2}
QUANTITIES = ("out", "grad_q", "grad_k", "grad_v")


class FailingComm(RingComm):
    """A ring whose rank raises at its second forward step (``--fail-rank``)."""

    def step(self, *args, **kwargs):  # noqa: D102
        if self.steps:
            raise RuntimeError(f"rank {self.rank} fails on purpose (--fail-rank) mid-ring")
        return super().step(*args, **kwargs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", choices=LAYOUTS, default="contiguous")
    parser.add_argument("--causal", action="store_true", help="causal attention")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256, help="whole sequence length")
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--dtype", choices=TOLERANCES, help="float64 on CPU, float32 on CUDA")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--random-seed", type=int, default=0, help="of the inputs")
    parser.add_argument("--tolerance", type=float, help="instead of the dtype's TOLERANCES")
    parser.add_argument("--timeout", type=float, default=60, help="seconds any wait may take")
    parser.add_argument("--fail-rank", type=int, help="this rank raises mid-ring (to test)")
    return parser.parse_args(argv)


def join_group(backend: str, timeout: float) -> torch.device:
    """Join the group torchrun describes (env://); the device this rank computes on.

    NCCL (the default where CUDA is available) puts each process on the GPU of its local
    rank, ``LOCAL_RANK`` of the environment torchrun sets; gloo computes on the CPU.
    """
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)  # NCCL's point-to-point calls need it set
    deadline = datetime.timedelta(seconds=timeout)
    dist.init_process_group(backend, init_method="env://", timeout=deadline)
    return device


def compare(args: argparse.Namespace, device: torch.device, dtype: torch.dtype):
    """Run this rank's share, gather every rank's; the differences from SDPA, by quantity."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(args.random_seed)  # the same on every rank
    shape = (4, args.batch, args.heads, args.seq_len, args.head_dim)
    q, k, v, grad_out = torch.randn(shape, generator=generator, dtype=torch.float64).to(
        device, dtype
    )
    ring = FailingComm if rank == args.fail_rank else RingComm
    mine = beyond_ring_worker(
        q, k, v, grad_out, args.layout, args.causal, comm=ring(timeout=args.timeout)
    )
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*leaves, is_causal=args.causal)
    expected.backward(grad_out)
    differences = []
    for name, want in zip(QUANTITIES, [expected, *(t.grad for t in leaves)], strict=True):
        parts = [torch.empty_like(mine[name]) for _ in range(world_size)]
        dist.all_gather(parts, mine[name].contiguous())  # every rank's part, in rank order
        got = gather_sequence(parts, args.layout)
        differences.append((name, (got.double() - want.double()).abs().max().item()))
    return differences


@record  # a failing rank's traceback goes into torchrun's summary
def main(argv: list[str] | None = None) -> int:
    """Check ring attention against SDPA on the processes torchrun started."""
    args = parse_args(argv)
    device = join_group(args.backend, args.timeout)
    try:
        dtype = args.dtype or ("float32" if device.type == "cuda" else "float64")
        differences = compare(args, device, getattr(torch, dtype))
        tolerance = TOLERANCES[dtype] if args.tolerance is None else args.tolerance
        rank = dist.get_rank()
        if rank == 0:
            size = dist.get_world_size()
            print(
                f"ring attention on {size} process{'es' if size > 1 else ''} "
                f"({dist.get_backend()}, {device.type}, {dtype}): {args.layout} split, "
                f"{'causal' if args.causal else 'not causal'}, {args.seq_len} positions"
            )
            for name, difference in differences:
                ok = difference <= tolerance
                print(f"{name:<7} equal to SDPA within {tolerance:.0e}: {ok} ({difference:.1e})")
        wrong = [(name, d) for name, d in differences if not d <= tolerance]
        if wrong and rank == 0:
            what = ", ".join(f"{name} by {d:.1e}" for name, d in wrong)
            print(f"error: ring attention differs from SDPA: {what}", file=sys.stderr)
        return 1 if wrong else 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
