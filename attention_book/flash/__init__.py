"""FlashAttention: exact attention that never stores the (q_len, k_len) score matrix.

The same function three ways, from the easiest to read to the fastest, one file each:

- `reference`: the idea in PyTorch. `online_softmax` (the one-pass softmax), `naive_attention`
  (the textbook formula, which builds every score), and FlashAttention's tiled forward and
  backward passes (`tiled_attention_forward`, `tiled_attention_backward`, joined by the
  autograd Function `TiledAttention`). Runs on CPU and GPU; memory linear in the length.
- `kernels`: the same algorithm as Triton kernels (a forward kernel, and a backward made of a
  key/value kernel and a query kernel, as in Triton's tutorial: not FlashAttention-2's single
  pass with atomic additions), plain ``@triton.jit`` functions.
- `launch`: the launchers `triton_attention_forward` and `triton_attention_backward`, and the
  autograd Function `TritonAttention`.
- `api`: `flash_attention`, the one entry point: it checks its inputs and picks a backend.
- `compiled`: reading what the compiler made of a kernel (ptxas's report, PTX, SASS loops),
  and `compile_report`: that reading, for the kernels of `kernels`, in the numbers the chapter
  cites (``benchmarks/flash_compile.py`` writes the report; the chapter's tables are built from
  it by `attention_book.figures.flash_compiled`).

`attention_mask` (the block masks of the tiled code) lives in `attention_book.masking`, and
`measure_tensor_memory` (the exact tensor-memory counter) in `attention_book.memory`; both are
re-exported here.

Conventions shared by every implementation:

- Tensors are shaped (batch, num_heads, seq_len, head_dim), as
  `torch.nn.functional.scaled_dot_product_attention` takes them.
- ``valid_lens`` (batch,) gives the number of real keys of each sequence; keys at positions
  ``>= valid_lens[b]`` are padding and get no weight (a key padding mask).
- ``causal=True`` is aligned **bottom-right**, as in FlashAttention 2.1 and later: query ``i``
  may see key ``j`` when ``j <= i + (k_len - q_len)``, so the last query lines up with the last
  key, which is what decoding with a key/value cache needs. `attention_book.masking` explains
  the two alignments; PyTorch's ``is_causal=True`` is top-left. They agree when
  ``q_len == k_len``.
- A query row that may see no key at all (``valid_lens[b] == 0``, or a causal row with
  ``q_len > k_len``) returns zeros and has log-sum-exp ``-inf``; no NaN is produced, forward or
  backward.

How Triton is imported. ``import attention_book`` and ``import attention_book.flash`` never
import Triton: `launch` and `kernels` are imported the first time a Triton backend runs (or
when one of their names is asked for here). Triton chooses between compiled kernels and its
CPU interpreter once, when it is first imported, from the environment variable
``TRITON_INTERPRET``: to run the kernels on a CPU, set ``TRITON_INTERPRET=1`` before Python
starts, or at the top of a fresh session before importing torch (PyTorch imports Triton on some
paths of its own). If Triton is already in compiled mode, ``backend="triton"`` on CPU tensors
raises an error that says so.
"""

from attention_book.flash.api import flash_attention
from attention_book.flash.reference import (
    TiledAttention,
    naive_attention,
    online_softmax,
    tiled_attention_backward,
    tiled_attention_forward,
)
from attention_book.masking import attention_mask
from attention_book.memory import measure_tensor_memory

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

# Names of `launch`, which imports Triton: looked up there when first asked for.
_TRITON_NAMES = ("TritonAttention", "triton_attention_backward", "triton_attention_forward")


def __getattr__(name: str) -> object:
    """Give the Triton launchers on demand, so that importing this package needs no Triton."""
    if name in _TRITON_NAMES:
        from attention_book.flash import launch

        return getattr(launch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
