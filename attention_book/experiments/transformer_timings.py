"""The Transformer chapter's timings: decoding with and without the key/value cache.

The main run's trained Transformer (`attention_book.experiments.transformer`) decodes the first
test sentence to several lengths, with its decoder's key/value cache and without it, on one
thread; and one training batch of each of the three translators (the Bahdanau chapter's two and
the Transformer) is timed. What is compared is timed in turns (cache, no cache, cache, ...),
after a warm-up, in CPU time, and every repeat is kept (`attention_book.timing`). The result
is stored under the key it declares (its frozen configuration, this module's `VERSION`, the
corpus, and the versions of the two experiments whose code it runs); `RUNS` declares it for
the probe test. It has no headline number for the referee: its numbers are measurements of the
machine that ran it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attention_book.experiments.bahdanau import (
    BAHDANAU_CONFIG,
    BAHDANAU_PROBE,
    BahdanauConfig,
    bahdanau_make_models,
    limited,
)
from attention_book.experiments.transformer import (
    TRANSFORMER_CONFIG,
    TRANSFORMER_PROBE,
    TransformerConfig,
    set_need_weights,
    transformer_code_inputs,
    transformer_make_model,
    transformer_trained_model,
)
from attention_book.losses import translation_loss
from attention_book.seq2seq import EncoderDecoder
from attention_book.store import Run, cached, declared_key
from attention_book.timing import interleaved_seconds, torch_threads

__all__ = [
    "RUNS",
    "TIMING_CONFIG",
    "TIMING_PROBE",
    "VERSION",
    "TimingConfig",
    "transformer_decode_steps",
    "transformer_timing_run",
    "transformer_timings",
    "transformer_timings_key",
]

#: Bump when what the timings measure changes for the same configuration; not for a refactor,
#: a docstring or a moved helper. (They were a run of `attention_book.experiments.
#: transformer_studies` at its version 1, under the same key. Version 2: timed in turns, in CPU
#: time, every repeat kept, where version 1 kept the best of three wall-clock runs.)
VERSION = 2


# --8<-- [start:timing_config]
@dataclass(frozen=True)
class TimingConfig:
    """Timings: decoding against output length, with and without the cache; a training batch.

    Attributes:
        output_lengths: Tokens decoded.
        repeats: Timed repeats of each measurement, in turns with what it is compared with
            (all are kept; the median stands for them).
        train_batches: Training batches timed per model.
        transformer: The trained Transformer that decodes (the main run's).
        bahdanau: The Bahdanau models timed beside it.
    """

    output_lengths: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    repeats: int = 5
    train_batches: int = 10
    transformer: TransformerConfig = TRANSFORMER_CONFIG
    bahdanau: BahdanauConfig = BAHDANAU_CONFIG


#: The timings.
TIMING_CONFIG = TimingConfig()
# --8<-- [end:timing_config]

#: The probe: the same code at the probe's sizes, on the probe's trained Transformer.
TIMING_PROBE = TimingConfig(
    output_lengths=(2, 4), repeats=1, train_batches=1, transformer=TRANSFORMER_PROBE,
    bahdanau=BAHDANAU_PROBE,
)  # fmt: skip


def transformer_timings_key(config: TimingConfig) -> dict[str, Any]:
    """The key in the store of the timings, as they declare it.

    Their configuration, this module's `VERSION`, the corpus, and the versions of the two
    experiments whose code they run (the Transformer's and the Bahdanau chapter's).

    Args:
        config: The run's configuration.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(config, VERSION, **transformer_code_inputs())


# --8<-- [start:decode_steps]
@torch.no_grad()
def transformer_decode_steps(
    model: EncoderDecoder, src: Tensor, src_valid_lens: Tensor, bos_index: int, num_steps: int
) -> Tensor:
    """Greedy decoding for exactly ``num_steps`` tokens (it does not stop at ``<eos>``).

    The decoder gets one new token per call; whether it keeps a key/value cache is its own
    ``use_cache`` setting.

    Args:
        model: A Transformer encoder-decoder.
        src: Source tokens.
        src_valid_lens: Number of real tokens per source.
        bos_index: The first decoder input.
        num_steps: Number of tokens to generate.

    Returns:
        The generated tokens.

    Shapes:
        - src: ``(batch, num_src_steps)``
        - returns: ``(batch, num_steps)``
    """
    state = model.decoder.init_state(model.encoder(src, src_valid_lens), src_valid_lens)
    token = torch.full((src.shape[0], 1), bos_index, dtype=torch.long)
    generated = []
    for _ in range(num_steps):
        logits, state = model.decoder(token, state)  # (batch, 1, vocab_size)
        token = logits[:, -1:].argmax(dim=-1)  # (batch, 1)
        generated.append(token)
    return torch.cat(generated, dim=1)


# --8<-- [end:decode_steps]


def transformer_timing_run(config: TimingConfig = TIMING_CONFIG) -> dict[str, Any]:
    """Time decoding with and without the cache, and a training batch of each model.

    Everything runs on one thread, one measurement after the other. The full result
    (`transformer_timings`) and the probe come from here.

    Args:
        config: What to time, and the trained Transformer that decodes.

    Returns:
        See `transformer_timings`.
    """
    model, data = transformer_trained_model(config.transformer)
    set_need_weights(model, False)  # time the attention a deployed decoder would use
    src, src_valid_len = data.encode_sources([data.test_pairs[0][0]])
    src, bos = src[:, : int(src_valid_len)], data.tgt_vocab.bos

    def decoding(use_cache: bool, num_steps: int):
        def run() -> Tensor:
            model.decoder.use_cache = use_cache
            return transformer_decode_steps(model, src, src_valid_len, bos, num_steps)

        return run

    each: dict[str, list[list[float]]] = {"cache": [], "no cache": []}
    tokens: dict[str, list[Tensor]] = {"cache": [], "no cache": []}
    with torch_threads(1):
        for num_steps in config.output_lengths:
            runs = {name: decoding(name == "cache", num_steps) for name in each}
            times = interleaved_seconds(runs, config.repeats)  # cache, no cache, cache, ...
            for name, run in runs.items():
                each[name].append(times[name])
                tokens[name].append(run())
        identical = all(map(torch.equal, tokens["cache"], tokens["no cache"]))
        # One training batch of each model, the models in turns on the same batches: their
        # ratio depends less on the machine's load than the trainings' own timings do.
        sizes = len(data.src_vocab), len(data.tgt_vocab)
        plain, attention = bahdanau_make_models(*sizes, config.bahdanau)
        models = {
            "plain": plain,
            "attention": attention,
            "transformer": transformer_make_model(*sizes, config.transformer),
        }
        batches = list(limited(data.train_loader, config.train_batches))
        steps = {}
        for name, candidate in models.items():
            optimizer = torch.optim.Adam(set_need_weights(candidate, False).parameters())

            def train(candidate=candidate, optimizer=optimizer) -> None:
                for batch in batches:
                    optimizer.zero_grad()
                    translation_loss(candidate, batch)[0].backward()
                    optimizer.step()

            steps[name] = train
        per_batch = {
            name: [t / len(batches) for t in times]
            for name, times in interleaved_seconds(steps, config.repeats).items()
        }
    return {
        "decode_seconds": {n: [statistics.median(t) for t in ts] for n, ts in each.items()},
        "decode_seconds_each": each,
        "identical": identical,
        "train_batch_seconds": {n: statistics.median(t) for n, t in per_batch.items()},
        "train_batch_seconds_each": per_batch,
    }


def transformer_timings() -> dict[str, Any]:
    """Time (or load) decoding with and without the cache, and a training batch per model.

    Returns:
        "decode_seconds": for "cache" and "no cache", the CPU time to decode the first test
        sentence to each of ``TIMING_CONFIG.output_lengths`` tokens (the median of
        ``repeats``, the two decoders in turns); "decode_seconds_each": every repeat, a list
        per length; "identical": whether both generated the same tokens at every length;
        "train_batch_seconds": CPU seconds per training batch of "plain", "attention" (the
        two models of the Bahdanau chapter) and "transformer", the models in turns (median),
        and "train_batch_seconds_each": every repeat.
    """
    key = transformer_timings_key(TIMING_CONFIG)
    return cached("transformer-timings", key, lambda: transformer_timing_run(TIMING_CONFIG))


#: The stored run of this module. It has no headline: its numbers are measurements of the
#: machine that ran it, not results a referee could hold to a tolerance.
RUNS = (
    Run(
        "transformer-timings",
        VERSION,
        probe=lambda: transformer_timing_run(TIMING_PROBE),
        result=transformer_timings,
        key=lambda: transformer_timings_key(TIMING_CONFIG),
    ),
)
