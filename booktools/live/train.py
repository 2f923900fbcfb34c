"""The training widget's reference: PyTorch trains the playground's models, the page must match.

The widget of the self-attention playground (``{{ live:train }}``, `booktools.live.widgets`)
trains a small GPT in the reader's browser (``docs/assets/javascripts/live/train.js``), the twin
of `attention_book.playground`. This module, run by the build in a fresh interpreter
(``python -m booktools.live.train --out DIR``), writes into a folder named after a digest of
what it depends on (this file, `attention_book.playground` and the study's key in the store):

- ``reference.json``: for each of `CASES`, the configuration, the initial weights PyTorch drew
  from the seed, the batches of its first ``steps`` steps, the loss of every step and the
  weights after the last, with `TOLERANCE`. Weights are base64 of little-endian float64 (the
  page's numbers are the same float64 numbers), tokens base64 of bytes. Only the browser check
  fetches it: the page draws its own weights and batches from the seed.
- ``study.json``: the steps each configuration of the build's study needed to solve its task
  (`attention_book.experiments.playground`), which the widget shows beside the reader's run;
- ``about.json``: its sizes and the tolerance, which the page cites.

The browser check (`booktools.live.check.check_training`) makes the page train every case on
the exported batches from the exported weights and compares its losses and weights with these.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

#: How far the page may be from PyTorch after each case's steps: relative to each loss, and to
#: each parameter tensor's largest magnitude. Both sides compute in float64 in the same order
#: of operations but for the order of a few sums; measured: 4e-15 after 200 steps.
TOLERANCE = 1e-9
#: The checked trainings: (steps, changes to the default configuration). The default model
#: first; between them they cross both tasks, all three kinds of positions, one and two blocks,
#: one, two and four heads.
CASES = (
    (200, {}),
    (100, {"task": "sort", "num_blks": 1, "num_heads": 4, "positional": "sinusoidal"}),
    (100, {"num_blks": 1, "num_heads": 1, "positional": "none", "seed": 3}),
)
ROOT = Path(__file__).resolve().parents[2]
#: The files the export depends on, besides the study's key: this one and the PyTorch trainer.
SOURCES = (Path(__file__), ROOT / "attention_book" / "playground.py")


def digest() -> str:
    """A digest of what the export depends on: another exporter or model writes another folder."""
    from attention_book.experiments.playground import playground_cache_key

    text = b"".join(path.read_bytes() for path in SOURCES)
    key = json.dumps(playground_cache_key(), sort_keys=True).encode()
    return hashlib.sha256(text + key).hexdigest()[:8]


def float64_text(values) -> str:
    """Base64 of little-endian float64 numbers."""
    import numpy as np

    return base64.b64encode(np.asarray(values, dtype="<f8").tobytes()).decode()


def bytes_text(values) -> str:
    """Base64 of small non-negative integers, one byte each."""
    import numpy as np

    return base64.b64encode(np.asarray(values, dtype="u1").tobytes()).decode()


def reference_case(steps: int, changes: dict) -> dict:
    """Train one configuration for `steps` steps in PyTorch and record what the page must match.

    Args:
        steps: Training steps.
        changes: Fields of `attention_book.playground.PlaygroundConfig` that differ from its
            defaults.

    Returns:
        One case of ``reference.json``.
    """
    import torch

    from attention_book.playground import (
        PlaygroundConfig,
        batches,
        playground_loss,
        playground_model,
        playground_optimizer,
    )

    config = replace(PlaygroundConfig(), **changes)
    model = playground_model(config)
    names = [name for name, _ in model.named_parameters()]
    flat = lambda: torch.cat([p.detach().reshape(-1) for p in model.parameters()])  # noqa: E731
    init = flat()
    optimizer = playground_optimizer(model, config.lr)
    stream = batches(config)
    tokens, answers, losses = [], [], []
    for _ in range(steps):
        batch = next(stream)
        tokens.append(batch[0].reshape(-1))
        answers.append(batch[1].reshape(-1))
        loss = playground_loss(model, *batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {
        "config": asdict(config),
        "steps": steps,
        "names": names,
        "shapes": [list(p.shape) for p in model.parameters()],
        "init": float64_text(init),
        "tokens": bytes_text(torch.cat(tokens)),
        "answers": bytes_text(torch.cat(answers)),
        "losses": losses,
        "final": float64_text(flat()),
    }


def study_summary() -> dict:
    """The build's study, as the widget shows it: steps to solve per configuration and seed."""
    from attention_book.experiments.playground import playground_experiment
    from attention_book.playground import EVAL_EVERY, SOLVED_ACCURACY

    result = playground_experiment()
    fields = ("task", "num_blks", "num_heads", "positional")
    configs: dict[tuple, dict] = {}
    for run in result["runs"]:
        key = tuple(run[field] for field in fields)
        entry = configs.setdefault(
            key, {**dict(zip(fields, key, strict=True)), "solved_at": [], "final_accuracy": []}
        )
        entry["solved_at"].append(run["solved_at"])
        entry["final_accuracy"].append(round(run["accuracies"][-1][1], 4))
    seeds = sorted({run["seed"] for run in result["runs"]})
    return {
        "max_steps": result["num_steps"],
        "eval_every": EVAL_EVERY,
        "solved_accuracy": SOLVED_ACCURACY,
        "seeds": seeds,
        "configs": list(configs.values()),
    }


def export_train(out_dir: Path) -> dict:
    """Write ``reference.json``, ``study.json`` and ``about.json``; return about.json's values."""
    import torch

    torch.set_num_threads(1)
    files = {
        "reference.json": {
            "tolerance": TOLERANCE,
            "cases": [reference_case(steps, changes) for steps, changes in CASES],
        },
        "study.json": study_summary(),
    }
    about: dict = {"tolerance": TOLERANCE, "reference_cases": len(CASES),
                   "steps": CASES[0][0]}  # fmt: skip
    for name, content in files.items():
        data = json.dumps(content, separators=(",", ":")).encode()
        (out_dir / name).write_bytes(data)
        stem = name.removesuffix(".json")
        about[f"{stem}_bytes"] = len(data)
        about[f"{stem}_gzip_bytes"] = len(gzip.compress(data, compresslevel=9, mtime=0))
    (out_dir / "about.json").write_text(json.dumps(about, indent=1), "utf-8")
    return about


def exported(root: Path) -> Path:
    """The reference's folder under `root` (``train-<digest>``), written now unless it is there."""
    folder = root / f"train-{digest()}"
    if not (folder / "about.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        export_train(folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Export the reference; print one JSON line: its name and its folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder of exported models")
    args = parser.parse_args(argv)
    print(json.dumps({"name": "train", "folder": str(exported(args.out))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
