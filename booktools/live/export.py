"""The book's trained models, exported for the page: weights, vocabularies, PyTorch's reference.

Two chapters run their trained model in the reader's browser (`booktools.live.widgets`): the
Transformer chapter's translator and the optimizations chapter's character GPT. This module,
run by the build in a fresh interpreter (``python -m booktools.live.export --out DIR NAME ...``),
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
from the run's declared key) followed by a digest of the exporter (this file and the two that
export each model, `booktools.live.translator` and `booktools.live.gpt`): a rebuild with the
same stored result and the same exporter finds the folder and exports nothing. Nothing is
trained here that the result store does not train anyway: the models come from
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
from collections.abc import Callable
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


#: The exporter's files, whose digest names the folders it writes (`exporter_digest`).
EXPORTER_FILES = ("export.py", "translator.py", "gpt.py")


def exporter_digest() -> str:
    """A digest of the exporter's files: another exporter writes other files, elsewhere."""
    digest = hashlib.sha256()
    for name in EXPORTER_FILES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:8]


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
        ``transformer-smoothing-0p1-<hash>`` or ``optimizations-baseline-seed0-<hash>``:
        `cache_path`'s name, a hash of the run's declared key.

    Raises:
        ValueError: For an unknown name.
    """
    from attention_book.store import cache_path

    if name == "translator":
        from attention_book.experiments.transformer import (
            MODEL_SMOOTHING,
            transformer_cache_key,
            transformer_run_name,
        )

        return cache_path(transformer_run_name(MODEL_SMOOTHING), transformer_cache_key()).stem
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
        from booktools.live.translator import export_translator_model, translator_sentences

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
        from booktools.live.gpt import export_gpt_model, gpt_prompts

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
