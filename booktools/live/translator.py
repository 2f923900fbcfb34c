"""The Transformer chapter's translator, exported for the page (`booktools.live.export`).

Its reference cases (what PyTorch computes for held-out sentences: tokens, logits, the attention
weights of every block and head), the sentences they are computed for, and the export of its
weights and vocabularies into the files the page's JavaScript reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from booktools.live.export import TOLERANCE, float16_effect, rounded, write_about, write_weights


def translator_case(model, src_vocab, tgt_vocab, num_steps: int, max_len: int, sentence: str):
    """What PyTorch computes for one sentence: its tokens, greedy translation, logits, weights.

    The translation is `greedy_decode`'s, the book's own function; the logits and the weights
    of every step come from running the same decoder step by step with its key/value cache
    (the way greedy decoding runs it), and must give the same tokens.

    Args:
        model: The trained Transformer, in eval mode.
        src_vocab: The source vocabulary.
        tgt_vocab: The target vocabulary.
        num_steps: The source length of the data (longer sources are cut, as in training).
        max_len: Most tokens generated (<eos> included).
        sentence: An English sentence.

    Returns:
        ``{"sentence", "source_tokens", "source_ids", "tokens", "logits", "encoder",
        "decoder_self", "cross"}``: every generated token id (<eos> included when generated),
        one logits row per step, the encoder's weights ``[block][head][query][key]``, and per
        step the decoder's rows ``[step][block][head][key]``.

    Raises:
        RuntimeError: If the step-by-step decoding and `greedy_decode` disagree.
    """
    import torch

    from attention_book.data.text import build_arrays, tokenize
    from attention_book.decoding import greedy_decode

    words = tokenize(sentence)
    src, valid_len = build_arrays([words], src_vocab, num_steps)
    src = src[:, : int(valid_len[0])]  # (1, num_source_steps): no padding
    (translation,) = greedy_decode(model, src, valid_len, tgt_vocab.bos, tgt_vocab.eos, max_len)
    with torch.no_grad():
        enc_outputs = model.encoder(src, valid_len)
        encoder = [w[0] for w in model.encoder.attention_weights]  # (heads, n, n) per block
        state = model.decoder.init_state(enc_outputs, valid_len)
        token, tokens, logits, decoder_self, cross = tgt_vocab.bos, [], [], [], []
        for _ in range(max_len):
            step_logits, state = model.decoder(torch.tensor([[token]]), state)
            logits.append(step_logits[0, -1])
            decoder_self.append([w[0, :, -1] for w in model.decoder.self_attention_weights])
            cross.append([w[0, :, -1] for w in model.decoder.cross_attention_weights])
            token = int(torch.log_softmax(step_logits[0, -1], dim=-1).argmax())
            tokens.append(token)
            if token == tgt_vocab.eos:
                break
    if tokens[: len(translation.tokens)] != translation.tokens or len(tokens) not in (
        len(translation.tokens),
        len(translation.tokens) + 1,
    ):
        raise RuntimeError(f"step-by-step decoding disagrees with greedy_decode on {sentence!r}")
    indices = src[0].tolist()
    return {
        "sentence": sentence,
        "source_tokens": src_vocab.to_tokens(indices),
        "source_ids": indices,
        "tokens": tokens,
        "words": tgt_vocab.to_tokens(tokens),
        "logits": rounded(logits),
        "encoder": rounded(encoder),
        "decoder_self": rounded(decoder_self),
        "cross": rounded(cross),
    }


def translator_sentences(data) -> list[str]:
    """The held-out sentences of the check: a fixed rule over the test split, and one more.

    The static explorer's sentence (the longest test source of at most 22 tokens with a date
    and a time), the test source whose length is nearest to 20 tokens (the note's timing), the
    shortest test source, and a sentence of words the vocabulary lacks, with punctuation.

    Args:
        data: The translation data (its test split).

    Returns:
        The sentences, none of them a training source.
    """
    from attention_book.data.text import tokenize

    sources = [source for source, _ in data.test_pairs]
    lengths = [len(tokenize(source)) for source in sources]
    with_time = [
        (n, -i) for i, (s, n) in enumerate(zip(sources, lengths, strict=True))
        if n <= 22 and " at " in s and ", 20" in s
    ]  # fmt: skip
    explorer = sources[-max(with_time)[1]]
    twenty = sources[min(range(len(sources)), key=lambda i: (abs(lengths[i] - 20), i))]
    shortest = sources[min(range(len(sources)), key=lambda i: (lengths[i], i))]
    unknown = "On Friday, the zebras bought 3 tickets; we ate 12 pineapples!"
    sentences = list(dict.fromkeys([explorer, twenty, shortest, unknown]))
    trained = {source for source, _ in data.train_pairs}
    if any(sentence in trained for sentence in sentences):
        raise RuntimeError("a reference sentence is a training source")
    return sentences


def export_translator_model(
    model, src_vocab, tgt_vocab, num_steps: int, max_len: int, sentences: Sequence[str],
    out_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """Write a trained translator's files (`model.json`, `weights.bin`, `reference.json`).

    Args:
        model: An `EncoderDecoder` of `TransformerEncoder` and `TransformerDecoder`.
        src_vocab: Its source vocabulary.
        tgt_vocab: Its target vocabulary.
        num_steps: Longest source (with <eos>); longer ones are cut, as the data cuts them.
        max_len: Most tokens generated per sentence.
        sentences: The reference sentences.
        out_dir: Where to write the files.

    Returns:
        What ``about.json`` holds (`write_about`).
    """
    encoder = model.encoder
    block = encoder.blks[0]
    config = {
        "num_hiddens": encoder.num_hiddens,
        "ffn_num_hiddens": block.ffn.dense1.out_features,
        "num_heads": block.self_attention.num_heads,
        "num_blks": len(encoder.blks),
        "norm_first": block.addnorm1.norm_first,
        "activation": type(block.ffn.activation).__name__.lower(),
        "max_len": encoder.pos_encoding.max_len,
        "num_steps": num_steps,
        "max_decode_len": max_len,
    }
    tensors = write_weights(model.state_dict(), out_dir)
    manifest = {
        "kind": "translator",
        "config": config,
        "src_vocab": src_vocab.idx_to_token,
        "tgt_vocab": tgt_vocab.idx_to_token,
        "tensors": tensors,
    }
    (out_dir / "model.json").write_text(json.dumps(manifest, ensure_ascii=False), "utf-8")
    cases = [
        translator_case(model, src_vocab, tgt_vocab, num_steps, max_len, sentence)
        for sentence in sentences
    ]
    reference = {"tolerance": TOLERANCE, "cases": cases}
    (out_dir / "reference.json").write_text(json.dumps(reference, ensure_ascii=False), "utf-8")

    def case_of(half_model):
        return [
            translator_case(half_model, src_vocab, tgt_vocab, num_steps, max_len, sentence)
            for sentence in sentences
        ]

    return write_about(out_dir, model, len(src_vocab), float16_effect(model, cases, case_of))
