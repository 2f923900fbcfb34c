"""The Transformer chapter's experiments: the Transformer against Bahdanau's model.

Everything runs on the Bahdanau chapter's data (`bahdanau_data`: its corpus, split and
batches) and is scored with its metric (`token_bleu` of greedy translations), so the results
sit next to that chapter's. In the order of the chapter: the model, its loss and its training
with a warmup schedule; the main run (with and without label smoothing); the
length-generalization split; post-norm against pre-norm; timings (decoding with and without
the key/value cache, and a training batch of each model). Each is cached with
`cached(name, experiment_key(config, __name__), ...)`: the build trains once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset

from attention_book.attention import DotProductAttention
from attention_book.data import LengthBucketSampler, TranslationData, tokenize
from attention_book.experiments.bahdanau import (
    BAHDANAU_CONFIG,
    bahdanau_data,
    bahdanau_make_models,
    bahdanau_translate,
    token_bleu,
)
from attention_book.seq2seq import EncoderDecoder, masked_cross_entropy, num_parameters
from attention_book.training import cached, experiment_key, fit, set_seed
from attention_book.training.schedules import schedule_per_step, warmup_inverse_sqrt
from attention_book.transformer import TransformerDecoder, TransformerEncoder

__all__ = [
    "LENGTH_SPLIT_CONFIG",
    "NORM_CONFIG",
    "TIMING_CONFIG",
    "TRANSFORMER_CONFIG",
    "label_smoothed_cross_entropy",
    "length_split",
    "set_need_weights",
    "transformer_chosen_smoothing",
    "transformer_decode_steps",
    "transformer_experiment",
    "transformer_length_experiment",
    "transformer_make_model",
    "transformer_norm_experiment",
    "transformer_timings",
    "transformer_trained_model",
]

#: The main run. Sized to the Bahdanau model's parameter count; no dropout, as there.
TRANSFORMER_CONFIG: dict[str, Any] = {
    "num_hiddens": 32,
    "ffn_num_hiddens": 128,  # 4 * num_hiddens, the paper's ratio
    "num_heads": 4,
    "num_blks": 2,
    "dropout": 0.0,
    "num_epochs": 5,
    "lr": 0.01,  # the peak of the warmup schedule
    "warmup_steps": 100,
    "betas": [0.9, 0.98],  # Adam as in Vaswani et al. (2017), section 5.3
    "eps": 1e-9,
    "grad_clip": 1.0,
    "label_smoothing": [0.0, 0.1],  # both are trained; validation BLEU picks one
    "seed": 0,
}

#: The length-generalization split: train on sources of at most this many tokens.
LENGTH_SPLIT_CONFIG: dict[str, Any] = {"max_train_length": 24}

#: Post-norm against pre-norm: the paper's depth, the main run's peak rate from the first step.
NORM_CONFIG: dict[str, Any] = {"num_blks": 6, "num_steps": 50}

#: Timings: decoding per sentence against output length, and one training batch per model.
TIMING_CONFIG: dict[str, Any] = {
    "output_lengths": [8, 16, 32, 64, 128, 256],
    "repeats": 3,
    "train_batches": 10,
}


# --8<-- [start:make_model]
def transformer_make_model(
    src_vocab_size: int,
    tgt_vocab_size: int,
    config: dict[str, Any] = TRANSFORMER_CONFIG,
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
    sizes = [config[k] for k in ("num_hiddens", "ffn_num_hiddens", "num_heads", "num_blks")]
    dropout = config["dropout"]
    encoder = TransformerEncoder(src_vocab_size, *sizes, dropout, norm_first=norm_first)
    decoder = TransformerDecoder(tgt_vocab_size, *sizes, dropout, norm_first=norm_first)
    return EncoderDecoder(encoder, decoder)


# --8<-- [end:make_model]


# --8<-- [start:label_smoothing]
def label_smoothed_cross_entropy(
    logits: Tensor, labels: Tensor, valid_lens: Tensor, label_smoothing: float = 0.0
) -> Tensor:
    """Mean cross-entropy over the real target tokens, against smoothed labels.

    With smoothing ``eps`` the target of each position is ``1 - eps`` on the reference token
    plus ``eps / vocab_size`` on every token (Szegedy et al., 2016), which PyTorch's
    ``cross_entropy(label_smoothing=eps)`` computes. With ``eps = 0`` this is
    `attention_book.seq2seq.masked_cross_entropy`.

    Args:
        logits: Scores over the target vocabulary.
        labels: Reference tokens.
        valid_lens: Number of real tokens of each target; later positions are padding.
        label_smoothing: ``eps``, from 0 (one-hot targets) to 1.

    Returns:
        The mean loss over all real tokens of the batch.

    Shapes:
        - logits: ``(batch, num_steps, vocab_size)``
        - labels: ``(batch, num_steps)``
        - valid_lens: ``(batch,)``

    Raises:
        ValueError: If the shapes disagree or ``label_smoothing`` is outside [0, 1].
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "logits must have shape (batch, num_steps, vocab_size) and labels (batch, "
            f"num_steps), got logits {tuple(logits.shape)} and labels {tuple(labels.shape)}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    mask = torch.arange(labels.shape[1], device=labels.device) < valid_lens[:, None]
    loss = F.cross_entropy(
        logits.transpose(1, 2), labels, reduction="none", label_smoothing=label_smoothing
    )  # (batch, num_steps)
    return (loss * mask).sum() / mask.sum().clamp(min=1)


# --8<-- [end:label_smoothing]


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
def _train(
    model: nn.Module,
    loader: DataLoader,
    config: dict[str, Any],
    label_smoothing: float,
    *,
    warmup: bool = True,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Train with Adam and the warmup schedule (or a constant rate); record every step's loss."""
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config["lr"], betas=tuple(config["betas"]), eps=config["eps"]
    )
    if warmup:
        schedule_per_step(optimizer, lambda step: warmup_inverse_sqrt(step, config["warmup_steps"]))
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
        config["num_epochs"] if max_steps is None else 1,
        optimizer=optimizer,
        grad_clip=config["grad_clip"],
        device="cpu",
    )
    seconds = time.perf_counter() - start
    set_need_weights(model, True)
    return {"train_seconds": seconds, "train_loss": history.train_loss, "step_loss": step_losses}


# --8<-- [end:train]


def _references(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [" ".join(tokenize(target)) for _, target in pairs]


def _translate(model: nn.Module, data: TranslationData, pairs) -> list[str]:
    """Greedy translations of the sources of ``pairs``, tokens joined by spaces."""
    translations = bahdanau_translate(model, data, [source for source, _ in pairs])
    return [" ".join(data.tgt_vocab.to_tokens(t.tokens)) for t in translations]


def _one_thread(compute):
    """Run ``compute()`` on one CPU thread, as the Bahdanau experiment trains."""
    num_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: more threads mostly add overhead
    try:
        return compute()
    finally:
        torch.set_num_threads(num_threads)


def _train_main(config: dict[str, Any]) -> dict[str, Any]:
    data = bahdanau_data()
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    runs = {}
    for eps in config["label_smoothing"]:
        set_seed(config["seed"])
        model = transformer_make_model(*sizes, config)
        run = _train(model, bahdanau_data().train_loader, config, eps)  # the same batches
        valid = _translate(model, data, data.valid_pairs)
        run["valid_bleu"] = token_bleu(valid, _references(data.valid_pairs))
        run["greedy"] = _translate(model, data, data.test_pairs)
        run["num_parameters"] = num_parameters(model)
        run["state_dict"] = model.state_dict()
        runs[str(eps)] = run
    return {"runs": runs}


# --8<-- [start:experiment]
def transformer_experiment() -> dict[str, Any]:
    """Train (or load) the Transformer on the standard split, without and with smoothing.

    Returns:
        ``{"runs": {str(eps): run}}`` for each label smoothing ``eps`` of the configuration;
        a run holds "train_seconds", "train_loss" (per epoch), "step_loss", "valid_bleu",
        the greedy test translations "greedy", "num_parameters" and "state_dict".
    """
    key = experiment_key(TRANSFORMER_CONFIG, __name__)
    return cached("transformer", key, lambda: _one_thread(lambda: _train_main(TRANSFORMER_CONFIG)))


# --8<-- [end:experiment]


def transformer_chosen_smoothing(result: dict[str, Any] | None = None) -> str:
    """The label smoothing (a key of ``result["runs"]``) with the higher validation BLEU.

    Args:
        result: `transformer_experiment`'s result (loaded if None).

    Returns:
        The key, e.g. ``"0.1"``.
    """
    runs = (result or transformer_experiment())["runs"]
    return max(runs, key=lambda eps: runs[eps]["valid_bleu"])


def transformer_trained_model() -> tuple[EncoderDecoder, TranslationData]:
    """The trained Transformer chosen on validation BLEU (from the cache), and its data.

    Returns:
        (model in eval mode, data).
    """
    result = transformer_experiment()
    data = bahdanau_data()
    model = transformer_make_model(len(data.src_vocab), len(data.tgt_vocab))
    model.load_state_dict(result["runs"][transformer_chosen_smoothing(result)]["state_dict"])
    return model.eval(), data


# ---------------------------------------------------------------------------------------------
# A harder test: train on short sources, test on longer ones


# --8<-- [start:length_split]
def length_split(
    data: TranslationData, max_train_length: int
) -> tuple[DataLoader, list[tuple[str, str]]]:
    """Batches of the training pairs with short sources, and the pairs to test on.

    The loader is built like `bahdanau_data`'s (similar lengths together, a seeded order) from
    the training pairs whose source has at most ``max_train_length`` tokens. The test pairs
    are the validation and test splits together: none is trained on, and they hold sources of
    every length.

    Args:
        data: `bahdanau_data()`.
        max_train_length: Longest source (in tokens) kept for training.

    Returns:
        (training loader, held-out pairs).
    """
    lengths = [len(tokenize(source)) for source, _ in data.train_pairs]
    keep = [i for i, n in enumerate(lengths) if n <= max_train_length]
    sampler = LengthBucketSampler(
        [lengths[i] for i in keep],
        data.train_loader.batch_sampler.batch_size,
        torch.Generator().manual_seed(BAHDANAU_CONFIG["seed"]),
    )
    loader = DataLoader(
        Subset(data.train_loader.dataset, keep),
        batch_sampler=sampler,
        collate_fn=data.train_loader.collate_fn,
    )
    return loader, data.valid_pairs + data.test_pairs


# --8<-- [end:length_split]


def _bahdanau_loss(model: nn.Module, batch: Sequence[Tensor]) -> tuple[Tensor, float]:
    src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = batch
    logits = model(src, tgt_input, src_valid_len)
    return masked_cross_entropy(logits, tgt_label, tgt_valid_len), float(tgt_valid_len.sum())


def _train_length_split(config: dict[str, Any]) -> dict[str, Any]:
    data = bahdanau_data()
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    loader, held_out = length_split(data, config["max_train_length"])
    result: dict[str, Any] = {"num_train_pairs": len(loader.dataset)}
    set_seed(TRANSFORMER_CONFIG["seed"])
    transformer = transformer_make_model(*sizes)
    run = _train(transformer, loader, TRANSFORMER_CONFIG, config["label_smoothing"])
    run["greedy"] = _translate(transformer, data, held_out)
    result["transformer"] = run
    set_seed(BAHDANAU_CONFIG["seed"])  # the Bahdanau chapter's model, initialized as there
    _, attention = bahdanau_make_models(*sizes)
    loader, _ = length_split(data, config["max_train_length"])  # the same batches again
    start = time.perf_counter()
    history = fit(
        attention,
        loader,
        _bahdanau_loss,
        num_epochs=BAHDANAU_CONFIG["num_epochs"],
        lr=BAHDANAU_CONFIG["lr"],
        grad_clip=BAHDANAU_CONFIG["grad_clip"],
        device="cpu",
        seed=BAHDANAU_CONFIG["seed"],
    )
    result["bahdanau"] = {
        "train_seconds": time.perf_counter() - start,
        "train_loss": history.train_loss,
        "greedy": _translate(attention, data, held_out),
    }
    return result


def transformer_length_experiment() -> dict[str, Any]:
    """Train (or load) both attention models on sources of at most ``max_train_length`` tokens.

    The Transformer uses the main run's configuration and the label smoothing chosen there;
    the Bahdanau model uses the Bahdanau chapter's. Both are tested on the validation and test
    splits (`length_split`).

    Returns:
        "num_train_pairs", and for "transformer" and "bahdanau": "train_seconds",
        "train_loss" and the greedy translations "greedy" of the held-out pairs.
    """
    config = {**LENGTH_SPLIT_CONFIG, "label_smoothing": float(transformer_chosen_smoothing())}
    key = experiment_key({**config, "transformer": TRANSFORMER_CONFIG}, __name__)
    return cached(
        "transformer-length", key, lambda: _one_thread(lambda: _train_length_split(config))
    )


# ---------------------------------------------------------------------------------------------
# Post-norm or pre-norm


def _train_norms(config: dict[str, Any]) -> dict[str, Any]:
    data = bahdanau_data()
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    deep = {**TRANSFORMER_CONFIG, "num_blks": config["num_blks"]}
    result = {}
    for name, norm_first in (("post-norm", False), ("pre-norm", True)):
        set_seed(TRANSFORMER_CONFIG["seed"])
        model = transformer_make_model(*sizes, deep, norm_first=norm_first)
        loader = bahdanau_data().train_loader  # the same batches for both
        run = _train(model, loader, deep, 0.0, warmup=False, max_steps=config["num_steps"])
        result[name] = run | {"num_parameters": num_parameters(model)}
    return result


def transformer_norm_experiment() -> dict[str, Any]:
    """Train (or load) a deep post-norm and a deep pre-norm Transformer without warmup.

    Both start from the same seed, see the same batches and use the main run's peak rate
    from the first step, for ``NORM_CONFIG["num_steps"]`` steps.

    Returns:
        For "post-norm" and "pre-norm": "step_loss" (every step's training loss),
        "train_seconds" and "num_parameters".
    """
    key = experiment_key({**NORM_CONFIG, "transformer": TRANSFORMER_CONFIG}, __name__)
    return cached("transformer-norm", key, lambda: _one_thread(lambda: _train_norms(NORM_CONFIG)))


# ---------------------------------------------------------------------------------------------
# Timings: decoding with and without the key/value cache, and one training batch


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


def _best_time(compute, repeats: int) -> float:
    """The shortest of ``repeats`` runs of ``compute()``: the least disturbed one."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compute()
        times.append(time.perf_counter() - start)
    return min(times)


def _time_all(config: dict[str, Any]) -> dict[str, Any]:
    model, data = transformer_trained_model()
    set_need_weights(model, False)  # time the attention a deployed decoder would use
    src, src_valid_len = data.encode_sources([data.test_pairs[0][0]])
    src, bos = src[:, : int(src_valid_len)], data.tgt_vocab.bos
    decode: dict[str, list[float]] = {"cache": [], "no cache": []}
    tokens: dict[str, list[Tensor]] = {"cache": [], "no cache": []}
    for num_steps in config["output_lengths"]:
        for name in decode:
            model.decoder.use_cache = name == "cache"
            run = functools.partial(
                transformer_decode_steps, model, src, src_valid_len, bos, num_steps
            )
            decode[name].append(_best_time(run, config["repeats"]))
            tokens[name].append(run())
    identical = all(map(torch.equal, tokens["cache"], tokens["no cache"]))
    # One training batch of each model, one model after the other on the same batches: their
    # ratio depends less on the machine's load than the trainings' own timings do.
    sizes = len(data.src_vocab), len(data.tgt_vocab)
    plain, attention = bahdanau_make_models(*sizes)
    models = {"plain": plain, "attention": attention, "transformer": transformer_make_model(*sizes)}
    batches = [b for _, b in zip(range(config["train_batches"]), data.train_loader, strict=False)]
    train = {}
    for name, candidate in models.items():
        optimizer = torch.optim.Adam(set_need_weights(candidate, False).parameters())

        def steps(candidate=candidate, optimizer=optimizer) -> None:
            for batch in batches:
                optimizer.zero_grad()
                _bahdanau_loss(candidate, batch)[0].backward()
                optimizer.step()

        train[name] = _best_time(steps, config["repeats"]) / len(batches)
    return {"decode_seconds": decode, "identical": identical, "train_batch_seconds": train}


def transformer_timings() -> dict[str, Any]:
    """Time (or load) decoding with and without the cache, and a training batch per model.

    Returns:
        "decode_seconds": for "cache" and "no cache", the time to decode the first test
        sentence to each of ``TIMING_CONFIG["output_lengths"]`` tokens (best of ``repeats``);
        "identical": whether both generated the same tokens at every length;
        "train_batch_seconds": seconds per training batch of "plain", "attention" (the two
        models of the Bahdanau chapter) and "transformer", measured one after the other.
    """
    key = experiment_key({**TIMING_CONFIG, "transformer": TRANSFORMER_CONFIG}, __name__)
    return cached("transformer-timings", key, lambda: _one_thread(lambda: _time_all(TIMING_CONFIG)))
