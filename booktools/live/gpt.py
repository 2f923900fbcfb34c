"""The optimizations chapter's character GPT, exported for the page (`booktools.live.export`).

Its reference cases (what PyTorch computes for held-out prompts: characters, logits, attention
weights), the prompts they are computed for, and the export of its weights and vocabulary into
the files the page's JavaScript reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from booktools.live.export import TOLERANCE, float16_effect, rounded, write_about, write_weights


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
