"""The Bahdanau chapter's experiment (also used by the Introduction): attention or not.

Two GRU encoder-decoders learn the built-in English→French corpus: one whose decoder sees the
source only through the encoder's final state (a fixed-length context vector), and one with
Bahdanau attention. Both get the same data, the same optimizer, the same number of epochs and
(within a few percent) the same number of parameters.

The module reads in the order of the experiment: the configuration and the data, the two
models, the loss, decoding, training and evaluation, the cached result, and the measurements
the chapter reports (BLEU and exact matches by source length). The result (weights, timings,
test translations) is cached under `experiment_key`, so the site build and the chapters'
snippets train once, and any edit to the code they run trains again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from attention_book.data import TranslationData, load_translation_data, tokenize
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
    Translation,
    beam_search,
    greedy_decode,
    masked_cross_entropy,
    num_parameters,
)
from attention_book.training import bleu, cached, experiment_key, fit, set_seed

__all__ = [
    "BAHDANAU_CONFIG",
    "LENGTH_BUCKETS",
    "bahdanau_bleu_by_bucket",
    "bahdanau_cache_key",
    "bahdanau_data",
    "bahdanau_exact_match_by_bucket",
    "bahdanau_experiment",
    "bahdanau_make_models",
    "bahdanau_test_references",
    "bahdanau_trained_models",
    "bahdanau_translate",
    "token_bleu",
]

#: The experiment's settings. Changing any value trains again (new cache entry).
BAHDANAU_CONFIG: dict[str, Any] = {
    "embed_size": 32,
    "num_hiddens": 64,  # of the attention model; the plain model's is matched on parameters
    "num_layers": 1,
    "batch_size": 128,
    "num_epochs": 6,
    "lr": 0.005,
    "grad_clip": 1.0,
    "seed": 0,
    "max_len": 60,  # most tokens a decoder may generate
    "beam_size": 4,
}

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


def bahdanau_data() -> TranslationData:
    """The built-in corpus in batches of sentences of similar length (little padding).

    Each call starts the training loader's seeded shuffling afresh, so both models see the
    same batches in the same order.

    Returns:
        Vocabularies, loaders and raw sentence pairs.
    """
    return load_translation_data(batch_size=BAHDANAU_CONFIG["batch_size"], bucket_by_length=True)


# --8<-- [start:make_models]
def bahdanau_make_models(
    src_vocab_size: int, tgt_vocab_size: int, config: dict[str, Any] = BAHDANAU_CONFIG
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
    embed_size, num_layers = config["embed_size"], config["num_layers"]

    def build(decoder_class: type[nn.Module], num_hiddens: int) -> EncoderDecoder:
        encoder = Seq2SeqEncoder(src_vocab_size, embed_size, num_hiddens, num_layers)
        decoder = decoder_class(tgt_vocab_size, embed_size, num_hiddens, num_layers)
        return EncoderDecoder(encoder, decoder)

    attention = build(Seq2SeqAttentionDecoder, config["num_hiddens"])
    target = num_parameters(attention)
    candidates = range(config["num_hiddens"], 2 * config["num_hiddens"])
    plain_hiddens = min(
        candidates, key=lambda h: abs(num_parameters(build(Seq2SeqDecoder, h)) - target)
    )
    return build(Seq2SeqDecoder, plain_hiddens), attention


# --8<-- [end:make_models]


# --8<-- [start:loss_fn]
def _translation_loss(model: nn.Module, batch: Sequence[torch.Tensor]):
    """`fit`'s loss: masked cross-entropy, weighted by the number of real target tokens."""
    src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = batch
    logits = model(src, tgt_input, src_valid_len)
    return masked_cross_entropy(logits, tgt_label, tgt_valid_len), float(tgt_valid_len.sum())


# --8<-- [end:loss_fn]


def bahdanau_translate(
    model: EncoderDecoder,
    data: TranslationData,
    sentences: Sequence[str],
    beam_size: int = 1,
    batch_size: int = 256,
) -> list[Translation]:
    """Translate English sentences with greedy decoding (beam_size=1) or beam search.

    Args:
        model: A trained model of the experiment.
        data: The data it was trained on (for the vocabularies).
        sentences: Raw English sentences.
        beam_size: 1 for greedy decoding, more for beam search.
        batch_size: Sentences decoded together by greedy decoding.

    Returns:
        One `Translation` per sentence; `data.tgt_vocab.to_tokens(t.tokens)` gives the words.
    """
    results = []
    for start in range(0, len(sentences), batch_size):
        src, src_valid_len = data.encode_sources(sentences[start : start + batch_size])
        src = src[:, : int(src_valid_len.max())]
        args = (data.tgt_vocab.bos, data.tgt_vocab.eos, BAHDANAU_CONFIG["max_len"])
        if beam_size == 1:
            results += greedy_decode(model, src, src_valid_len, *args)
        else:
            results += beam_search(model, src, src_valid_len, *args, beam_size=beam_size)
    return results


def _train_and_evaluate(config: dict[str, Any]) -> dict[str, Any]:
    """Train both models on the same batches, then translate the test set with both."""
    data = bahdanau_data()
    set_seed(config["seed"])
    plain, attention = bahdanau_make_models(len(data.src_vocab), len(data.tgt_vocab), config)
    sources = [source for source, _ in data.test_pairs]
    result: dict[str, Any] = {"num_parameters": {}, "train_seconds": {}, "train_loss": {}}
    result |= {"state_dict": {}, "greedy": {}, "beam": {}, "num_hiddens": {}, "decode_seconds": {}}
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these small recurrent steps gain nothing from more threads
    try:
        for name, model in (("plain", plain), ("attention", attention)):
            set_seed(config["seed"])
            loader = bahdanau_data().train_loader  # the same batches for both models
            start = time.perf_counter()
            history = fit(
                model,
                loader,
                _translation_loss,
                num_epochs=config["num_epochs"],
                lr=config["lr"],
                grad_clip=config["grad_clip"],
                device="cpu",
            )
            result["train_seconds"][name] = time.perf_counter() - start
            result["train_loss"][name] = history.train_loss
            result["num_parameters"][name] = num_parameters(model)
            result["num_hiddens"][name] = model.encoder.rnn.hidden_size
            result["state_dict"][name] = model.state_dict()
            result["decode_seconds"][name] = {}
            for method, beam_size in (("greedy", 1), ("beam", config["beam_size"])):
                start = time.perf_counter()
                translations = bahdanau_translate(model, data, sources, beam_size)
                result["decode_seconds"][name][method] = time.perf_counter() - start
                result[method][name] = [
                    " ".join(data.tgt_vocab.to_tokens(t.tokens)) for t in translations
                ]
    finally:
        torch.set_num_threads(num_threads)
    return result


# --8<-- [start:experiment]
def bahdanau_cache_key() -> dict[str, Any]:
    """The experiment's cache key: everything its result depends on.

    `experiment_key` adds the source of every package module this one runs, the corpus
    version and the library versions to `BAHDANAU_CONFIG`; a digest of the sentence pairs
    themselves is added too, so any change of the data trains again.

    Returns:
        A dict of JSON values, for `cached`.
    """
    data = bahdanau_data()
    pairs = [data.train_pairs, data.valid_pairs, data.test_pairs]
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]
    return experiment_key({**BAHDANAU_CONFIG, "data": digest}, __name__)


def bahdanau_experiment() -> dict[str, Any]:
    """Train (or load from the cache) both models and their test-set translations.

    The first call trains (about a minute per model on two CPU cores); every later call
    with the same `bahdanau_cache_key` loads.

    Returns:
        A dict with, per model name ("plain", "attention"): "num_parameters",
        "num_hiddens", "train_seconds", "train_loss" (per epoch), "state_dict", the test
        translations "greedy" and "beam" (one string of tokens per test sentence) and the
        "decode_seconds" of each method.
    """
    return cached("bahdanau", bahdanau_cache_key(), lambda: _train_and_evaluate(BAHDANAU_CONFIG))


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
# Measurements on the test set


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
