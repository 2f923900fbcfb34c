"""The attention playground's study: how many steps each small GPT needs to reverse or sort.

The self-attention chapter's playground (`attention_book.playground`, and its twin in the
page's JavaScript) trains a tiny GPT to reverse or to sort five digits. This experiment trains
every configuration the page compares, the two tasks times three shapes (one layer with one
head, one layer with four heads, two layers with two heads) times the three kinds of positions
(learned, sinusoidal, none), each from three seeds, for at most `PlaygroundStudyConfig.num_steps`
steps, and records when each one solved its task (`attention_book.playground.solved`: 99% of
the answer digits of 256 fresh sequences right, measured every 25 steps). The page states these
numbers next to the reader's own run, which trains the same model on the same batches.

Reversing needs positions: the digit to write is the one mirrored around the separator, and
nothing in the digits' values says where that is. Sorting needs the values more than the
places. The study measures how far each model gets without positions, too.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attention_book.attention import DotProductAttention
from attention_book.gpt import GPT
from attention_book.playground import (
    PLAYGROUND_POSITIONALS,
    TASKS,
    PlaygroundConfig,
    playground_model,
    train_playground,
)
from attention_book.store import Run, cached, declared_key, seed_offset
from attention_book.timing import torch_threads

__all__ = [
    "PLAYGROUND_PROBE",
    "PLAYGROUND_STUDY",
    "RUNS",
    "VERSION",
    "PlaygroundStudyConfig",
    "playground_attention",
    "playground_cache_key",
    "playground_experiment",
    "playground_headline",
    "playground_run",
    "playground_steps",
    "playground_trained_model",
]

#: Bump when what `playground_run` computes changes for the same configuration; not for a
#: refactor, a docstring or a moved helper.
VERSION = 1


@dataclass(frozen=True)
class PlaygroundStudyConfig:
    """The settings of the study: changing any of them trains again.

    Attributes:
        tasks: The tasks (`attention_book.playground.TASKS`).
        shapes: ``(num_blks, num_heads)`` of each model compared.
        positionals: The kinds of positions compared.
        seeds: One training per configuration and seed (shifted by
            `attention_book.store.seed_offset`).
        num_steps: The most steps a training takes; it stops when the task is solved.
        eval_every: Steps between two measurements of the accuracy.
        num_digits: Digits before the separator.
        num_hiddens: Width of every model.
        ffn_num_hiddens: Hidden width of the feed-forward networks.
        batch_size: Sequences per step.
        lr: Adam's learning rate.
    """

    tasks: tuple[str, ...] = TASKS
    shapes: tuple[tuple[int, int], ...] = ((1, 1), (1, 4), (2, 2))
    positionals: tuple[str, ...] = PLAYGROUND_POSITIONALS
    seeds: tuple[int, ...] = (0, 1, 2)
    num_steps: int = 1500
    eval_every: int = 25
    num_digits: int = 5
    num_hiddens: int = 32
    ffn_num_hiddens: int = 64
    batch_size: int = 16
    lr: float = 0.003


#: The study of the page.
PLAYGROUND_STUDY = PlaygroundStudyConfig()
#: Its probe: every task, shape and kind of positions once, 30 steps (one measurement).
PLAYGROUND_PROBE = PlaygroundStudyConfig(seeds=(0,), num_steps=30)
#: The shape whose trained models the study keeps: the page's default (2 blocks, 2 heads).
DEFAULT_SHAPE = (2, 2)
DEFAULT_POSITIONAL = "learned"


def _model_config(
    study: PlaygroundStudyConfig, task: str, shape: tuple[int, int], positional: str, seed: int
) -> PlaygroundConfig:
    """One training's configuration: the study's sizes, with this task, shape and seed."""
    num_blks, num_heads = shape
    return PlaygroundConfig(
        task=task,
        num_blks=num_blks,
        num_heads=num_heads,
        positional=positional,
        num_digits=study.num_digits,
        num_hiddens=study.num_hiddens,
        ffn_num_hiddens=study.ffn_num_hiddens,
        batch_size=study.batch_size,
        lr=study.lr,
        seed=seed,
    )


def playground_run(config: PlaygroundStudyConfig = PLAYGROUND_STUDY) -> dict[str, Any]:
    """Train every configuration of the study, one thread, and record when each one solved.

    The full result (`playground_experiment`) and the probe (`PLAYGROUND_PROBE`) both come
    from here.

    Args:
        config: The study's settings.

    Returns:
        See `playground_experiment`.
    """
    offset = seed_offset()
    result: dict[str, Any] = {
        "runs": [],
        "state_dict": {},
        "seed_offset": offset,
        "num_steps": config.num_steps,
    }
    with torch_threads(1):
        for task in config.tasks:
            for shape in config.shapes:
                for positional in config.positionals:
                    for seed in config.seeds:
                        model_config = _model_config(config, task, shape, positional, seed + offset)
                        start = time.perf_counter()
                        trained = train_playground(
                            model_config, config.num_steps, eval_every=config.eval_every
                        )
                        seconds = time.perf_counter() - start
                        result["runs"].append(
                            {
                                "task": task,
                                "num_blks": shape[0],
                                "num_heads": shape[1],
                                "positional": positional,
                                "seed": model_config.seed,
                                "solved_at": trained["solved_at"],
                                "accuracies": trained["accuracies"],
                                "losses": trained["losses"],
                                "seconds": seconds,
                            }
                        )
                        default = tuple(shape) == DEFAULT_SHAPE
                        if default and positional == DEFAULT_POSITIONAL and seed == config.seeds[0]:
                            result["state_dict"][task] = trained["model"].state_dict()
    return result


# --8<-- [start:experiment]
def playground_cache_key() -> dict[str, Any]:
    """The study's key in the store: its configuration, `VERSION` and library versions.

    Every sequence and weight is drawn from seeds of the configuration, so no data digest
    is needed.

    Returns:
        A dict of JSON values, for `cached`.
    """
    return declared_key(PLAYGROUND_STUDY, VERSION)


def playground_experiment() -> dict[str, Any]:
    """Train (or load from the cache) every configuration of the study.

    The first call trains 54 small models, each until it solves its task or for 1,500 steps
    (about two to three minutes on one CPU core in all); later calls with the same
    `playground_cache_key` load the result.

    Returns:
        ``"runs"``: one dict per training with "task", "num_blks", "num_heads",
        "positional", "seed" (the seed used), "solved_at" (a step, or None), "accuracies"
        (``[step, accuracy]`` pairs), "losses" (one per step) and "seconds";
        ``"state_dict"``: for each task, the weights of the first seed's model of the page's
        default shape (2 blocks, 2 heads, learned positions), when it stopped;
        ``"seed_offset"``: the offset added to every seed; ``"num_steps"``: the most steps.
    """
    return cached("playground", playground_cache_key(), lambda: playground_run(PLAYGROUND_STUDY))


# --8<-- [end:experiment]


def playground_trained_model(task: str = "reverse") -> tuple[GPT, PlaygroundConfig]:
    """The first seed's trained model of the page's default shape for a task (from the cache).

    Args:
        task: ``"reverse"`` or ``"sort"``.

    Returns:
        The `attention_book.gpt.GPT`, in float64 and eval mode, and its configuration.

    Raises:
        ValueError: If `task` is not one of the study's tasks.
    """
    if task not in PLAYGROUND_STUDY.tasks:
        raise ValueError(f"task must be one of {PLAYGROUND_STUDY.tasks}, got {task!r}")
    result = playground_experiment()
    config = _model_config(
        PLAYGROUND_STUDY,
        task,
        DEFAULT_SHAPE,
        DEFAULT_POSITIONAL,
        PLAYGROUND_STUDY.seeds[0] + result["seed_offset"],
    )
    model = playground_model(config)
    model.load_state_dict(result["state_dict"][task])
    return model.eval(), config


def playground_attention(model: GPT, tokens: list[int]) -> Tensor:
    """Every head's attention weights on one sequence, as the page's widget draws them.

    The model's attention runs on the explicit path for this call (the one that keeps the
    weights; both paths compute the same function) and goes back to the fused one after.

    Args:
        model: A `attention_book.playground.playground_model`.
        tokens: The sequence it reads.

    Returns:
        The weights, row ``i`` the query at position ``i``.

    Shapes:
        - returns: ``(num_blks, num_heads, len(tokens), len(tokens))``
    """
    modules = [m for m in model.modules() if isinstance(m, DotProductAttention)]
    paths = [m.need_weights for m in modules]
    try:
        for module in modules:
            module.need_weights = True
        with torch.no_grad():
            model(torch.tensor([tokens]))
        return torch.stack([m.attention_weights[0] for m in modules])  # (blocks, heads, n, n)
    finally:
        for module, path in zip(modules, paths, strict=True):
            module.need_weights = path


def playground_steps(run: dict[str, Any], num_steps: int = PLAYGROUND_STUDY.num_steps) -> int:
    """Steps a training took to solve its task; an unsolved one counts one measurement more.

    Counting an unsolved training as ``num_steps + 25`` keeps a median over runs a number.

    Args:
        run: One of `playground_experiment`'s ``"runs"``.
        num_steps: The study's most steps.

    Returns:
        The step, or ``num_steps + eval_every`` where the task was not solved.
    """
    solved_at = run["solved_at"]
    return solved_at if solved_at is not None else num_steps + PLAYGROUND_STUDY.eval_every


def playground_headline(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the page's conclusions rest on, all in steps (unsolved: 1,525).

    Args:
        result: `playground_experiment`'s result.

    Returns:
        For each task and kind of positions, the median and the fewest steps to solve over
        the shapes and seeds (``"reverse, learned: median steps to solve"``, ``"...: fewest
        steps to solve"``), and, for each task at one layer, the median steps of the one-head
        and the four-head models over learned and sinusoidal positions and the seeds
        (``"reverse, 1 block, 1 head, with positions: median steps to solve"``).
    """
    runs = result["runs"]
    numbers: dict[str, float] = {}
    for task in sorted({run["task"] for run in runs}, key=TASKS.index):
        for positional in PLAYGROUND_POSITIONALS:
            steps = [
                playground_steps(run, result["num_steps"])
                for run in runs
                if run["task"] == task and run["positional"] == positional
            ]
            if steps:
                numbers[f"{task}, {positional}: median steps to solve"] = statistics.median(steps)
                numbers[f"{task}, {positional}: fewest steps to solve"] = min(steps)
    for task in sorted({run["task"] for run in runs}, key=TASKS.index):
        for num_heads in (1, 4):
            steps = [
                playground_steps(run, result["num_steps"])
                for run in runs
                if (run["task"], run["num_blks"], run["num_heads"]) == (task, 1, num_heads)
                and run["positional"] != "none"
            ]
            if steps:
                label = f"{task}, 1 block, {num_heads} head{'s' * (num_heads > 1)}, with positions"
                numbers[f"{label}: median steps to solve"] = statistics.median(steps)
    return numbers


#: The cached run of this module. Steps to solve are measured every 25 steps: a headline
#: number moves by 25 at the least.
RUNS = (
    Run(
        "playground",
        VERSION,
        probe=lambda: playground_run(PLAYGROUND_PROBE),
        result=playground_experiment,
        key=playground_cache_key,
        headline=playground_headline,
        tolerance=25,
    ),
)
