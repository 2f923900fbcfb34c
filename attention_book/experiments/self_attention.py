"""The self-attention chapter's measurements: convolution, GRU and self-attention side by side.

Two measurements on layers of the same width that map a sequence to a sequence of the same
length:

- `self_attention_timings`: forward time against sequence length on this CPU, for a 1-D
  convolution, a GRU and a self-attention layer, with the slope of a straight-line fit in
  log-log coordinates (time grows like ``n ** slope``); `self_attention_flops` counts the
  floating-point operations of the same layers' matrix products, the work the times are
  compared with;
- `self_attention_gradient_reach`: how strongly the last output depends on each input, as the
  norm of the gradient of the last output with respect to every input position (a measured
  stand-in for the maximum path length of Vaswani et al., Table 1).

Both are cheap (seconds) and run at build time. At each length the three layers are timed in
turns (convolution, GRU, self-attention, convolution, ...), after a warm-up, on one CPU thread
(each run at least `MIN_SECONDS` long, a loop of calls where one is quicker), by that thread's
CPU time (`time.thread_time`): other programs do not add their own time to it as they do to the
wall clock, though they still slow it through the caches and memory they share. Every run is
kept, and the slope is fitted to each run as well as to the medians, so that a page can say how
far the runs move it. The timings are kept for the life of the process (`functools.cache`), so
the figure and the table that show them show the same run.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import cache, partial

import torch
from torch import Tensor, nn

from attention_book.multihead import MultiHeadAttention
from attention_book.timing import interleaved_seconds, torch_threads

__all__ = [
    "FIT_FROM",
    "MIN_SECONDS",
    "SEQUENCE_LENGTHS",
    "TIMING_WIDTH",
    "VERSION",
    "ConvLayer",
    "GRULayer",
    "SelfAttentionLayer",
    "fitted_slope",
    "self_attention_flops",
    "self_attention_gradient_reach",
    "self_attention_layers",
    "self_attention_timings",
]

#: Bump when what this module computes changes: the figures that show it are keyed by it
#: (`attention_book.figures.declaration`).
VERSION = 1

#: Width of every layer (features per position) in the timing measurement.
TIMING_WIDTH = 64
#: Sequence lengths of the timing measurement.
SEQUENCE_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: Each timed run of a layer lasts at least this long: a call that takes a fraction of a
#: millisecond is repeated in a loop and timed per call, so that the slope of the cheap layers
#: does not follow the clock's jitter (one call each gave the convolution slopes from 0.8 to
#: 1.5 on two runs of one machine).
MIN_SECONDS = 0.02
#: The slopes are fitted on lengths from this one up, where fixed per-call costs no longer
#: dominate.
FIT_FROM = 256


# --8<-- [start:layers]
class GRULayer(nn.Module):
    """A GRU that returns only its outputs, so every layer maps ``X`` to one tensor."""

    def __init__(self, num_hiddens: int):
        super().__init__()
        self.rnn = nn.GRU(num_hiddens, num_hiddens, batch_first=True)

    def forward(self, X: Tensor) -> Tensor:
        """Return the GRU's output at every position."""
        return self.rnn(X)[0]  # (batch, n, num_hiddens)


class ConvLayer(nn.Module):
    """A 1-D convolution over positions (kernel size 3, same length out as in)."""

    def __init__(self, num_hiddens: int, kernel_size: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(num_hiddens, num_hiddens, kernel_size, padding=kernel_size // 2)

    def forward(self, X: Tensor) -> Tensor:
        """Convolve along the positions (``Conv1d`` wants the features first)."""
        return self.conv(X.transpose(1, 2)).transpose(1, 2)  # (batch, n, num_hiddens)


class SelfAttentionLayer(nn.Module):
    """Multi-head self-attention: the sequence gives the queries, the keys and the values."""

    def __init__(self, num_hiddens: int, num_heads: int = 4):
        super().__init__()
        self.attention = MultiHeadAttention(num_hiddens, num_heads, need_weights=False)

    def forward(self, X: Tensor) -> Tensor:
        """Attend from every position to every position of the same sequence."""
        return self.attention(X, X, X)  # (batch, n, num_hiddens)


def self_attention_layers(num_hiddens: int) -> dict[str, nn.Module]:
    """The three layers compared, all mapping ``(batch, n, num_hiddens)`` to the same shape.

    Args:
        num_hiddens: Features per position, in and out.

    Returns:
        ``{"convolution": ..., "GRU": ..., "self-attention": ...}``.
    """
    return {
        "convolution": ConvLayer(num_hiddens),
        "GRU": GRULayer(num_hiddens),
        "self-attention": SelfAttentionLayer(num_hiddens),
    }


# --8<-- [end:layers]


def fitted_slope(lengths: list[int] | tuple[int, ...], seconds: list[float]) -> float:
    """Slope of the least-squares line through ``(log n, log t)``: ``t`` grows like ``n**slope``.

    Args:
        lengths: Sequence lengths (at least two, all different).
        seconds: Measured time at each length.

    Returns:
        The slope.

    Raises:
        ValueError: If the lists differ in length or hold fewer than two points.
    """
    if len(lengths) != len(seconds) or len(lengths) < 2:
        raise ValueError(
            f"lengths and seconds must be two lists of the same length >= 2, got "
            f"{len(lengths)} and {len(seconds)}"
        )
    x = [math.log(n) for n in lengths]
    y = [math.log(t) for t in seconds]
    x_mean, y_mean = sum(x) / len(x), sum(y) / len(y)
    covariance = sum((a - x_mean) * (b - y_mean) for a, b in zip(x, y, strict=True))
    return covariance / sum((a - x_mean) ** 2 for a in x)


def self_attention_flops(n: int, num_hiddens: int) -> dict[str, int]:
    """FLOPs of the matrix products of each layer of `self_attention_layers` on one sequence.

    A multiply-add counts as two FLOPs, as in ``torch.utils.flop_counter`` (biases, the
    softmax and the GRU's gate nonlinearities are elementwise and left out). Self-attention's
    count is split into the part linear in ``n`` and the part quadratic in ``n``.

    Args:
        n: Sequence length.
        num_hiddens: Width of every layer, ``d``.

    Returns:
        ``"convolution"``: ``2 * 3 * n * d**2`` (kernel size 3); ``"GRU"``: ``2 * 6 * n * d**2``
        (three gates, each with an input and a hidden ``d x d`` product per step);
        ``"self-attention projections"``: ``2 * 4 * n * d**2`` (queries, keys, values,
        output); ``"self-attention scores"``: ``2 * 2 * n**2 * d`` (the scores and the
        weighted sum of the values, all heads together).

    Raises:
        ValueError: If `n` or `num_hiddens` is not positive.
    """
    if n < 1 or num_hiddens < 1:
        raise ValueError(
            f"n and num_hiddens must be positive, got n={n}, num_hiddens={num_hiddens}"
        )
    d = num_hiddens
    return {
        "convolution": 2 * 3 * n * d**2,
        "GRU": 2 * 6 * n * d**2,
        "self-attention projections": 2 * 4 * n * d**2,
        "self-attention scores": 2 * 2 * n**2 * d,
    }


@cache
def self_attention_timings(repeats: int = 5) -> dict[str, dict[str, list | float]]:
    """Forward time of each layer at each of `SEQUENCE_LENGTHS` (one sequence, one thread).

    At each length the three layers are timed in turns, `repeats` runs each after a warm-up
    (`attention_book.timing.interleaved_seconds`), each run a loop of calls at least
    `MIN_SECONDS` long, counted per call. Each time is the CPU time of the calling thread,
    which runs PyTorch's operators itself when PyTorch has one thread: on a machine shared
    with other programs the wall clock would count the time they take too.

    Args:
        repeats: Timed runs per layer and length.

    Returns:
        Per layer name: ``"runs"`` (the seconds per call of every run, a list per length),
        ``"seconds"`` (their median at each length), ``"slope"`` (fitted to the medians on
        the lengths from `FIT_FROM` up) and ``"run_slopes"`` (the same fit to each run: run
        ``k`` at every length).
    """
    torch.manual_seed(0)
    layers = self_attention_layers(TIMING_WIDTH)
    runs: dict[str, list[list[float]]] = {name: [] for name in layers}
    # One core for every layer: a fair, less noisy comparison.
    with torch_threads(1), torch.no_grad():
        for layer in layers.values():
            layer.eval()
        for n in SEQUENCE_LENGTHS:
            x = torch.randn(1, n, TIMING_WIDTH)
            calls = {name: partial(layer, x) for name, layer in layers.items()}
            times = interleaved_seconds(
                calls, repeats, time.thread_time, min_seconds=MIN_SECONDS
            )  # conv, GRU, attention, conv, ...: seconds per call of every run
            for name in layers:
                runs[name].append(times[name])
    fit = [n for n in SEQUENCE_LENGTHS if n >= FIT_FROM]
    first = len(SEQUENCE_LENGTHS) - len(fit)
    results: dict[str, dict[str, list | float]] = {}
    for name, per_length in runs.items():
        seconds = [statistics.median(times) for times in per_length]
        results[name] = {
            "runs": per_length,
            "seconds": seconds,
            "slope": fitted_slope(fit, seconds[first:]),
            "run_slopes": [
                fitted_slope(fit, [times[k] for times in per_length[first:]])
                for k in range(repeats)
            ],
        }
    return results


# --8<-- [start:gradient_reach]
@cache
def self_attention_gradient_reach(
    num_steps: int = 64, num_hiddens: int = 32, conv_layers: int = 4
) -> dict[str, list[float]]:
    """Norm of the gradient of the last output with respect to every input position.

    For each architecture (a stack of `conv_layers` convolutions of kernel size 3, one GRU,
    one self-attention layer), freshly initialized with a fixed seed, the sum of the last
    position's outputs is differentiated with respect to the whole input sequence. Entry
    ``j`` of the result is the norm of that gradient at the input ``num_steps - 1 - j``
    positions back. Zero means the last output does not depend on that input at all.

    Args:
        num_steps: Sequence length.
        num_hiddens: Features per position.
        conv_layers: Depth of the convolution stack.

    Returns:
        Per architecture name, one gradient norm per distance ``0, 1, ..., num_steps - 1``.
    """
    torch.manual_seed(0)
    layers = self_attention_layers(num_hiddens)
    stack = [layers["convolution"]] + [ConvLayer(num_hiddens) for _ in range(conv_layers - 1)]
    models = {
        f"{conv_layers} convolutions": nn.Sequential(*stack),
        "GRU": layers["GRU"],
        "self-attention": layers["self-attention"],
    }
    X = torch.randn(1, num_steps, num_hiddens)
    reach = {}
    for name, model in models.items():
        inputs = X.clone().requires_grad_()
        model(inputs)[0, -1].sum().backward()  # the last position's output
        norms = inputs.grad[0].norm(dim=-1)  # (num_steps,), one norm per input position
        reach[name] = norms.flip(0).tolist()  # index = distance back from the last position
    return reach


# --8<-- [end:gradient_reach]
