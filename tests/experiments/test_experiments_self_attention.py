import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attention_book.experiments import self_attention as self_attention_module
from attention_book.experiments.self_attention import (
    fitted_slope,
    self_attention_flops,
    self_attention_layers,
)
from attention_book.multihead import MultiHeadAttention


def counted_flops(layer: torch.nn.Module, X: torch.Tensor, *inputs: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(X, *inputs)
    return counter.get_total_flops()


@pytest.mark.parametrize("n", [16, 100])
def test_flop_counts_are_those_pytorch_counts(n):
    d = 32
    X = torch.randn(1, n, d)
    counts = self_attention_flops(n, d)
    layers = self_attention_layers(d)
    assert counted_flops(layers["convolution"], X) == counts["convolution"]
    assert counted_flops(layers["GRU"], X) == counts["GRU"]
    # The timed layer runs the fused kernel, which the counter does not see; the same layer
    # on the explicit path does the same products.
    explicit = MultiHeadAttention(d, 4)
    both = counts["self-attention projections"] + counts["self-attention scores"]
    assert counted_flops(explicit, X, X, X) == both


def test_flop_counts_reject_an_empty_size():
    with pytest.raises(ValueError, match="n and num_hiddens must be positive, got n=0"):
        self_attention_flops(0, 64)


def test_fitted_slope_recovers_a_power_law():
    lengths = [256, 512, 1024, 2048]
    assert fitted_slope(lengths, [3e-9 * n**1.7 for n in lengths]) == pytest.approx(1.7)
    with pytest.raises(ValueError, match="lengths and seconds"):
        fitted_slope([1], [1.0])


def test_timings_take_the_cpu_time_of_the_timing_thread_the_layers_in_turns(monkeypatch):
    # On a machine shared with other programs the wall clock counts their time too.
    calls = []

    def fake_interleaved(computations, repeats, clock=time.perf_counter, **options):
        calls.append((tuple(computations), repeats, clock))
        return {name: [1e-3 * (k + 1) for k in range(repeats)] for name in computations}

    monkeypatch.setattr(self_attention_module, "interleaved_seconds", fake_interleaved)
    result = self_attention_module.self_attention_timings.__wrapped__(repeats=3)
    layers = ("convolution", "GRU", "self-attention")
    assert calls == [(layers, 3, time.thread_time)] * len(self_attention_module.SEQUENCE_LENGTHS)
    for name in layers:  # every run kept, a slope fitted to each
        assert len(result[name]["runs"]) == len(self_attention_module.SEQUENCE_LENGTHS)
        assert len(result[name]["run_slopes"]) == 3


def test_quick_work_is_timed_in_a_loop_and_counted_per_call():
    from attention_book.timing import median_seconds

    ticks, calls = iter(range(10_000)), []

    def clock():  # one tick per reading: a call "takes" one tick, whatever it does
        return float(next(ticks))

    def compute():
        calls.append(1)

    # The calibration call reads 1 tick: 5 calls fill 5 ticks; each timed run of 5 calls
    # reads 1 tick too, so 1/5 of a tick per call.
    assert median_seconds(compute, 3, clock, min_seconds=5.0) == pytest.approx(0.2)
    assert len(calls) == 1 + 1 + 3 * 5  # warm-up, calibration, three runs of five
    with pytest.raises(ValueError, match="min_seconds must be at least 0, got -1"):
        median_seconds(compute, 3, clock, min_seconds=-1)
