"""The Bahdanau chapter's experiment (also used by the Introduction): attention or not.

Two GRU encoder-decoders learn the built-in English→French corpus: one whose decoder sees the
source only through the encoder's final state (a fixed-length context vector), and one with
Bahdanau attention. Both get the same data, the same optimizer, the same number of epochs and
(within a few percent) the same number of parameters.

The module reads in the order of the experiment: the configuration, the data, the two models,
decoding, training and evaluation (`bahdanau_run`), the cached result, and the measurements
the chapter reports (BLEU and exact matches by source length). The result (weights, timings,
test translations) is stored under the key the experiment declares (`bahdanau_cache_key`:
its configuration, `VERSION`, the corpus and the library versions), so the site build, the
chapters' snippets and the notebooks train once. `RUNS` declares it for the probe test, which
replays `bahdanau_run` at `BAHDANAU_PROBE`, and for the referee, which compares its test BLEU
with the recorded one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch
from torch import nn

from attention_book.data.corpus import corpus_digest
from attention_book.data.text import tokenize
from attention_book.data.translation import TranslationData, load_translation_data
from attention_book.decoding import Translation, beam_search, greedy_decode
from attention_book.losses import translation_loss
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
)
from attention_book.store import Run, cached, declared_key
from attention_book.timing import torch_threads
from attention_book.training.loop import History, fit, set_seed
from attention_book.training.metrics import bleu, num_parameters
from attention_book.training.schedules import schedule_per_step, warmup_cosine

__all__ = [
    "BAHDANAU_CONFIG",
    "BAHDANAU_PROBE",
    "LENGTH_BUCKETS",
    "MODELS",
    "RUNS",
    "VERSION",
    "BahdanauConfig",
    "bahdanau_bleu_by_bucket",
    "bahdanau_cache_key",
    "bahdanau_data",
    "bahdanau_exact_match_by_bucket",
    "bahdanau_experiment",
    "bahdanau_headline",
    "bahdanau_make_models",
    "bahdanau_model_run",
    "bahdanau_run",
    "bahdanau_test_references",
    "bahdanau_train",
    "bahdanau_trained_models",
    "bahdanau_translate",
    "limited",
    "token_bleu",
]

# --8<-- [start:config]
#: Bump when what `bahdanau_run` computes changes for the same configuration (the models, the
#: loss, the training, the decoding); not for a refactor, a docstring or a moved helper. The
#: cached result and the recorded probe are keyed by it.
VERSION = 2


@dataclass(frozen=True)
class BahdanauConfig:
    """The settings of the Bahdanau experiment: changing any of them trains again.

    Attributes:
        embed_size: Size of the token embeddings.
        num_hiddens: Hidden size of the attention model; the plain model's is the size that
            brings its parameter count closest.
        num_layers: GRU layers of the encoder and of the decoder.
        batch_size: Sentence pairs per batch (of similar lengths).
        num_epochs: Passes over the training split.
        lr: Adam's peak learning rate.
        warmup_steps: Steps of linear warm-up, before a cosine decay to 0 at the last step
            (a decay ends the training where a constant rate would leave it wandering: the
            end point moves less with the seed and the CPU's rounding).
        grad_clip: Largest global norm of the gradients.
        seed: Seed of the initialization (the batches' order has its own, fixed).
        max_len: Most tokens a decoder may generate.
        beam_size: Width of the beam search.
        max_batches: Train on the first this many batches of each epoch (the probe); None
            for all of them.
        max_sentences: Translate only the first this many test sentences (the probe); None
            for all of them.
    """

    embed_size: int = 32
    num_hiddens: int = 64
    num_layers: int = 1
    batch_size: int = 128
    num_epochs: int = 5
    lr: float = 0.01
    warmup_steps: int = 20
    grad_clip: float = 1.0
    seed: int = 0
    max_len: int = 60
    beam_size: int = 4
    max_batches: int | None = None
    max_sentences: int | None = None


#: The experiment of the chapter.
BAHDANAU_CONFIG = BahdanauConfig()
#: Its two models: without attention, and with Bahdanau attention.
MODELS = ("plain", "attention")
#: Its probe: the same code on two batches and six sentences, in about a second.
BAHDANAU_PROBE = BahdanauConfig(num_epochs=2, warmup_steps=2, max_batches=2, max_sentences=6)
# --8<-- [end:config]

#: Source-length buckets (number of tokens, both ends included) for BLEU against length.
LENGTH_BUCKETS: list[tuple[int, int]] = [
    (1, 9),
    (10, 14),
    (15, 19),
    (20, 24),
    (25, 29),
    (30, 34),
    (35, 39),
    (40, 60),
]


def bahdanau_data(batch_size: int = BAHDANAU_CONFIG.batch_size) -> TranslationData:
    """The built-in corpus in batches of sentences of similar length (little padding).

    Each call starts the training loader's seeded shuffling afresh, so both models see the
    same batches in the same order.

    Args:
        batch_size: Sentence pairs per batch.

    Returns:
        Vocabularies, loaders and raw sentence pairs.
    """
    return load_translation_data(batch_size=batch_size, bucket_by_length=True)


def bahdanau_train(model: nn.Module, loader: Iterable, config: BahdanauConfig) -> History:
    """Train one model of the chapter: Adam, warm-up then cosine decay, clipped gradients.

    The Transformer's length study trains the attention model with this too.

    Args:
        model: An encoder-decoder of `bahdanau_make_models`.
        loader: Its training batches (a loader, or a list of them for the probe).
        config: The settings (epochs, learning rate, warm-up, clipping).

    Returns:
        The training history.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    total = config.num_epochs * len(loader)
    schedule_per_step(optimizer, lambda step: warmup_cosine(step, config.warmup_steps, total))
    return fit(
        model,
        loader,
        translation_loss,
        num_epochs=config.num_epochs,
        optimizer=optimizer,
        grad_clip=config.grad_clip,
        device="cpu",
    )


def limited(batches: Any, max_batches: int | None) -> Any:
    """The first `max_batches` batches of a loader, as a list, or the loader itself for None.

    A probe trains on a few batches through the same loop as the full run.

    Args:
        batches: A loader (or any iterable of batches).
        max_batches: How many to keep, or None for all.

    Returns:
        `batches` itself, or a list of its first batches (the same in every epoch).
    """
    return batches if max_batches is None else list(islice(batches, max_batches))


# --8<-- [start:make_models]
def bahdanau_make_models(
    src_vocab_size: int, tgt_vocab_size: int, config: BahdanauConfig = BAHDANAU_CONFIG
) -> tuple[EncoderDecoder, EncoderDecoder]:
    """Build the two models of the experiment, with (nearly) the same number of parameters.

    The attention model has additive attention's extra weights (W_q, W_k, w_v); the plain
    model gets a larger hidden state instead, the one that brings its parameter count
    closest to the attention model's.

    Args:
        src_vocab_size: Size of the source vocabulary.
        tgt_vocab_size: Size of the target vocabulary.
        config: Sizes (embed_size, num_hiddens, num_layers).

    Returns:
        (plain model, attention model).
    """
    embed_size, num_layers = config.embed_size, config.num_layers

    def build(decoder_class: type[nn.Module], num_hiddens: int) -> EncoderDecoder:
        encoder = Seq2SeqEncoder(src_vocab_size, embed_size, num_hiddens, num_layers)
        decoder = decoder_class(tgt_vocab_size, embed_size, num_hiddens, num_layers)
        return EncoderDecoder(encoder, decoder)

    attention = build(Seq2SeqAttentionDecoder, config.num_hiddens)
    target = num_parameters(attention)
    candidates = range(config.num_hiddens, 2 * config.num_hiddens)
    plain_hiddens = min(
        candidates, key=lambda h: abs(num_parameters(build(Seq2SeqDecoder, h)) - target)
    )
    return build(Seq2SeqDecoder, plain_hiddens), attention


# --8<-- [end:make_models]


def bahdanau_translate(
    model: EncoderDecoder,
    data: TranslationData,
    sentences: Sequence[str],
    beam_size: int = 1,
    batch_size: int = 256,
    max_len: int = BAHDANAU_CONFIG.max_len,
) -> list[Translation]:
    """Translate English sentences with greedy decoding (beam_size=1) or beam search.

    Args:
        model: A trained model of the experiment.
        data: The data it was trained on (for the vocabularies).
        sentences: Raw English sentences.
        beam_size: 1 for greedy decoding, more for beam search.
        batch_size: Sentences decoded together by greedy decoding.
        max_len: Most tokens to generate per sentence.

    Returns:
        One `Translation` per sentence; `data.tgt_vocab.to_tokens(t.tokens)` gives the words.
    """
    results = []
    for start in range(0, len(sentences), batch_size):
        src, src_valid_len = data.encode_sources(sentences[start : start + batch_size])
        src = src[:, : int(src_valid_len.max())]
        args = (data.tgt_vocab.bos, data.tgt_vocab.eos, max_len)
        if beam_size == 1:
            results += greedy_decode(model, src, src_valid_len, *args)
        else:
            results += beam_search(model, src, src_valid_len, *args, beam_size=beam_size)
    return results


# --8<-- [start:run]
def bahdanau_run(
    config: BahdanauConfig = BAHDANAU_CONFIG, models: Sequence[str] = MODELS
) -> dict[str, Any]:
    """Train the named models on the same batches, then translate the test set with each.

    The full result (`bahdanau_experiment`) and the probe (`BAHDANAU_PROBE`) both come from
    here. Both models are built from the seed whichever of them train, so a model trained
    alone starts from the weights it has when both are. Training runs on one thread: these
    small recurrent steps gain nothing from more.

    Args:
        config: The experiment's settings.
        models: Which of `MODELS` to train.

    Returns:
        See `bahdanau_experiment`: the same fields, for these models only.
    """
    data = bahdanau_data(config.batch_size)
    set_seed(config.seed)
    built = bahdanau_make_models(len(data.src_vocab), len(data.tgt_vocab), config)
    sources = [source for source, _ in data.test_pairs][: config.max_sentences]
    result: dict[str, Any] = {"num_parameters": {}, "train_seconds": {}, "train_loss": {}}
    result["train_cpu_seconds"] = {}
    result |= {"state_dict": {}, "greedy": {}, "beam": {}, "num_hiddens": {}, "decode_seconds": {}}
    with torch_threads(1):
        for name, model in zip(MODELS, built, strict=True):
            if name not in models:
                continue
            set_seed(config.seed)
            # The same batches for both models: a fresh loader starts the same seeded order.
            loader = limited(bahdanau_data(config.batch_size).train_loader, config.max_batches)
            start, cpu_start = time.perf_counter(), time.process_time()
            history = bahdanau_train(model, loader, config)
            result["train_seconds"][name] = time.perf_counter() - start
            result["train_cpu_seconds"][name] = time.process_time() - cpu_start
            result["train_loss"][name] = history.train_loss
            result["num_parameters"][name] = num_parameters(model)
            result["num_hiddens"][name] = model.encoder.rnn.hidden_size
            result["state_dict"][name] = model.state_dict()
            result["decode_seconds"][name] = {}
            for method, beam_size in (("greedy", 1), ("beam", config.beam_size)):
                start = time.perf_counter()
                translations = bahdanau_translate(
                    model, data, sources, beam_size, max_len=config.max_len
                )
                result["decode_seconds"][name][method] = time.perf_counter() - start
                result[method][name] = [
                    " ".join(data.tgt_vocab.to_tokens(t.tokens)) for t in translations
                ]
    return result


# --8<-- [end:run]


# --8<-- [start:experiment]
def bahdanau_cache_key() -> dict[str, Any]:
    """The experiment's key in the store: what its result depends on, as it declares it.

    The configuration, this module's `VERSION`, a digest of the corpus it reads and the
    library versions (`declared_key`): no source code, so a refactor trains nothing.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(BAHDANAU_CONFIG, VERSION, corpus=corpus_digest())


def bahdanau_model_run(name: str) -> dict[str, Any]:
    """Train (or load from the cache) one model of the experiment and its translations.

    Each model is a run of its own in the store, ``bahdanau-plain`` and
    ``bahdanau-attention``, under the experiment's key: each trains in about a minute on one
    CPU core, and two cores train both at once.

    Args:
        name: One of `MODELS`.

    Returns:
        `bahdanau_run`'s result for that model alone.
    """
    key = bahdanau_cache_key()
    return cached(f"bahdanau-{name}", key, lambda: bahdanau_run(BAHDANAU_CONFIG, (name,)))


def bahdanau_experiment() -> dict[str, Any]:
    """Both models and their test-set translations, trained or loaded (`bahdanau_model_run`).

    Returns:
        A dict with, per model name ("plain", "attention"): "num_parameters",
        "num_hiddens", "train_seconds" (wall clock), "train_cpu_seconds", "train_loss" (per
        epoch), "state_dict", the test translations "greedy" and "beam" (one string of
        tokens per test sentence) and the "decode_seconds" of each method.
    """
    parts = [bahdanau_model_run(name) for name in MODELS]
    return {field: {k: v for part in parts for k, v in part[field].items()} for field in parts[0]}


# --8<-- [end:experiment]


def bahdanau_trained_models() -> tuple[EncoderDecoder, EncoderDecoder, TranslationData]:
    """The two trained models (from the cache) and their data.

    Returns:
        (plain model, attention model, data), models in eval mode.
    """
    result = bahdanau_experiment()
    data = bahdanau_data()
    plain, attention = bahdanau_make_models(len(data.src_vocab), len(data.tgt_vocab))
    plain.load_state_dict(result["state_dict"]["plain"])
    attention.load_state_dict(result["state_dict"]["attention"])
    return plain.eval(), attention.eval(), data


# ---------------------------------------------------------------------------------------------
# Measurements on the test set, and the declaration of the run


def bahdanau_test_references() -> tuple[list[str], list[int]]:
    """The test set's reference translations and the lengths of its sources.

    Returns:
        (references as space-separated tokens, source lengths in tokens), one per test pair,
        in the order of the cached translations.
    """
    data = bahdanau_data()
    references = [" ".join(tokenize(target)) for _, target in data.test_pairs]
    lengths = [len(tokenize(source)) for source, _ in data.test_pairs]
    return references, lengths


def token_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU of space-separated token strings (sacrebleu, no further tokenization).

    Args:
        hypotheses: One translation per sentence, tokens joined by spaces.
        references: One reference per sentence, tokens joined by spaces.

    Returns:
        BLEU, from 0 to 100.
    """
    return bleu([h.split() for h in hypotheses], [r.split() for r in references])


def _buckets(lengths: Sequence[int]) -> list[list[int]]:
    """Indices of the sentences in each bucket of `LENGTH_BUCKETS`."""
    return [[i for i, n in enumerate(lengths) if low <= n <= high] for low, high in LENGTH_BUCKETS]


def bahdanau_bleu_by_bucket(
    hypotheses: Sequence[str], references: Sequence[str], lengths: Sequence[int]
) -> tuple[list[float], list[int]]:
    """BLEU of the sentences in each bucket of `LENGTH_BUCKETS`, and their number.

    Args:
        hypotheses: Translations, tokens joined by spaces.
        references: References, tokens joined by spaces.
        lengths: Source length of each sentence, in tokens.

    Returns:
        (BLEU of each bucket, number of sentences in each bucket).
    """
    scores, counts = [], []
    for chosen in _buckets(lengths):
        scores.append(token_bleu([hypotheses[i] for i in chosen], [references[i] for i in chosen]))
        counts.append(len(chosen))
    return scores, counts


def bahdanau_exact_match_by_bucket(
    hypotheses: Sequence[str], references: Sequence[str], lengths: Sequence[int]
) -> list[float]:
    """Share of sentences translated exactly like the reference, in each length bucket.

    Args:
        hypotheses: Translations, tokens joined by spaces.
        references: References, tokens joined by spaces.
        lengths: Source length of each sentence, in tokens.

    Returns:
        The percentage of exact matches in each bucket of `LENGTH_BUCKETS`.
    """
    shares = []
    for chosen in _buckets(lengths):
        exact = sum(hypotheses[i] == references[i] for i in chosen)
        shares.append(100 * exact / len(chosen))
    return shares


def bahdanau_headline(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the chapter's conclusion rests on: test BLEU of both models, both decoders.

    Args:
        result: `bahdanau_experiment`'s result, or one model's (`bahdanau_model_run`).

    Returns:
        ``{"BLEU, plain, greedy": ..., ...}`` for each model of the result, from 0 to 100.
    """
    references, _ = bahdanau_test_references()
    return {
        f"BLEU, {name}, {method}": token_bleu(result[method][name], references)
        for name in result["greedy"]
        for method in ("greedy", "beam")
    }


#: The cached runs of this module, one per model, for the probe test and the referee (which
#: holds their BLEU to the spread recorded over other CPU arithmetic and seeds).
RUNS = tuple(
    Run(
        f"bahdanau-{name}",
        VERSION,
        probe=lambda name=name: bahdanau_run(BAHDANAU_PROBE, (name,)),
        result=lambda name=name: bahdanau_model_run(name),
        key=bahdanau_cache_key,
        headline=bahdanau_headline,
        tolerance=0.5,
    )
    for name in MODELS
)
