"""The Transformer chapter's main experiment: the Transformer against Bahdanau's model.

Everything runs on the Bahdanau chapter's data (`bahdanau_data`: its corpus, split and
batches) and is scored with its metric (`token_bleu` of greedy translations), so the results
sit next to that chapter's. In the order of the chapter: the configuration, the model, its
training with a warmup schedule and label smoothing (`transformer_train`), and the main run
(`transformer_run`, with and without label smoothing; the chapter's model uses the paper's
ε = 0.1). Its result is stored under the key it declares (its frozen configuration, this
module's `VERSION`, the corpus, the Bahdanau experiment's version, the library versions), so
the build trains once and a refactor trains nothing; `RUNS` declares it for the probe test and
the referee. The experiments beyond the standard split (length generalization, post-norm
against pre-norm, decoding with and without the cache) are in
`attention_book.experiments.transformer_studies` and
`attention_book.experiments.transformer_timings`; their names can still be imported from here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attention_book.attention import DotProductAttention
from attention_book.data.corpus import corpus_digest
from attention_book.data.text import tokenize
from attention_book.data.translation import TranslationData
from attention_book.experiments import bahdanau
from attention_book.experiments.bahdanau import (
    bahdanau_data,
    bahdanau_translate,
    limited,
    token_bleu,
)
from attention_book.losses import label_smoothed_cross_entropy
from attention_book.seq2seq import EncoderDecoder
from attention_book.store import Run, cached, declared_key
from attention_book.timing import torch_threads
from attention_book.training.loop import fit, set_seed
from attention_book.training.metrics import num_parameters
from attention_book.training.schedules import schedule_per_step, warmup_inverse_sqrt
from attention_book.transformer import TransformerEncoder
from attention_book.transformer_decoder import TransformerDecoder

__all__ = [
    "MODEL_SMOOTHING",
    "RUNS",
    "TRANSFORMER_CONFIG",
    "TRANSFORMER_PROBE",
    "VERSION",
    "TransformerConfig",
    "set_need_weights",
    "transformer_cache_key",
    "transformer_code_inputs",
    "transformer_experiment",
    "transformer_headline",
    "transformer_make_model",
    "transformer_model_smoothing",
    "transformer_references",
    "transformer_run",
    "transformer_run_name",
    "transformer_smoothing_run",
    "transformer_train",
    "transformer_trained_model",
    "transformer_translate",
]

# --8<-- [start:config]
#: Bump when what `transformer_run` computes changes for the same configuration (the model,
#: its loss, its training, its decoding); not for a refactor, a docstring or a moved helper.
#: The runs of `attention_book.experiments.transformer_studies` train this model too: their
#: keys hold this version as well.
VERSION = 1


@dataclass(frozen=True)
class TransformerConfig:
    """The main run's settings, sized to the Bahdanau model's parameter count.

    Attributes:
        num_hiddens: Width of the model (``d_model``).
        ffn_num_hiddens: Hidden width of the position-wise FFNs: 4 * num_hiddens, the paper's
            ratio.
        num_heads: Heads per attention layer.
        num_blks: Encoder blocks, and decoder blocks.
        dropout: Dropout (none, as in the Bahdanau chapter).
        num_epochs: Passes over the training split.
        lr: The peak of the warm-up schedule.
        warmup_steps: Steps of linear warm-up.
        betas: Adam's betas, as in Vaswani et al. (2017), section 5.3.
        eps: Adam's epsilon, as there.
        grad_clip: Largest global norm of the gradients.
        label_smoothing: Each is trained; the chapter's model is the one with
            `MODEL_SMOOTHING`.
        seed: Seed of the initialization.
        max_batches: Train on the first this many batches of each epoch (the probe); None
            for all.
        max_sentences: Translate only the first this many sentences of each split (the
            probe); None for all.
    """

    num_hiddens: int = 32
    ffn_num_hiddens: int = 128
    num_heads: int = 4
    num_blks: int = 2
    dropout: float = 0.0
    num_epochs: int = 5
    lr: float = 0.01
    warmup_steps: int = 100
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    grad_clip: float = 1.0
    label_smoothing: tuple[float, ...] = (0.0, 0.1)
    seed: int = 0
    max_batches: int | None = None
    max_sentences: int | None = None


#: The main run of the chapter.
TRANSFORMER_CONFIG = TransformerConfig()
#: The label smoothing of the chapter's model: the paper's ε (Vaswani et al., 2017, section
#: 5.4), fixed before any training. The run without smoothing is its comparison.
MODEL_SMOOTHING = 0.1
#: Its probe: four steps, two of warm-up and two past it, on six sentences.
TRANSFORMER_PROBE = TransformerConfig(num_epochs=1, warmup_steps=2, max_batches=4, max_sentences=6)
# --8<-- [end:config]


# --8<-- [start:make_model]
def transformer_make_model(
    src_vocab_size: int,
    tgt_vocab_size: int,
    config: TransformerConfig = TRANSFORMER_CONFIG,
    *,
    norm_first: bool = False,
) -> EncoderDecoder:
    """A Transformer encoder-decoder of the experiment's size.

    Args:
        src_vocab_size: Size of the source vocabulary.
        tgt_vocab_size: Size of the target vocabulary.
        config: Sizes: num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout.
        norm_first: ``False`` for post-norm (the paper), ``True`` for pre-norm.

    Returns:
        The model, ``EncoderDecoder(TransformerEncoder, TransformerDecoder)``.
    """
    sizes = config.num_hiddens, config.ffn_num_hiddens, config.num_heads, config.num_blks
    dropout = config.dropout
    encoder = TransformerEncoder(src_vocab_size, *sizes, dropout, norm_first=norm_first)
    decoder = TransformerDecoder(tgt_vocab_size, *sizes, dropout, norm_first=norm_first)
    return EncoderDecoder(encoder, decoder)


# --8<-- [end:make_model]


def set_need_weights(model: nn.Module, need_weights: bool) -> nn.Module:
    """Run every attention of ``model`` fused (``False``: training needs no weights) or not.

    Both paths of `DotProductAttention` compute the same function; only the explicit one
    (``True``) keeps the weights for plots.

    Args:
        model: Any model built from the book's attention layers.
        need_weights: The path to use.

    Returns:
        The same model.
    """
    for module in model.modules():
        if isinstance(module, DotProductAttention):
            module.need_weights = need_weights
    return model


# --8<-- [start:train]
def transformer_train(
    model: nn.Module,
    loader: Any,
    config: TransformerConfig,
    label_smoothing: float,
    *,
    warmup: bool = True,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Train with Adam and the warmup schedule (or a constant rate); record every step's loss.

    Args:
        model: The Transformer.
        loader: Training batches.
        config: The optimizer's and the schedule's settings.
        label_smoothing: The loss's label smoothing.
        warmup: Follow the warm-up schedule (else a constant rate, ``config.lr``).
        max_steps: Stop after this many steps, in one epoch (else ``config.num_epochs``).

    Returns:
        "train_seconds", "train_loss" (per epoch) and "step_loss" (every step).
    """
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.lr, betas=config.betas, eps=config.eps
    )
    if warmup:
        schedule_per_step(optimizer, lambda step: warmup_inverse_sqrt(step, config.warmup_steps))
    step_losses: list[float] = []

    def loss_fn(model: nn.Module, batch: Sequence[Tensor]) -> tuple[Tensor, float]:
        src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = batch
        logits = model(src, tgt_input, src_valid_len)
        loss = label_smoothed_cross_entropy(logits, tgt_label, tgt_valid_len, label_smoothing)
        step_losses.append(loss.item())
        return loss, float(tgt_valid_len.sum())

    if max_steps is not None:
        loader = [batch for _, batch in zip(range(max_steps), loader, strict=False)]
    set_need_weights(model, False)  # the fused path: training needs no attention weights
    start = time.perf_counter()
    history = fit(
        model,
        loader,
        loss_fn,
        config.num_epochs if max_steps is None else 1,
        optimizer=optimizer,
        grad_clip=config.grad_clip,
        device="cpu",
    )
    seconds = time.perf_counter() - start
    set_need_weights(model, True)
    return {"train_seconds": seconds, "train_loss": history.train_loss, "step_loss": step_losses}


# --8<-- [end:train]


def transformer_references(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The reference translations of sentence pairs, as BLEU scores them: tokens and spaces.

    Args:
        pairs: (source, target) sentences.

    Returns:
        One string of the target's tokens per pair.
    """
    return [" ".join(tokenize(target)) for _, target in pairs]


def transformer_translate(
    model: nn.Module, data: TranslationData, pairs: Sequence[tuple[str, str]]
) -> list[str]:
    """Greedy translations of the sources of sentence pairs, tokens joined by spaces.

    Args:
        model: A trained encoder-decoder.
        data: Its data (for the vocabularies).
        pairs: (source, target) sentences; the targets are not used.

    Returns:
        One string of tokens per pair.
    """
    translations = bahdanau_translate(model, data, [source for source, _ in pairs])
    return [" ".join(data.tgt_vocab.to_tokens(t.tokens)) for t in translations]


# --8<-- [start:run]
def transformer_run(
    config: TransformerConfig = TRANSFORMER_CONFIG, smoothings: Sequence[float] | None = None
) -> dict[str, Any]:
    """Train one Transformer per label smoothing on the same batches; translate with each.

    The full result (`transformer_experiment`) and the probe (`TRANSFORMER_PROBE`) both come
    from here. Each model starts from the seed and sees the same batches, so one trained
    alone is the one trained beside the others. Training runs on one thread: small matrices
    gain little from more.

    Args:
        config: The run's settings.
        smoothings: Which of ``config.label_smoothing`` to train (None: all).

    Returns:
        See `transformer_experiment`: the runs of these label smoothings.
    """
    data = bahdanau_data()
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    # The probe translates the first few sentences of each split; the full run all of them.
    valid_pairs = data.valid_pairs[: config.max_sentences]
    test_pairs = data.test_pairs[: config.max_sentences]
    runs = {}
    with torch_threads(1):
        for eps in config.label_smoothing if smoothings is None else smoothings:
            set_seed(config.seed)
            model = transformer_make_model(*sizes, config)
            loader = limited(bahdanau_data().train_loader, config.max_batches)  # same batches
            run = transformer_train(model, loader, config, eps)
            valid = transformer_translate(model, data, valid_pairs)
            run["valid_bleu"] = token_bleu(valid, transformer_references(valid_pairs))
            run["greedy"] = transformer_translate(model, data, test_pairs)
            run["num_parameters"] = num_parameters(model)
            run["state_dict"] = model.state_dict()
            runs[str(eps)] = run
    return {"runs": runs}


# --8<-- [end:run]


# --8<-- [start:experiment]
def transformer_cache_key(config: TransformerConfig = TRANSFORMER_CONFIG) -> dict[str, Any]:
    """The main run's key in the store: what its result depends on, as it declares it.

    The configuration, this module's `VERSION`, the corpus it reads, the version of the
    Bahdanau experiment whose batches, decoding and metric it reuses, and the library versions
    (`declared_key`): no source code, so a refactor trains nothing.

    Args:
        config: The run's settings.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(config, VERSION, corpus=corpus_digest(), bahdanau_version=bahdanau.VERSION)


def transformer_code_inputs() -> dict[str, Any]:
    """What a run that runs this experiment's code (and the Bahdanau chapter's) reads besides it.

    The corpus, and the versions of both experiments: for the keys of the runs beyond the
    standard split (`attention_book.experiments.transformer_studies`,
    `attention_book.experiments.transformer_timings`), which train or time these models.

    Returns:
        ``{"corpus": ..., "transformer_version": ..., "bahdanau_version": ...}``.
    """
    return {
        "corpus": corpus_digest(),
        "transformer_version": VERSION,
        "bahdanau_version": bahdanau.VERSION,
    }


def transformer_run_name(eps: float | str) -> str:
    """The name in the store of the main run's model with label smoothing `eps`.

    Args:
        eps: The label smoothing, as a number or as a key of ``result["runs"]``.

    Returns:
        ``"transformer-smoothing-0"``, ``"transformer-smoothing-0p1"``, ...
    """
    return f"transformer-smoothing-{float(eps):g}".replace(".", "p")


def transformer_smoothing_run(eps: float) -> dict[str, Any]:
    """Train (or load) the Transformer of one label smoothing on the standard split.

    Each label smoothing is a run of its own in the store (``transformer-smoothing-0`` and
    ``transformer-smoothing-0p1`` for ε = 0.1), under the main run's key: each trains in
    under a minute on one CPU core, and two cores train both at once.

    Args:
        eps: One of ``TRANSFORMER_CONFIG.label_smoothing``.

    Returns:
        ``{"runs": {str(eps): run}}``, as `transformer_experiment` for that one.
    """
    key = transformer_cache_key()
    return cached(
        # transformer_run_name's value, written out: the first-run notes of the chapters read
        # the run's name from this call's source (`cached_runs`), and cannot follow a call.
        f"transformer-smoothing-{eps:g}".replace(".", "p"),
        key,
        lambda: transformer_run(TRANSFORMER_CONFIG, (eps,)),
    )


def transformer_experiment() -> dict[str, Any]:
    """Train (or load) the Transformer on the standard split, without and with smoothing.

    Returns:
        ``{"runs": {str(eps): run}}`` for each label smoothing ``eps`` of the configuration;
        a run holds "train_seconds", "train_loss" (per epoch), "step_loss", "valid_bleu",
        the greedy test translations "greedy", "num_parameters" and "state_dict".
    """
    parts = [transformer_smoothing_run(eps) for eps in TRANSFORMER_CONFIG.label_smoothing]
    return {"runs": {eps: run for part in parts for eps, run in part["runs"].items()}}


# --8<-- [end:experiment]


def transformer_model_smoothing(result: dict[str, Any] | None = None) -> str:
    """The label smoothing of the chapter's model, as a key of ``result["runs"]``: "0.1".

    The chapter's model uses the paper's ε = `MODEL_SMOOTHING`, fixed before any training;
    the run with ε = 0 is trained beside it as a comparison. (Letting validation BLEU choose
    made the choice depend on the machine: the two scores lie within the spread that the CPU's
    rounding and the seed give each of them.)

    Args:
        result: `transformer_experiment`'s result (loaded if None).

    Returns:
        The key.

    Raises:
        ValueError: If the result has no run with that label smoothing.
    """
    runs = (result or transformer_experiment())["runs"]
    if str(MODEL_SMOOTHING) not in runs:
        raise ValueError(
            f"the result has no run with label smoothing {MODEL_SMOOTHING}: {list(runs)}"
        )
    return str(MODEL_SMOOTHING)


def transformer_trained_model(
    config: TransformerConfig = TRANSFORMER_CONFIG,
) -> tuple[EncoderDecoder, TranslationData]:
    """The chapter's trained Transformer (label smoothing `MODEL_SMOOTHING`), and its data.

    Args:
        config: The main run's configuration: the stored result; any other (a probe's) is
            trained afresh.

    Returns:
        (model in eval mode, data).
    """
    result = transformer_experiment() if config == TRANSFORMER_CONFIG else transformer_run(config)
    data = bahdanau_data()
    model = transformer_make_model(len(data.src_vocab), len(data.tgt_vocab), config)
    model.load_state_dict(result["runs"][transformer_model_smoothing(result)]["state_dict"])
    return model.eval(), data


def transformer_headline(result: dict[str, Any]) -> dict[str, float]:
    """The main run's numbers: test and validation BLEU of each label smoothing.

    Args:
        result: `transformer_experiment`'s result.

    Returns:
        ``{"test BLEU, label smoothing 0.0": ..., "validation BLEU, ...": ...}``.
    """
    references = transformer_references(bahdanau_data().test_pairs)
    numbers = {}
    for eps, run in result["runs"].items():
        numbers[f"test BLEU, label smoothing {eps}"] = token_bleu(run["greedy"], references)
        numbers[f"validation BLEU, label smoothing {eps}"] = run["valid_bleu"]
    return numbers


#: The stored runs of this module, one per label smoothing, for the probe test and the referee
#: (which holds their BLEU to the spread recorded over other CPU arithmetic and seeds).
RUNS = tuple(
    Run(
        transformer_run_name(eps),
        VERSION,
        probe=lambda eps=eps: transformer_run(TRANSFORMER_PROBE, (eps,)),
        result=lambda eps=eps: transformer_smoothing_run(eps),
        key=transformer_cache_key,
        headline=transformer_headline,
        tolerance=0.5,
    )
    for eps in TRANSFORMER_CONFIG.label_smoothing
)
