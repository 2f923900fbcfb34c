"""Figures and build-time text of the deep dive "Watch attention learn" (the playground).

Drawing only: the trainings are in `attention_book.experiments.playground`, the model and the
tasks in `attention_book.playground`. The page's widget trains the same models in the
reader's browser; `playground_training` is what a reader without JavaScript sees instead.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from torch import Tensor

from attention_book.experiments.playground import (
    DEFAULT_POSITIONAL,
    DEFAULT_SHAPE,
    PLAYGROUND_STUDY,
    playground_attention,
    playground_experiment,
    playground_steps,
    playground_trained_model,
)
from attention_book.experiments.spread import recorded_values
from attention_book.playground import SEPARATOR
from attention_book.plotting import BOOK_STYLE, markdown_table, new_figure

__all__ = [
    "EXAMPLE_DIGITS",
    "FIGURES",
    "playground_facts",
    "playground_mirror_words",
    "playground_steps_table",
    "playground_training",
    "playground_verdict",
]

#: The sequence the static figure shows: the digits, the separator, the digits reversed.
EXAMPLE_DIGITS = (3, 1, 4, 1, 5)
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
UNSOLVED = PLAYGROUND_STUDY.num_steps + PLAYGROUND_STUDY.eval_every


def _shape_name(num_blks: int, num_heads: int) -> str:
    layers = f"{num_blks} layer{'s' * (num_blks > 1)}"
    return f"{layers}, {num_heads} head{'s' * (num_heads > 1)}"


def _final_accuracy(run: Mapping[str, Any]) -> float:
    """The accuracy at the last measurement of a training, in percent."""
    return 100 * run["accuracies"][-1][1] if run["accuracies"] else 0.0


def _select(runs: list[dict[str, Any]], **wanted: Any) -> list[dict[str, Any]]:
    return [run for run in runs if all(run[key] == value for key, value in wanted.items())]


def _steps(run: Mapping[str, Any]) -> int:
    return playground_steps(dict(run), PLAYGROUND_STUDY.num_steps)


def _count(k: int, n: int) -> str:
    """``"all nine"``, ``"none of the nine"`` or ``"four of the nine"``."""
    word = NUMBERS[n] if n < len(NUMBERS) else str(n)
    if k == n:
        return f"all {word}" if n > 2 else ("both" if n == 2 else "the one")
    if k == 0:
        return f"none of the {word}"
    return f"{NUMBERS[k] if k < len(NUMBERS) else k} of the {word}"


def _percent_range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f}%" if round(low) == round(high) else f"{low:.0f} to {high:.0f}%"


def playground_steps_table() -> str:
    """Markdown table: steps to solve each task, for every shape, kind of positions and seed."""
    result = playground_experiment()
    runs = result["runs"]
    seeds = sorted({run["seed"] for run in runs})
    header = ["model", "positions", *(f"{task}: steps to solve" for task in PLAYGROUND_STUDY.tasks)]
    rows = []
    for num_blks, num_heads in PLAYGROUND_STUDY.shapes:
        for positional in PLAYGROUND_STUDY.positionals:
            cells = []
            for task in PLAYGROUND_STUDY.tasks:
                chosen = _select(
                    runs, task=task, num_blks=num_blks, num_heads=num_heads, positional=positional
                )
                chosen.sort(key=lambda run: run["seed"])
                cells.append(
                    " · ".join(
                        f"{run['solved_at']:,}"
                        if run["solved_at"] is not None
                        else f"— ({_final_accuracy(run):.1f}%)"
                        for run in chosen
                    )
                )
            rows.append([_shape_name(num_blks, num_heads), positional, *cells])
    seconds = [run["seconds"] for run in runs]
    caption = (
        "*Steps until 99% of the answer digits came out right (on 256 fresh sequences of "
        f"{PLAYGROUND_STUDY.num_digits} digits, measured every "
        f"{PLAYGROUND_STUDY.eval_every} steps), for the seeds {', '.join(map(str, seeds))} in "
        f"that order; — : not solved in {PLAYGROUND_STUDY.num_steps:,} steps, with the share "
        "of answer digits it got right at the end. A training took "
        f"{min(seconds):.1f} to {max(seconds):.1f} seconds on one CPU thread in this build, "
        f"{sum(seconds) / 60:.1f} minutes for all {len(runs)}.*"
    )
    return markdown_table(header, rows) + "\n" + caption


def playground_training() -> Figure:
    """The page's default training: its loss, and every head's attention when it had solved.

    Reverse, 2 layers, 2 heads, learned positions, the study's first seed: the widget's
    default. The heads read `EXAMPLE_DIGITS`, the separator and the reversed digits.
    """
    result = playground_experiment()
    model, config = playground_trained_model("reverse")
    run = _default_run(result["runs"], "reverse")
    digits = list(EXAMPLE_DIGITS)
    tokens = [*digits, SEPARATOR, *digits[::-1][:-1]]
    weights = playground_attention(model, tokens)  # (blocks, heads, n, n)
    labels = [str(t) if t != SEPARATOR else "|" for t in tokens]
    num_blks, num_heads = weights.shape[:2]
    fig = new_figure((9.6, 4.8))
    with plt.rc_context(BOOK_STYLE):
        grid = fig.add_gridspec(num_blks, 1 + num_heads, width_ratios=[1.3] + [1] * num_heads)
        ax = fig.add_subplot(grid[:, 0])
        steps = range(1, len(run["losses"]) + 1)
        ax.plot(steps, run["losses"], color="#1f77b4", linewidth=1)
        ax.set_yscale("log")
        if run["solved_at"] is not None:
            ax.axvline(run["solved_at"], color="#d62728", linestyle="--", linewidth=1)
            ax.text(
                run["solved_at"],
                max(run["losses"]),
                f" solved at step {run['solved_at']}",
                color="#d62728",
                va="top",
                ha="right",
                fontsize=9,
            )
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (cross-entropy)")
        ax.set_title(f"reverse, {_shape_name(config.num_blks, config.num_heads)}", fontsize=10)
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        for block in range(num_blks):
            for head in range(num_heads):
                ax = fig.add_subplot(grid[block, 1 + head])
                ax.imshow(weights[block, head].numpy(), cmap="Reds", vmin=0, vmax=1)
                ax.set_xticks(range(len(labels)), labels, fontsize=8)
                ax.set_yticks(range(len(labels)), labels, fontsize=8)
                ax.set_title(f"layer {block + 1}, head {head + 1}", fontsize=9)
                if block == num_blks - 1:
                    ax.set_xlabel("key (what it reads)", fontsize=8)
                if head == 0:
                    ax.set_ylabel("query", fontsize=8)
        fig.tight_layout()
    return fig


def _default_run(runs: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """The training of the page's default shape and positions, first seed, for a task."""
    chosen = _select(
        runs,
        task=task,
        num_blks=DEFAULT_SHAPE[0],
        num_heads=DEFAULT_SHAPE[1],
        positional=DEFAULT_POSITIONAL,
    )
    return min(chosen, key=lambda run: run["seed"])


def _how_many(a: float, b: float) -> str:
    """How a median of steps compares with another: apart by a tenth or more, or about equal."""
    if a * 1.1 <= b:
        return "fewer steps than"
    if a >= 1.1 * b:
        return "more steps than"
    return "about as many steps as"


TASK_VERBS = {"reverse": "reversing", "sort": "sorting"}


def _recorded_count(recorded: Mapping[str, Mapping[str, float]], holds) -> tuple[int, int]:
    values = [numbers for numbers in recorded.values()]
    return sum(bool(holds(numbers)) for numbers in values), len(values)


def _in_recorded(k: int, n: int) -> str:
    """``"in all five"``, ``"in none"`` or ``"in two of them"``: of the recorded trainings."""
    if k == n:
        return {1: "in it", 2: "in both"}.get(n, f"in all {_number(n)}")
    if k == 0:
        return "in none"
    return f"in {_number(k)} of them"


def _number(n: int) -> str:
    return NUMBERS[n] if n < len(NUMBERS) else str(n)


def _recorded_intro(n: int) -> str:
    """The start of a sentence on the recorded trainings of the study."""
    trainings = "one recorded training" if n == 1 else f"{_number(n)} recorded trainings"
    return f"Over the {trainings} of the study (other CPU arithmetic, other seeds)"


def _steps_text(steps: float) -> str:
    """A step count, or a median of them, which may end in .5."""
    return f"{steps:,.0f}" if steps == int(steps) else f"{steps:,.1f}"


def playground_mirror_words(weights: Tensor, num_digits: int) -> str:
    """Whether a head reads, from the answer positions, the digit that reversing asks for.

    At answer position ``q`` (the separator is ``num_digits``) the model predicts the input
    digit at ``2 * num_digits - 1 - q``: the mirror image around the separator.

    Args:
        weights: Every head's attention on one reversing sequence (`playground_attention`).
        num_digits: Digits before the separator.

    Returns:
        A clause on the head that looks at the mirrored digit most often.

    Shapes:
        - weights: ``(num_blks, num_heads, 2 * num_digits, 2 * num_digits)``
    """
    queries = range(num_digits, 2 * num_digits)
    best, where = -1, (0, 0)
    for layer in range(weights.shape[0]):
        for head in range(weights.shape[1]):
            hits = sum(
                int(weights[layer, head, q].argmax()) == 2 * num_digits - 1 - q for q in queries
            )
            if hits > best:
                best, where = hits, (layer + 1, head + 1)
    name = f"head {where[1]} of layer {where[0]}"
    if best == len(queries):
        return f"{name} puts most of its weight on the mirrored digit from every answer position"
    if best > 0:
        share = _count(best, len(queries))
        return (
            f"{name} puts most of its weight on the mirrored digit from {share} answer "
            "positions, and no head does so from more"
        )
    return (
        "no head puts most of its weight on the mirrored digit from any answer position: the "
        "lookup is shared between heads"
    )


def playground_verdict(
    runs: list[dict[str, Any]], recorded: Mapping[str, Mapping[str, float]]
) -> dict[str, str]:
    """The page's words that depend on the study's numbers; the rest of each sentence is the page's.

    Args:
        runs: `playground_experiment`'s ``"runs"`` (or the same shape: "task", "num_blks",
            "num_heads", "positional", "seed", "solved_at", "accuracies").
        recorded: `playground_headline`'s numbers in each recorded training of the study
            (other CPU arithmetic, other seeds), by variant (`recorded_values`).

    Returns:
        ``"reverse_none"``: whether reversing was solved without positions, and how far the
        models got; ``"reverse_none_recorded"``: the same over the recorded trainings;
        ``"depth_none"``: how far two layers got against one without positions;
        ``"sort_none"`` and ``"sort_none_recorded"``: sorting without positions;
        ``"none_compare"``: which task got further without positions; ``"heads"`` and
        ``"heads_recorded"``: four heads against one at one layer; ``"positions"`` and
        ``"positions_recorded"``: sinusoidal against learned positions on reversing;
        ``"default"``: when the page's default training solved reversing.

    Raises:
        ValueError: If `recorded` is empty.
    """
    if not recorded:
        raise ValueError("recorded must hold the recorded trainings' numbers, got none")
    words = {}
    count = len(_select(runs, task="reverse", positional="none"))

    # Reversing without positions.
    reverse_none = _select(runs, task="reverse", positional="none")
    solved = [run for run in reverse_none if run["solved_at"] is not None]
    unsolved = [_final_accuracy(run) for run in reverse_none if run["solved_at"] is None]
    if not solved:
        one = [_final_accuracy(run) for run in reverse_none if run["num_blks"] == 1]
        deep = [_final_accuracy(run) for run in reverse_none if run["num_blks"] > 1]
        words["reverse_none"] = (
            f"none of the {NUMBERS[count]} models without positions learned to reverse: after "
            f"{PLAYGROUND_STUDY.num_steps:,} steps the one-layer models got "
            f"{_percent_range(one)} of the answer digits right"
            + (f", the two-layer models {_percent_range(deep)}" if deep else "")
        )
    else:
        first = min(run["solved_at"] for run in solved)
        words["reverse_none"] = (
            f"{_count(len(solved), count)} models without positions learned to reverse (the "
            f"first at step {first:,})"
            + (
                f"; the others got {_percent_range(unsolved)} of the answer digits right"
                if unsolved
                else ""
            )
        )
    k, n = _recorded_count(recorded, lambda v: v["reverse, none: fewest steps to solve"] < UNSOLVED)
    if k == 0:
        words["reverse_none_recorded"] = (
            f"{_recorded_intro(n)}, no model without positions reversed the digits either."
        )
    else:
        words["reverse_none_recorded"] = (
            f"{_recorded_intro(n)}, some model without positions did reverse the digits "
            f"{_in_recorded(k, n)}: positions make the task easy, they are not the only way."
        )

    # Depth without positions.
    one = [_final_accuracy(run) for run in reverse_none if run["num_blks"] == 1]
    deep = [_final_accuracy(run) for run in reverse_none if run["num_blks"] > 1]
    if one and deep:
        a, b = statistics.mean(deep), statistics.mean(one)
        if a >= b + 5:
            words["depth_none"] = (
                f"the two-layer models got further than the one-layer ones ({a:.0f}% of the "
                f"answer digits on average, against {b:.0f}%)"
            )
        elif a <= b - 5:
            words["depth_none"] = (
                f"the two-layer models got less far than the one-layer ones ({a:.0f}% of the "
                f"answer digits on average, against {b:.0f}%)"
            )
        else:
            words["depth_none"] = (
                f"depth made little difference ({a:.0f}% of the answer digits on average with "
                f"two layers, {b:.0f}% with one)"
            )
    else:
        words["depth_none"] = "the study compares no depths without positions"

    # Sorting without positions.
    sort_none = _select(runs, task="sort", positional="none")
    sort_with = [run for run in _select(runs, task="sort") if run["positional"] != "none"]
    solved = [run for run in sort_none if run["solved_at"] is not None]
    unsolved = [_final_accuracy(run) for run in sort_none if run["solved_at"] is None]
    median_with = statistics.median(_steps(run) for run in sort_with)
    if not solved:
        words["sort_none"] = (
            f"none of the {NUMBERS[len(sort_none)]} models without positions learned to sort "
            f"in {PLAYGROUND_STUDY.num_steps:,} steps, though they got "
            f"{_percent_range(unsolved)} of the answer digits right"
        )
    else:
        shapes = sorted({_shape_name(run["num_blks"], run["num_heads"]) for run in solved})
        words["sort_none"] = (
            f"{_count(len(solved), len(sort_none))} models without positions learned to sort "
            f"(with {' and '.join(shapes)}; the first at step "
            f"{min(run['solved_at'] for run in solved):,}, against a median of "
            f"{_steps_text(median_with)} steps with positions)"
            + (
                f"; the others got {_percent_range(unsolved)} of the answer digits right"
                if unsolved
                else ""
            )
        )
    k, n = _recorded_count(recorded, lambda v: v["sort, none: fewest steps to solve"] < UNSOLVED)
    words["sort_none_recorded"] = (
        f"{_recorded_intro(n)}, some model without positions sorted {_in_recorded(k, n)}."
        if k
        else f"{_recorded_intro(n)}, no model without positions sorted."
    )
    reverse_mean = statistics.mean(_final_accuracy(run) for run in reverse_none)
    sort_mean = statistics.mean(_final_accuracy(run) for run in sort_none)
    if sort_mean >= reverse_mean:
        words["none_compare"] = (
            f"Without positions, sorting got further than reversing: {sort_mean:.0f}% of the "
            f"answer digits right on average at the end, against {reverse_mean:.0f}%."
        )
    else:
        words["none_compare"] = (
            f"Without positions, sorting got no further than reversing: {sort_mean:.0f}% of "
            f"the answer digits right on average at the end, against {reverse_mean:.0f}%."
        )

    # Four heads against one, at one layer, with positions; then the kinds of positions.
    heads, heads_recorded, positions, positions_recorded = [], [], [], []
    compared = []  # the steps of every training the head sentence compares
    for task in PLAYGROUND_STUDY.tasks:
        pairs = []
        for one_head in _select(runs, task=task, num_blks=1, num_heads=1):
            four = _select(
                runs,
                task=task,
                num_blks=1,
                num_heads=4,
                positional=one_head["positional"],
                seed=one_head["seed"],
            )
            if one_head["positional"] != "none" and four:
                pairs.append((_steps(one_head), _steps(four[0])))
        compared += [steps for pair in pairs for steps in pair]
        if pairs:
            a = statistics.median(four for _, four in pairs)
            b = statistics.median(one for one, _ in pairs)
            fewer = sum(four < one for one, four in pairs)
            more = sum(four > one for one, four in pairs)
            heads.append(
                f"for {TASK_VERBS[task]}, four heads needed {_how_many(a, b)} one (a median of "
                f"{_steps_text(a)} against {_steps_text(b)}; fewer in {_count(fewer, len(pairs))} "
                f"pairs of trainings with the same positions and seed, more in "
                f"{_count(more, len(pairs))})"
            )
        one_label = f"{task}, 1 block, 1 head, with positions: median steps to solve"
        four_label = f"{task}, 1 block, 4 heads, with positions: median steps to solve"
        k, n = _recorded_count(recorded, lambda v, o=one_label, f=four_label: v[f] < v[o])
        heads_recorded.append(f"for {TASK_VERBS[task]} {_in_recorded(k, n)}")

        sinusoidal = [_steps(r) for r in _select(runs, task=task, positional="sinusoidal")]
        learned = [_steps(r) for r in _select(runs, task=task, positional="learned")]
        if sinusoidal and learned:
            a, b = statistics.median(sinusoidal), statistics.median(learned)
            positions.append(
                f"for {TASK_VERBS[task]}, sinusoidal positions needed {_how_many(a, b)} learned "
                f"ones (a median of {_steps_text(a)} against {_steps_text(b)})"
            )
        k, n = _recorded_count(
            recorded,
            lambda v, t=task: (
                v[f"{t}, sinusoidal: median steps to solve"]
                < v[f"{t}, learned: median steps to solve"]
            ),
        )
        positions_recorded.append(f"for {TASK_VERBS[task]} {_in_recorded(k, n)}")
    words["heads"] = "; ".join(heads) or "the study has no one-layer models to compare"
    if UNSOLVED in compared:
        words["heads"] += "; a training that did not solve its task counts as 1,525 steps"
    words["heads_recorded"] = (
        f"{_recorded_intro(len(recorded))}, four heads had the lower median "
        + " and ".join(heads_recorded)
        + "."
    )
    words["positions"] = "; ".join(positions) or "the study compares no kinds of positions"
    words["positions_recorded"] = (
        f"{_recorded_intro(len(recorded))}, sinusoidal positions had the lower median "
        + " and ".join(positions_recorded)
        + "."
    )

    default = _default_run(runs, "reverse")
    words["default"] = (
        f"at step {default['solved_at']:,}"
        if default["solved_at"] is not None
        else f"not within {PLAYGROUND_STUDY.num_steps:,} steps"
    )
    return words


def playground_facts() -> dict[str, str]:
    """The numbers the page cites, and `playground_verdict`'s words on them.

    Read from the cached study and the recorded trainings of it (`recorded_values`).

    Returns:
        `playground_verdict`'s words, and: ``"<task>_<positional>_median"`` (median steps to
        solve over the shapes and seeds, an unsolved training counted as 1,525),
        ``"default_seed"`` (the seed of the default training), ``"runs"`` (how many
        trainings), ``"minutes"`` (their time in all), ``"recorded"`` (how many recorded
        trainings of the study).
    """
    result = playground_experiment()
    runs = result["runs"]
    recorded = recorded_values("playground")
    facts = {}
    for task in PLAYGROUND_STUDY.tasks:
        for positional in PLAYGROUND_STUDY.positionals:
            steps = [_steps(run) for run in _select(runs, task=task, positional=positional)]
            facts[f"{task}_{positional}_median"] = f"{statistics.median(steps):,.0f}"
    model, config = playground_trained_model("reverse")
    digits = list(EXAMPLE_DIGITS)
    weights = playground_attention(model, [*digits, SEPARATOR, *digits[::-1][:-1]])
    facts |= {
        "mirror": playground_mirror_words(weights, config.num_digits),
        "default_seed": str(_default_run(runs, "reverse")["seed"]),
        "runs": str(len(runs)),
        "minutes": f"{sum(run['seconds'] for run in runs) / 60:.1f}",
        "recorded": str(len(recorded)),
    }
    return facts | playground_verdict(runs, recorded)


FIGURES = (playground_steps_table, playground_training, playground_facts)
