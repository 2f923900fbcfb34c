"""The Bahdanau chapter's experiment and figures (also used by the Introduction).

The experiment trains two GRU encoder-decoders on the built-in English→French corpus: one
whose decoder sees the source only through the encoder's final state (a fixed-length context
vector), and one with Bahdanau attention. Both get the same data, the same optimizer, the
same number of epochs and (within a few percent) the same number of parameters. The result
(weights, timings, test translations) is cached by configuration with
`attention_book.training.cached`, so the site build and the chapter's snippets train once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import nn

from attention_book import seq2seq
from attention_book.data import TranslationData, load_translation_data, tokenize
from attention_book.plotting import BOOK_STYLE, new_figure, show_heatmaps
from attention_book.seq2seq import (
    EncoderDecoder,
    Seq2SeqAttentionDecoder,
    Seq2SeqDecoder,
    Seq2SeqEncoder,
    beam_search,
    greedy_decode,
    masked_cross_entropy,
    num_parameters,
)
from attention_book.training import bleu, cached, fit, set_seed, source_hash

__all__ = [
    "BAHDANAU_CONFIG",
    "LENGTH_BUCKETS",
    "bahdanau_alignment",
    "bahdanau_bleu_by_length",
    "bahdanau_data",
    "bahdanau_decoding_table",
    "bahdanau_diagram",
    "bahdanau_experiment",
    "bahdanau_findings",
    "bahdanau_make_models",
    "bahdanau_samples_table",
    "bahdanau_summary",
    "bahdanau_trained_models",
    "bahdanau_translate",
    "introduction_bottleneck_diagram",
    "introduction_exact_match_by_length",
]

#: Everything the experiment depends on. Changing any value trains again (new cache entry).
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
) -> list[seq2seq.Translation]:
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


def _cache_config() -> dict[str, Any]:
    """The cache key: the configuration, a hash of the model code, a digest of the data.

    The data enter as a digest of the sentence pairs themselves, so a change of the corpus
    trains again while a refactoring of the loaders does not.
    """
    data = bahdanau_data()
    pairs = [data.train_pairs, data.valid_pairs, data.test_pairs]
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]
    code = source_hash(
        seq2seq, bahdanau_make_models, _translation_loss, bahdanau_translate, _train_and_evaluate
    )
    return {**BAHDANAU_CONFIG, "code": code, "data": digest}


# --8<-- [start:experiment]
def bahdanau_experiment() -> dict[str, Any]:
    """Train (or load from the cache) both models and their test-set translations.

    The cache key holds `BAHDANAU_CONFIG` and a hash of the model code, so the first call
    trains (about a minute per model on two CPU cores) and every later call loads.

    Returns:
        A dict with, per model name ("plain", "attention"): "num_parameters",
        "num_hiddens", "train_seconds", "train_loss" (per epoch), "state_dict", the test
        translations "greedy" and "beam" (one string of tokens per test sentence) and the
        "decode_seconds" of each method.
    """
    return cached("bahdanau", _cache_config(), lambda: _train_and_evaluate(BAHDANAU_CONFIG))


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


def _references_and_lengths() -> tuple[list[str], list[int]]:
    data = bahdanau_data()
    references = [" ".join(tokenize(target)) for _, target in data.test_pairs]
    lengths = [len(tokenize(source)) for source, _ in data.test_pairs]
    return references, lengths


def _bucket_label(low: int, high: int) -> str:
    return f"{low}-{high}" if high < 60 else f"{low}+"


def _bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU of space-separated token strings (sacrebleu, no further tokenization)."""
    return bleu([h.split() for h in hypotheses], [r.split() for r in references])


def _bleu_by_bucket(hypotheses: list[str], references: list[str], lengths: list[int]):
    scores, counts = [], []
    for low, high in LENGTH_BUCKETS:
        chosen = [i for i, n in enumerate(lengths) if low <= n <= high]
        scores.append(_bleu([hypotheses[i] for i in chosen], [references[i] for i in chosen]))
        counts.append(len(chosen))
    return scores, counts


def bahdanau_bleu_by_length() -> Figure:
    """Test BLEU of both models against source length (the shape of Bahdanau's Figure 2)."""
    result = bahdanau_experiment()
    references, lengths = _references_and_lengths()
    fig = new_figure((6.0, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, label, style in (
            ("attention", "with Bahdanau attention", "o-"),
            ("plain", "without attention (fixed context)", "s--"),
        ):
            scores, counts = _bleu_by_bucket(result["greedy"][name], references, lengths)
            ax.plot(range(len(scores)), scores, style, label=label)
        ax.set_xticks(
            range(len(counts)),
            [f"{_bucket_label(*b)}\n({c})" for b, c in zip(LENGTH_BUCKETS, counts, strict=True)],
        )
        ax.set_xlabel("source length in tokens (number of test sentences)")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(0, 100)
        ax.legend(loc="lower left")
        fig.tight_layout()
    return fig


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def bahdanau_summary() -> str:
    """A Markdown table: parameters, hidden size, training time, final loss, overall BLEU."""
    result = bahdanau_experiment()
    references, _ = _references_and_lengths()
    rows = []
    for name, label in (("plain", "without attention"), ("attention", "Bahdanau attention")):
        rows.append(
            [
                label,
                f"{result['num_parameters'][name]:,}",
                str(result["num_hiddens"][name]),
                f"{result['train_seconds'][name]:.0f} s",
                f"{result['train_loss'][name][-1]:.3f}",
                f"{_bleu(result['greedy'][name], references):.1f}",
            ]
        )
    header = ["model", "parameters", "num_hiddens", "training time", "final train loss"]
    return _table([*header, "test BLEU (greedy)"], rows)


def bahdanau_decoding_table() -> str:
    """A Markdown table: test BLEU with greedy decoding and with beam search, both models."""
    result = bahdanau_experiment()
    references, lengths = _references_and_lengths()
    long_ones = [i for i, n in enumerate(lengths) if n >= 25]
    rows, changes = [], []
    for name, label in (("plain", "without attention"), ("attention", "with attention")):
        row = [label]
        gain = _bleu(result["beam"][name], references) - _bleu(result["greedy"][name], references)
        changes.append(f"{gain:+.1f} points for the model {label.lower()}")
        for method in ("greedy", "beam"):
            hypotheses = result[method][name]
            row.append(f"{_bleu(hypotheses, references):.1f}")
            long_bleu = _bleu(
                [hypotheses[i] for i in long_ones], [references[i] for i in long_ones]
            )
            row.append(f"{long_bleu:.1f}")
        rows.append(row)
    beam = BAHDANAU_CONFIG["beam_size"]
    header = [
        "model",
        "greedy: all",
        "greedy: 25+ tokens",
        f"beam {beam}: all",
        f"beam {beam}: 25+ tokens",
    ]
    seconds = result["decode_seconds"]["attention"]
    return _table(header, rows) + (
        f"\nOn the whole test set, beam search with a beam of {beam} changes BLEU by "
        f"{changes[0]} and by {changes[1]}. Decoding the test set with it took "
        f"{seconds['beam'] / seconds['greedy']:.0f} times as long as greedy decoding "
        "with the attention model.\n"
    )


def bahdanau_samples_table() -> str:
    """A Markdown table of the 5 longest test sentences and both models' translations."""
    result = bahdanau_experiment()
    data = bahdanau_data()
    lengths = [len(tokenize(source)) for source, _ in data.test_pairs]
    longest = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))[:5]
    rows = []
    for i in longest:
        source, reference = data.test_pairs[i]
        rows.append(
            [
                f"{source} ({lengths[i]} tokens)",
                " ".join(tokenize(reference)),
                result["greedy"]["plain"][i],
                result["greedy"]["attention"][i],
            ]
        )
    return _table(["source", "reference", "without attention", "with attention"], rows)


def _alignment_example(data: TranslationData) -> int:
    """Index of the longest test sentence of at most 22 tokens with a full date in it."""
    candidates = [
        (len(tokenize(source)), -i)
        for i, (source, _) in enumerate(data.test_pairs)
        if len(tokenize(source)) <= 22 and " at " in source and ", 20" in source
    ]
    return -max(candidates)[1]


def bahdanau_alignment() -> Figure:
    """Attention weights of the attention model on a long test sentence (greedy decoding)."""
    _, attention, data = bahdanau_trained_models()
    source = data.test_pairs[_alignment_example(data)][0]
    (translation,) = bahdanau_translate(attention, data, [source])
    source_tokens = [*tokenize(source), "<eos>"]
    target_tokens = data.tgt_vocab.to_tokens(translation.tokens)
    size = 0.26
    return show_heatmaps(
        translation.attention_weights[:, : len(source_tokens)],
        xlabel="source (English)",
        ylabel="generated (French)",
        figsize=(size * len(source_tokens) + 1.0, size * len(target_tokens) + 1.0),
        xticklabels=source_tokens,
        yticklabels=target_tokens,
    )


def _box(ax, x, y, text, color, width=0.8, height=0.5):
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.02",
            facecolor=color,
            edgecolor="black",
            linewidth=0.8,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _arrow(ax, start, end, color="black", width=1.0, style="-|>", rad=0.0):
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=9,
            color=color,
            linewidth=width,
            connectionstyle=f"arc3,rad={rad}",
        )
    )


def _diagram_axes(figsize: tuple[float, float], xlim, ylim):
    fig = new_figure(figsize)
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def bahdanau_diagram() -> Figure:
    """Diagram of one decoder step: s_{t'-1} queries every h_t; the context enters the GRU."""
    fig, ax = _diagram_axes((7.6, 3.9), (-0.6, 10.2), (-0.8, 4.6))
    words = ["we", "sold", "six", "books", "<eos>"]
    weights = [0.05, 0.1, 0.7, 0.1, 0.05]
    context = (5.6, 3.2)
    for t, (word, weight) in enumerate(zip(words, weights, strict=True)):
        x = 0.9 * t
        ax.text(x, 0.15, word, ha="center", va="center", fontsize=9)
        _arrow(ax, (x, 0.35), (x, 0.72))
        _box(ax, x, 1.0, f"$h_{t + 1}$", "#cfe2f3", width=0.7)
        if t:
            _arrow(ax, (x - 0.55, 1.0), (x - 0.35, 1.0))
        _arrow(
            ax,
            (x, 1.27),
            (context[0] - 0.4, context[1] - 0.27),
            color="#c0392b",
            width=0.5 + 6 * weight,
            style="-",
        )
        ax.text(x, -0.2, f"{weight:.2f}", fontsize=8, color="#c0392b", ha="center")
    ax.text(1.8, -0.65, "encoder states: keys and values", ha="center", fontsize=9)
    ax.text(
        0.0,
        3.9,
        r"weights $\alpha_{t'\,t} = \mathrm{softmax}_t\; a(s_{t'-1}, h_t)$",
        fontsize=9,
        color="#c0392b",
    )
    _box(ax, *context, r"$c_{t'} = \sum_t \alpha_{t'\,t}\, h_t$", "#f9e79f", width=1.9)
    _box(ax, 8.4, 1.0, "$s_{t'-1}$", "#d5f5e3", width=0.9)
    _arrow(ax, (8.0, 1.2), (6.3, 2.93))
    ax.text(6.75, 1.75, "query", fontsize=9)
    _box(ax, 8.4, 3.2, "GRU", "#d5f5e3", width=0.9)
    _arrow(ax, (context[0] + 0.97, context[1]), (7.93, 3.2))
    _arrow(ax, (8.4, 1.27), (8.4, 2.93))
    _arrow(ax, (8.4, 4.3), (8.4, 3.47))
    ax.text(8.5, 4.0, "$y_{t'-1}$", fontsize=9)
    _arrow(ax, (8.87, 3.2), (9.5, 3.2))
    ax.text(9.55, 3.2, "$s_{t'}$", fontsize=9, va="center")
    ax.text(8.4, -0.65, "decoder", ha="center", fontsize=9)
    return fig


def introduction_bottleneck_diagram() -> Figure:
    """Diagram of an encoder-decoder whose decoder sees only one fixed-length vector."""
    fig, ax = _diagram_axes((7.6, 2.3), (-0.6, 10.0), (-0.7, 2.4))
    for t, word in enumerate(["we", "sold", "six", "books", "<eos>"]):
        x = 0.9 * t
        ax.text(x, 0.0, word, ha="center", va="center", fontsize=9)
        _arrow(ax, (x, 0.2), (x, 0.65))
        _box(ax, x, 0.95, f"$h_{t + 1}$", "#cfe2f3", width=0.7)
        if t:
            _arrow(ax, (x - 0.55, 0.95), (x - 0.35, 0.95))
    _box(ax, 4.75, 0.95, "$c = h_5$", "#f9e79f", width=0.9)
    _arrow(ax, (3.95, 0.95), (4.3, 0.95))
    for t, word in enumerate(["nous", "avons", "vendu", "six", "livres"]):
        x = 5.9 + 0.85 * t
        _box(ax, x, 0.95, f"$s_{t + 1}$", "#d5f5e3", width=0.65)
        _arrow(ax, (x, 1.25), (x, 1.7))
        ax.text(x, 1.95, word, ha="center", va="center", fontsize=9)
        if t:
            _arrow(ax, (x - 0.52, 0.95), (x - 0.33, 0.95))
        _arrow(ax, (4.75, 0.7), (x - 0.1, 0.7), color="#b7950b", width=0.8, rad=0.25)
    _arrow(ax, (5.2, 0.95), (5.57, 0.95))
    ax.text(1.8, -0.6, "encoder", ha="center", fontsize=9)
    ax.text(7.6, -0.6, "decoder: every step sees the same $c$", ha="center", fontsize=9)
    return fig


def introduction_exact_match_by_length() -> Figure:
    """Share of test sentences translated exactly right, against source length."""
    result = bahdanau_experiment()
    references, lengths = _references_and_lengths()
    fig = new_figure((6.0, 3.4))
    with plt.rc_context(BOOK_STYLE):
        ax = fig.add_subplot()
        for name, label, style in (
            ("attention", "with Bahdanau attention", "o-"),
            ("plain", "without attention (fixed context)", "s--"),
        ):
            shares = []
            for low, high in LENGTH_BUCKETS:
                chosen = [i for i, n in enumerate(lengths) if low <= n <= high]
                exact = sum(result["greedy"][name][i] == references[i] for i in chosen)
                shares.append(100 * exact / len(chosen))
            ax.plot(range(len(shares)), shares, style, label=label)
        ax.set_xticks(range(len(LENGTH_BUCKETS)), [_bucket_label(*b) for b in LENGTH_BUCKETS])
        ax.set_xlabel("source length in tokens")
        ax.set_ylabel("test sentences exactly right (%)")
        ax.set_ylim(0, 100)
        ax.legend(loc="center left")
        fig.tight_layout()
    return fig


def bahdanau_findings() -> str:
    """Markdown bullets that state what the cached run shows, with its measured numbers."""
    result = bahdanau_experiment()
    references, lengths = _references_and_lengths()
    scores = {
        name: _bleu_by_bucket(result["greedy"][name], references, lengths)[0]
        for name in ("plain", "attention")
    }
    first, last = _bucket_label(*LENGTH_BUCKETS[0]), _bucket_label(*LENGTH_BUCKETS[-1])
    lines = []
    for name, label in (("plain", "Without attention"), ("attention", "With attention")):
        low, high = scores[name][0], scores[name][-1]
        trend = "falls" if high < low - 1 else "rises" if high > low + 1 else "stays level"
        lines.append(
            f"- {label}, test BLEU {trend} from {low:.1f} on sources of {first} tokens "
            f"to {high:.1f} on sources of {last} tokens."
        )
    gaps = [a - p for a, p in zip(scores["attention"], scores["plain"], strict=True)]
    ahead = sum(gap > 0 for gap in gaps)
    lines.append(
        f"- The attention model is ahead in {ahead} of the {len(gaps)} length buckets; the gap "
        f"is {gaps[0]:.1f} BLEU points on the shortest sources and {gaps[-1]:.1f} on the "
        "longest."
    )
    seconds = result["train_seconds"]
    lines.append(
        f"- Same epochs, not the same time: an epoch of the attention model took "
        f"{seconds['attention'] / seconds['plain']:.1f} times as long as one of the plain "
        "model, because its decoder must run one step at a time."
    )
    return "\n".join(lines) + "\n"
