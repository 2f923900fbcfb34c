"""How much tensor memory a function needs, counted exactly by watching PyTorch's operators.

`measure_tensor_memory` runs a function inside a PyTorch dispatch mode: every operator call
passes through the mode, which adds the size of each new tensor storage the operator returns
and subtracts it again when Python frees that storage. The result is exact and deterministic
(no allocator statistics, no sampling), works on any device, and also works on PyTorch's
``meta`` device, where tensors have shapes but no data, so long sequences can be measured
without doing their arithmetic. The FlashAttention chapter uses it to compare the memory of
naive and tiled attention.

What the count leaves out: the inputs (and views of them), scratch space an operator allocates
and frees before it returns, and the allocator's own overhead.

One side effect to know about: the first operator run inside a dispatch mode makes PyTorch
import ``torch._dynamo``, which imports Triton when it is installed. Triton reads
``TRITON_INTERPRET`` when it is first imported, so set that variable before measuring if you
want Triton's interpreter later in the same process.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["measure_tensor_memory"]


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


# --8<-- [start:measure_tensor_memory]
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
