"""The book's trained models, exported for the page: weights, vocabularies, PyTorch's reference.

Two chapters run their trained model in the reader's browser (`booktools.live`): the
Transformer chapter's translator and the optimizations chapter's character GPT. This module,
run by the build in a fresh interpreter (``python -m booktools.live_export --out DIR NAME ...``),
writes each one's static files into a folder named after the stored result it comes from:

- ``model.json``: the configuration, the vocabulary, and where each tensor of the
  ``state_dict`` lies in ``weights.bin`` (its name, shape and offset);
- ``weights.bin``: every tensor of the ``state_dict``, float32, little-endian, one after the
  other (float32 rather than float16: see `float16_effect`);
- ``reference.json``: what PyTorch computes for a fixed set of held-out sentences (or prompts):
  the tokens, the logits of every step and the attention weights of every block and head,
  which the browser check compares with what the page computes (`TOLERANCE`);
- ``about.json``: the sizes (raw and gzip) and the float16 measurement, which the page cites.

The folder's name is the result store's name for the trained result (``transformer-<hash>``,
from the run's declared key) followed by a digest of this file: a rebuild with the same stored
result and the same exporter finds the folder and exports nothing. Nothing is trained here
that the result store does not train anyway: the models come from
`transformer_trained_model` and `optimizations_trained_model`, which load the stored result.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: How far the page's logits and attention weights may be from PyTorch's (absolute): the page
#: computes in float64 from the float32 weights, PyTorch in float32.
TOLERANCE = 1e-4
#: Decimals of the numbers written to ``reference.json`` (a rounding of at most 5e-7).
DECIMALS = 6
#: The exported models, by the name a page gives them (``{{ live:NAME }}``).
NAMES = ("translator", "gpt")
#: Characters the character GPT appends to each reference prompt.
GPT_REFERENCE_CHARACTERS = 48


def exporter_digest() -> str:
    """A digest of this file: another exporter writes other files, into another folder."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


def rounded(values: Any) -> Any:
    """A tensor (or nested lists of tensors) as nested lists of rounded floats, for JSON."""
    import torch

    if isinstance(values, torch.Tensor):
        values = values.detach().double().tolist()
    if isinstance(values, list | tuple):
        return [rounded(value) for value in values]
    number = round(float(values), DECIMALS)
    return 0 if number == 0 else number  # "0", not "-0.0"


def gzip_size(data: bytes) -> int:
    """Bytes of `data` compressed with gzip at the level static hosts use (9)."""
    return len(gzip.compress(data, compresslevel=9, mtime=0))


def write_weights(state_dict: dict[str, Any], out_dir: Path) -> dict[str, dict[str, Any]]:
    """Write every tensor of a ``state_dict`` to ``weights.bin`` as float32, one after another.

    Args:
        state_dict: The trained model's tensors.
        out_dir: Where to write ``weights.bin``.

    Returns:
        Each tensor's ``{"shape": [...], "offset": first float's index in the file}``.
    """
    import numpy as np

    tensors, chunks, offset = {}, [], 0
    for name, tensor in state_dict.items():
        array = tensor.detach().cpu().float().contiguous().numpy().astype("<f4")
        tensors[name] = {"shape": list(array.shape), "offset": offset}
        chunks.append(array.reshape(-1))
        offset += array.size
    (out_dir / "weights.bin").write_bytes(np.concatenate(chunks).tobytes())
    return tensors


# ---------------------------------------------------------------------------------------------
# The translator of the Transformer chapter


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


# ---------------------------------------------------------------------------------------------
# The character GPT of the optimizations chapter


def gpt_case(model, vocab: Sequence[str], prompt: str, num_new: int) -> dict[str, Any]:
    """What PyTorch computes for one prompt: greedy characters, logits and attention weights.

    The characters are `GPT.generate`'s (with the cache, the book's path); the logits and the
    weights of every step come from the same steps run with the attention's explicit path,
    which keeps its weights, and must give the same characters.

    Args:
        model: The trained GPT, in eval mode.
        vocab: One character per token index.
        prompt: The prompt; every character must be in `vocab`.
        num_new: How many characters to generate.

    Returns:
        ``{"prompt", "prompt_ids", "tokens", "text", "logits", "weights"}``: the generated
        ids, one logits row per step, and per step the attention weights of the step's new
        positions ``[step][block][head][query][key]`` (the whole prompt at the first step).

    Raises:
        RuntimeError: If the two paths give other characters.
    """
    import torch

    from attention_book.attention import DotProductAttention

    index = {char: i for i, char in enumerate(vocab)}
    prompt_ids = [index[char] for char in prompt]
    prompt_tensor = torch.tensor([prompt_ids])
    generated = model.generate(prompt_tensor, num_new, use_cache=True)[0, len(prompt_ids) :]
    attentions = [m for m in model.modules() if isinstance(m, DotProductAttention)]
    saved = [attention.need_weights for attention in attentions]
    for attention in attentions:
        attention.need_weights = True  # the explicit path, which keeps the weights
    try:
        with torch.no_grad():
            cache = model.new_cache(1, len(prompt_ids) + num_new)
            step_input, tokens, logits, weights = prompt_tensor, [], [], []
            for _ in range(num_new):
                step_logits = model(step_input, cache)
                logits.append(step_logits[0, -1])
                weights.append([blk.attention.heads.attention_weights[0] for blk in model.blks])
                token = int(step_logits[0, -1].argmax())
                tokens.append(token)
                step_input = torch.tensor([[token]])
    finally:
        for attention, need in zip(attentions, saved, strict=True):
            attention.need_weights = need
    if tokens != generated.tolist():
        raise RuntimeError(f"the explicit path generates other characters from {prompt!r}")
    return {
        "prompt": prompt,
        "prompt_ids": prompt_ids,
        "tokens": tokens,
        "text": "".join(vocab[token] for token in tokens),
        "logits": rounded(logits),
        "weights": rounded(weights),
    }


def gpt_prompts(test_text: str, train_text: str, count: int = 3) -> list[str]:
    """The held-out prompts of the check: the start of the first test sentences.

    Args:
        test_text: The French text of the test split, one sentence a line.
        train_text: The training text (no prompt's sentence may be one of its lines).
        count: How many prompts.

    Returns:
        The first 16 characters of each of the first `count` test sentences that are not
        training sentences.
    """
    trained = set(train_text.split("\n"))
    lines = [line for line in test_text.split("\n") if line and line not in trained]
    return [line[:16] for line in lines[:count]]


def export_gpt_model(
    model, vocab: Sequence[str], prompts: Sequence[str], num_new: int, out_dir: Path,
    trained_length: int,
) -> dict[str, Any]:  # fmt: skip
    """Write a trained character GPT's files (`model.json`, `weights.bin`, `reference.json`).

    Args:
        model: A `GPT` with rotary positions and multi-head attention.
        vocab: One character per token index.
        prompts: The reference prompts.
        num_new: Characters generated after each prompt.
        out_dir: Where to write the files.
        trained_length: The length of the windows it was trained on (the page marks what it
            generates past that position).

    Returns:
        What ``about.json`` holds (`write_about`).

    Raises:
        ValueError: If the model is not one the page's code runs (another position code,
            fewer key/value heads, a window, linear attention).
    """
    heads = model.blks[0].attention.heads
    attention = model.blks[0].attention
    if model.positional != "rope" or model.kind != "softmax" or attention.window is not None:
        raise ValueError(
            "model must be a GPT with rotary positions and softmax attention without a window, "
            f"got positional={model.positional!r}, attention={model.kind!r}, "
            f"window={attention.window}"
        )
    if heads.num_kv_heads != heads.num_heads:
        raise ValueError(f"model must have num_kv_heads == num_heads, got {heads.num_kv_heads}")
    config = {
        "num_hiddens": model.embedding.embedding_dim,
        "num_heads": heads.num_heads,
        "num_kv_heads": heads.num_kv_heads,
        "num_blks": len(model.blks),
        "ffn_num_hiddens": model.blks[0].ffn[0].out_features,
        "positional": model.positional,
        "max_len": model.max_len,
        "trained_length": trained_length,
    }
    tensors = write_weights(model.state_dict(), out_dir)
    manifest = {"kind": "gpt", "config": config, "vocab": list(vocab), "tensors": tensors}
    (out_dir / "model.json").write_text(json.dumps(manifest, ensure_ascii=False), "utf-8")
    cases = [gpt_case(model, vocab, prompt, num_new) for prompt in prompts]
    reference = {"tolerance": TOLERANCE, "cases": cases}
    (out_dir / "reference.json").write_text(json.dumps(reference, ensure_ascii=False), "utf-8")
    effect = float16_effect(
        model, cases, lambda half: [gpt_case(half, vocab, p, num_new) for p in prompts]
    )
    return write_about(out_dir, model, len(vocab), effect)


# ---------------------------------------------------------------------------------------------
# Both


def float16_effect(model, cases: list[dict], cases_of: Callable) -> dict[str, Any]:
    """How much storing the weights as float16 would change what the model computes.

    The weights are rounded to float16 and back (what a page that downloads float16 and
    computes in float32 would run), and the reference cases run again.

    Args:
        model: The trained model (not changed).
        cases: Its reference cases.
        cases_of: Computes the cases of another model.

    Returns:
        ``{"float16_max_logit_change": largest change of a logit over the cases' steps while
        the tokens agree, "float16_changed_cases": cases whose tokens change}``.
    """
    import copy

    import torch

    half = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in half.parameters():
            parameter.copy_(parameter.half().float())
    largest, changed = 0.0, 0
    for ours, theirs in zip(cases, cases_of(half), strict=True):
        if ours["tokens"] != theirs["tokens"]:
            changed += 1
        same = 0
        while same < min(len(ours["tokens"]), len(theirs["tokens"])) and (
            ours["tokens"][same] == theirs["tokens"][same]
        ):
            same += 1
        for step in range(min(same + 1, len(ours["logits"]), len(theirs["logits"]))):
            row = zip(ours["logits"][step], theirs["logits"][step], strict=True)
            largest = max(largest, *(abs(a - b) for a, b in row))
    return {"float16_max_logit_change": largest, "float16_changed_cases": changed}


def result_name(name: str) -> str:
    """The result store's file name (without ``.pt``) of the trained result a model comes from.

    Args:
        name: One of `NAMES`.

    Returns:
        ``transformer-<hash>`` or ``optimizations-baseline-seed0-<hash>``: `cache_path`'s name,
        a hash of the run's declared key.

    Raises:
        ValueError: For an unknown name.
    """
    from attention_book.store import cache_path

    if name == "translator":
        from attention_book.experiments.transformer import transformer_cache_key

        return cache_path("transformer", transformer_cache_key()).stem
    if name == "gpt":
        from attention_book.experiments.optimizations import optimizations_cache_key

        return cache_path("optimizations-baseline-seed0", optimizations_cache_key()).stem
    raise ValueError(f"name must be one of {NAMES}, got {name!r}")


def export(name: str, out_dir: Path) -> dict[str, Any]:
    """Export one of the book's trained models (from the result store) into `out_dir`.

    Args:
        name: One of `NAMES`.
        out_dir: An empty folder.

    Returns:
        What ``about.json`` holds: the sizes and the float16 measurement.
    """
    import torch

    torch.set_num_threads(1)
    if name == "translator":
        from attention_book.experiments.bahdanau import BAHDANAU_CONFIG
        from attention_book.experiments.transformer import transformer_trained_model

        model, data = transformer_trained_model()
        sentences = translator_sentences(data)
        return export_translator_model(
            model, data.src_vocab, data.tgt_vocab, data.num_steps, BAHDANAU_CONFIG.max_len,
            sentences, out_dir,
        )  # fmt: skip
    if name == "gpt":
        from attention_book.experiments.optimizations import (
            OPTIMIZATIONS_CONFIG,
            optimizations_text,
            optimizations_trained_model,
            optimizations_vocab,
        )

        model = optimizations_trained_model("baseline")
        prompts = gpt_prompts(optimizations_text("test"), optimizations_text("train"))
        return export_gpt_model(
            model, optimizations_vocab(), prompts, GPT_REFERENCE_CHARACTERS, out_dir,
            OPTIMIZATIONS_CONFIG.context,
        )  # fmt: skip
    raise ValueError(f"name must be one of {NAMES}, got {name!r}")


def write_about(out_dir: Path, model, vocab_size: int, effect: dict[str, Any]) -> dict[str, Any]:
    """Write ``about.json``: the model's size, its files' sizes, the float16 measurement.

    Args:
        out_dir: The exported model's folder, with its other files written.
        model: The model.
        vocab_size: Its (source) vocabulary's size.
        effect: `float16_effect`'s measurement.

    Returns:
        What it wrote.
    """
    about = {
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": vocab_size,
        **sizes(out_dir),
        **effect,
        "tolerance": TOLERANCE,
    }
    (out_dir / "about.json").write_text(json.dumps(about, indent=1), "utf-8")
    return about


def sizes(out_dir: Path) -> dict[str, int]:
    """Raw and gzip bytes of the files a reader's browser downloads (model.json, weights.bin)."""
    found = {}
    for file in ("model.json", "weights.bin"):
        data = (out_dir / file).read_bytes()
        stem = file.split(".")[0]
        found[f"{stem}_bytes"], found[f"{stem}_gzip_bytes"] = len(data), gzip_size(data)
    return found


def exported(name: str, root: Path) -> Path:
    """The folder of one exported model under `root`, exported now unless it is there.

    Args:
        name: One of `NAMES`.
        root: Where the build keeps exported models (``.cache/live``).

    Returns:
        ``root / "<result name>-<exporter digest>"``, holding the four files.
    """
    folder = root / f"{result_name(name)}-{exporter_digest()}"
    if (folder / "about.json").exists():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=root, prefix=f"exporting-{name}-"))
    scratch.chmod(0o755)  # mkdtemp's folder is private; the site's files are not
    try:
        export(name, scratch)
        try:
            os.replace(scratch, folder)
        except OSError:  # another build exported it meanwhile
            if not (folder / "about.json").exists():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Export the named models; print one JSON line per model: its name and its folder.

    Args:
        argv: The command line's arguments.

    Returns:
        0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=NAMES)
    parser.add_argument("--out", type=Path, required=True, help="the folder of exported models")
    args = parser.parse_args(argv)
    for name in args.names:
        print(json.dumps({"name": name, "folder": str(exported(name, args.out))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
