"""The playground page's verdicts are worded from the numbers they read.

`playground_verdict` returns the page's words that depend on the study: whether the models
without positions learned to reverse or to sort and how far they got, what a second layer
changed, four heads against one, sinusoidal against learned positions, and how often each
held in the recorded trainings of the study. Each branch is fed a study whose numbers call for
it; the last tests read the cached study itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from attention_book.experiments.playground import PLAYGROUND_STUDY, playground_headline
from attention_book.figures.self_attention_playground import (
    playground_mirror_words,
    playground_verdict,
)

#: Steps to solve (None: unsolved) and the final accuracy, like the build's: by task,
#: positions and shape.
BASE = {
    ("reverse", "learned"): 200,
    ("reverse", "sinusoidal"): 150,
    ("sort", "learned"): 700,
    ("sort", "sinusoidal"): 725,
}


def like_the_build(task: str, num_blks: int, num_heads: int, positional: str, seed: int):
    """(solved_at, final accuracy) of one training, close to what the build measured."""
    if positional == "none":
        if task == "reverse":
            return None, 0.87 if num_blks == 2 else 0.30 + 0.04 * seed + 0.01 * num_heads
        return None, 0.95 if num_blks == 2 else 0.85 + 0.01 * seed
    steps = BASE[task, positional]
    if num_blks == 1 and task == "reverse":
        steps += 50 if num_heads == 4 else -25  # four heads slower on reversing
    if num_blks == 1 and task == "sort":
        steps += -50 if num_heads == 4 else 400  # and faster on sorting
    return steps + 25 * seed, 0.995


def study(change: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """The 54 trainings of the study; `change` may return another (solved_at, accuracy)."""
    runs = []
    for task in PLAYGROUND_STUDY.tasks:
        for num_blks, num_heads in PLAYGROUND_STUDY.shapes:
            for positional in PLAYGROUND_STUDY.positionals:
                for seed in PLAYGROUND_STUDY.seeds:
                    shape = (task, num_blks, num_heads, positional, seed)
                    solved_at, accuracy = like_the_build(*shape)
                    if change is not None:
                        solved_at, accuracy = change(*shape) or (solved_at, accuracy)
                    last = solved_at if solved_at is not None else PLAYGROUND_STUDY.num_steps
                    runs.append(
                        {
                            "task": task,
                            "num_blks": num_blks,
                            "num_heads": num_heads,
                            "positional": positional,
                            "seed": seed,
                            "solved_at": solved_at,
                            "accuracies": [[25, 0.2], [last, accuracy]],
                        }
                    )
    return runs


def recorded(*studies: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The headline numbers of each study, as the recorded variants hold them."""
    return {
        f"variant {i}": playground_headline({"runs": runs, "num_steps": 1500})
        for i, runs in enumerate(studies)
    }


def verdict(runs=None, variants=None) -> dict[str, str]:
    runs = study() if runs is None else runs
    return playground_verdict(runs, recorded(runs) if variants is None else variants)


def test_models_without_positions_that_never_reverse_are_said_to_and_how_far_they_got():
    words = verdict()
    assert words["reverse_none"] == (
        "none of the nine models without positions learned to reverse: after 1,500 steps the "
        "one-layer models got 31 to 42% of the answer digits right, the "
        "two-layer models 87%"
    )
    assert words["reverse_none_recorded"] == (
        "Over the one recorded training of the study (other CPU arithmetic, other seeds), no model "
        "without positions reversed the digits either."
    )


def test_a_model_without_positions_that_reverses_is_counted():
    def one_solves(task, num_blks, num_heads, positional, seed):
        if (task, num_blks, positional, seed) == ("reverse", 2, "none", 1):
            return 1200, 0.992
        return None

    runs = study(one_solves)
    words = verdict(runs, recorded(study(), study(), runs))
    assert words["reverse_none"].startswith(
        "one of the nine models without positions learned to reverse (the first at step "
        "1,200); the others got 31 to 87%"
    )
    assert words["reverse_none_recorded"] == (
        "Over the three recorded trainings of the study (other CPU arithmetic, other seeds), "
        "some model without positions did reverse the digits in one of them: positions make "
        "the task easy, they are not the only way."
    )
    both = verdict(runs, recorded(runs, runs))["reverse_none_recorded"]
    assert "did reverse the digits in both:" in both


def test_depth_without_positions_is_worded_in_each_direction():
    assert verdict()["depth_none"] == (
        "the two-layer models got further than the one-layer ones (87% of the answer digits "
        "on average, against 36%)"
    )

    def shallow_better(task, num_blks, num_heads, positional, seed):
        if task == "reverse" and positional == "none":
            return None, 0.3 if num_blks == 2 else 0.6
        return None

    assert verdict(study(shallow_better))["depth_none"].startswith(
        "the two-layer models got less far than the one-layer ones (30%"
    )

    def alike(task, num_blks, num_heads, positional, seed):
        if task == "reverse" and positional == "none":
            return None, 0.5 if num_blks == 2 else 0.52
        return None

    assert verdict(study(alike))["depth_none"].startswith("depth made little difference (50%")


def test_sorting_without_positions_is_worded_from_the_solved_runs():
    words = verdict()
    assert words["sort_none"] == (
        "none of the nine models without positions learned to sort in 1,500 steps, though "
        "they got 85 to 95% of the answer digits right"
    )
    assert words["sort_none_recorded"].endswith("no model without positions sorted.")

    def deep_sorts(task, num_blks, num_heads, positional, seed):
        if (task, num_blks, positional) == ("sort", 2, "none"):
            return 1000 + 25 * seed, 0.991
        return None

    runs = study(deep_sorts)
    words = verdict(runs, recorded(runs, study()))
    assert words["sort_none"].startswith(
        "three of the nine models without positions learned to sort (with 2 layers, 2 heads; "
        "the first at step 1,000, against a median of 737.5 steps with positions); the others "
        "got 85 to 87%"
    )
    assert words["sort_none_recorded"].endswith("sorted in one of them.")

    def all_sort(task, num_blks, num_heads, positional, seed):
        return (900, 0.99) if (task, positional) == ("sort", "none") else None

    assert verdict(study(all_sort))["sort_none"].startswith(
        "all nine models without positions learned to sort (with 1 layer, 1 head and 1 "
        "layer, 4 heads and 2 layers, 2 heads;"
    )


def test_which_task_gets_further_without_positions_is_worded_both_ways():
    assert verdict()["none_compare"].startswith("Without positions, sorting got further than")

    def sort_stalls(task, num_blks, num_heads, positional, seed):
        return (None, 0.2) if (task, positional) == ("sort", "none") else None

    assert verdict(study(sort_stalls))["none_compare"].startswith(
        "Without positions, sorting got no further than reversing: 20%"
    )


def test_four_heads_against_one_is_worded_per_task_and_counted():
    words = verdict()
    assert words["heads"] == (
        "for reversing, four heads needed more steps than one (a median of 250 against "
        "175; fewer in none of the six pairs of trainings with the same positions and "
        "seed, more in all six); for sorting, four heads needed fewer steps than one (a "
        "median of 687.5 against 1,137.5; fewer in all six pairs of trainings with the same "
        "positions and seed, more in none of the six)"
    )
    assert words["heads_recorded"] == (
        "Over the one recorded training of the study (other CPU arithmetic, other seeds), four "
        "heads had the lower median for reversing in none and for sorting in it."
    )

    def alike(task, num_blks, num_heads, positional, seed):
        if num_blks == 1 and positional != "none":
            slower = 25 if num_heads == 4 and positional == "learned" else 0
            return BASE[task, positional] + 25 * seed + slower, 0.995
        return None

    runs = study(alike)
    words = verdict(runs, recorded(runs, study(), study()))
    assert "four heads needed about as many steps as one" in words["heads"]
    assert "fewer in none of the six pairs" in words["heads"]
    assert words["heads_recorded"].endswith(
        "four heads had the lower median for reversing in none and for sorting in two of them."
    )

    def four_fail(task, num_blks, num_heads, positional, seed):
        if (task, num_blks, num_heads, positional) == ("sort", 1, 4, "learned"):
            return None, 0.9
        return None

    assert verdict(study(four_fail))["heads"].endswith(
        "; a training that did not solve its task counts as 1,525 steps"
    )


def test_the_kinds_of_positions_are_compared_per_task():
    words = verdict()
    assert words["positions"] == (
        "for reversing, sinusoidal positions needed fewer steps than learned ones (a median of "
        "175 against 225); for sorting, sinusoidal positions needed about as many steps as "
        "learned ones (a median of 750 against 725)"
    )
    assert words["positions_recorded"].endswith(
        "sinusoidal positions had the lower median for reversing in it and for sorting in none."
    )

    def learned_fast(task, num_blks, num_heads, positional, seed):
        if task == "reverse" and positional == "learned":
            return 75, 0.995
        return None

    assert verdict(study(learned_fast))["positions"].startswith(
        "for reversing, sinusoidal positions needed more steps than learned ones (a median of "
        "175 against 75)"
    )


def test_the_default_run_is_said_solved_or_not():
    assert verdict()["default"] == "at step 200"

    def default_fails(task, num_blks, num_heads, positional, seed):
        if (task, num_blks, num_heads, positional, seed) == ("reverse", 2, 2, "learned", 0):
            return None, 0.9
        return None

    assert verdict(study(default_fails))["default"] == "not within 1,500 steps"


def test_no_recorded_trainings_is_an_error():
    with pytest.raises(ValueError, match="recorded"):
        playground_verdict(study(), {})


def mirror(hits: dict[tuple[int, int], list[int]]) -> torch.Tensor:
    """Weights of 2 layers × 2 heads on 10 positions, each answer query's most on one key."""
    weights = torch.eye(10).expand(2, 2, 10, 10) * 0.5  # on itself: never the mirrored digit
    weights = weights.clone()
    for (layer, head), keys in hits.items():
        for query, key in zip(range(5, 10), keys, strict=True):
            weights[layer, head, query, key] = 0.9
    return weights


def test_the_mirror_clause_names_the_head_that_reads_the_mirrored_digit():
    every = mirror({(1, 0): [4, 3, 2, 1, 0]})
    assert playground_mirror_words(every, 5) == (
        "head 1 of layer 2 puts most of its weight on the mirrored digit from every answer position"
    )
    four = mirror({(1, 1): [5, 3, 2, 1, 0], (0, 0): [4, 0, 0, 0, 5]})
    assert playground_mirror_words(four, 5) == (
        "head 2 of layer 2 puts most of its weight on the mirrored digit from four of the five "
        "answer positions, and no head does so from more"
    )
    none = mirror({(0, 0): [0, 0, 0, 0, 1]})
    assert playground_mirror_words(none, 5).startswith("no head puts most of its weight")


def test_the_cached_study_is_what_the_table_and_the_facts_read():
    # The stored study (the build's, or a crossmachine variant's): every training recorded
    # with the seed it used, and the page's table, facts and figure drawn from it.
    from attention_book.experiments.playground import playground_experiment
    from attention_book.figures.self_attention_playground import (
        playground_facts,
        playground_steps_table,
    )

    result = playground_experiment()
    offset = result["seed_offset"]
    assert len(result["runs"]) == 54
    assert {run["seed"] for run in result["runs"]} == {s + offset for s in PLAYGROUND_STUDY.seeds}
    for run in result["runs"]:
        assert len(run["losses"]) == (run["solved_at"] or PLAYGROUND_STUDY.num_steps)
        assert (run["solved_at"] is not None) == (run["accuracies"][-1][1] >= 0.99)
    table = playground_steps_table()
    assert table.count("\n| ") == 9 and table.rstrip().endswith("*")
    facts = playground_facts()
    assert facts["runs"] == "54" and int(facts["recorded"]) >= 1
    assert facts["reverse_none"] and facts["mirror"]
