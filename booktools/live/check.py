"""The browser check of the live widgets: the page's model against PyTorch's, case by case.

`booktools.browser.check` calls `check_live_widgets` on every page that has a live widget
(`booktools.live.widgets`), in light mode, before it runs axe (so that axe sees the loaded widget).
For each widget it:

1. checks that nothing of the widget loaded with the page, presses the Load button as a
   reader does, and weighs what the widget downloaded (its code and its model), which must stay
   under `MAX_WIDGET_GZIP_BYTES`;
2. types each held-out case of the widget's ``reference.json`` (written by
   `booktools.live.export` from PyTorch) into the widget's box, presses Enter, waits for the
   widget to finish, and reads what the page computed (``window.bookLive[name].result``);
3. fails unless the page's tokens are PyTorch's, and every logit and attention weight is within
   the reference's tolerance of PyTorch's (the largest differences are reported either way);
4. moves every picker and slider of the widget through its values, as a reader does: an error
   in what they redraw is an uncaught exception, which the browser check reports.

The FlashAttention widget (``flash``) has no box to type in: pressing its button runs both of
its WebGPU kernels on every case of its ``reference.json`` (`booktools.live.flash`), and
`check_kernels` fails unless both ran on WebGPU and each is within the tolerance of PyTorch's
output; then it presses the widget's timing button and reports the times.

The training playground (``train``) has no box either: the check makes the page train each
reference case of its ``reference.json`` (`booktools.live.train`: PyTorch's initial weights,
batches, losses and final weights) and `compare_training` fails unless every loss and weight is
within the tolerance of PyTorch's, relative, and the page's own weights and batches are
PyTorch's; then it presses Train, Pause, Step and Reset, and trains the default model with Train
until it solves the task at the step the build's study says (`check_training`).

The widget runs with reduced motion (its animation shows the last step at once), so what the
screenshots show does not depend on when they are taken.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from booktools.browser import scripts as js
from booktools.live.widgets import KERNELS, budget

#: How long one case may take in the page (the GPT's run without the cache is the slowest).
CASE_TIMEOUT_MS = 180_000
#: What each widget's result holds that is compared with PyTorch's: exactly (tokens) or within
#: the tolerance (numbers); "logits" are logits, the rest attention weights.
EXACT = {
    "translator": ("source_ids", "tokens"),
    "gpt": ("prompt_ids", "tokens", "tokens_without_cache"),
}
CLOSE = {
    "translator": (("logits", "logits"), ("encoder", "encoder"), ("decoder_self", "decoder_self"),
                   ("cross", "cross")),
    "gpt": (("logits", "logits"), ("logits_without_cache", "logits"), ("weights", "weights")),
}  # fmt: skip


@dataclass
class LiveReport:
    """What the check of one widget found: its download, its largest differences, its times."""

    name: str
    bytes: int = 0
    cases: int = 0
    logit_difference: float = 0.0
    weight_difference: float = 0.0
    timings: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long its check took

    def summary(self) -> str:
        """One line for the check's output."""
        if self.name == "train":  # a training: losses and weights after every case's steps
            return (
                f"{self.name} (checked in {self.seconds:.1f} s): downloads "
                f"{self.bytes / 1000:.0f} KB; {self.cases} trainings; largest relative "
                f"difference from PyTorch: losses {self.logit_difference:.1e}, weights "
                f"{self.weight_difference:.1e}; " + "; ".join(self.timings)
            )
        if self.name in KERNELS:  # no logits: each kernel's output against PyTorch's
            return (
                f"{self.name} (checked in {self.seconds:.1f} s): downloads "
                f"{self.bytes / 1000:.0f} KB; {self.cases} cases; largest difference from "
                f"PyTorch's output {self.weight_difference:.1e}; " + "; ".join(self.timings)
            )
        return (
            f"{self.name} (checked in {self.seconds:.1f} s): downloads {self.bytes / 1000:.0f} KB; "
            f"{self.cases} cases; largest "
            f"difference from PyTorch: logits {self.logit_difference:.1e}, attention weights "
            f"{self.weight_difference:.1e}; " + "; ".join(self.timings)
        )


def largest_difference(ours: Any, theirs: Any) -> float:
    """The largest absolute difference between two nested lists of numbers (inf if shapes differ).

    Args:
        ours: Numbers, or lists of them, nested.
        theirs: The same shape.

    Returns:
        The largest difference; ``inf`` where the shapes differ or a number is missing or NaN.
    """
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return math.inf
        return max((largest_difference(a, b) for a, b in zip(ours, theirs, strict=True)),
                   default=0.0)  # fmt: skip
    if isinstance(ours, int | float) and isinstance(theirs, int | float):
        difference = abs(ours - theirs)
        return math.inf if math.isnan(difference) else difference
    return math.inf


def compare_case(name: str, case: dict, result: dict | None, tolerance: float) -> tuple[list, dict]:
    """Compare what the page computed for one case with PyTorch's reference.

    Args:
        name: The widget's name (``translator`` or ``gpt``).
        case: The reference case (``reference.json``).
        result: What the page computed (``window.bookLive[name].result``), or None.
        tolerance: The largest difference allowed for a logit or an attention weight.

    Returns:
        ``(problems, differences)``: what is wrong, and the largest difference of each
        compared field.
    """
    label = repr(case.get("sentence", case.get("prompt")))
    if result is None:
        return [f"live {name}, {label}: the page computed nothing"], {}
    problems, differences = [], {}
    for key in EXACT[name]:
        expected = case[key.removesuffix("_without_cache")]
        if result.get(key) != expected:
            problems.append(
                f"live {name}, {label}: {key} differ from PyTorch's: the page has "
                f"{result.get(key)}, PyTorch {expected}"
            )
    for key, reference_key in CLOSE[name]:
        difference = largest_difference(result.get(key), case[reference_key])
        differences[key] = difference
        if difference > tolerance:
            problems.append(
                f"live {name}, {label}: {key} differ from PyTorch's by up to {difference:.3g}, "
                f"over the tolerance {tolerance:g}"
            )
    if name == "gpt" and result.get("same") is not True:
        problems.append(f"live {name}, {label}: the page says its two runs differ")
    return problems, differences


def run_case(page, name: str, case: dict) -> dict | None:
    """Type one case into a widget as a reader does, press Enter, and read what it computed.

    Args:
        page: The Playwright page, with the widget loaded.
        name: The widget's name.
        case: The reference case.

    Returns:
        The widget's result, or None if it did not finish.
    """
    widget = page.locator(f'.book-live[data-live="{name}"]')
    box = widget.locator('input[type="text"]')
    if name == "gpt":
        widget.locator('input[type="number"]').fill(str(len(case["tokens"])))
    box.fill("")
    box.press_sequentially(case.get("sentence", case.get("prompt")))
    box.press("Enter")
    page.wait_for_function(
        """([name, text]) => {
          const live = window.bookLive && window.bookLive[name];
          const result = live && live.result;
          const widget = document.querySelector(`.book-live[data-live="${name}"]`);
          return widget.dataset.state === 'error'
            || (widget.dataset.state === 'done' && result
                && (result.sentence === text || result.prompt === text));
        }""",
        arg=[name, case.get("sentence", case.get("prompt"))],
        timeout=CASE_TIMEOUT_MS,
    )
    return page.evaluate(js.LIVE_RESULT, name)


def timing(name: str, case: dict, result: dict | None) -> str:
    """The page's time for one case, in words."""
    if not result:
        return ""
    if name == "translator":
        count = len(result["tokens"])
        return (
            f"{len(result['source_ids'])} source tokens translated in {result['ms']:.1f} ms "
            f"({count} tokens, {result['ms'] / count:.2f} ms each)"
        )
    count = len(result["tokens"])
    cached, plain = sum(result["ms_with_cache"]), sum(result["ms_without_cache"])
    return (
        f"{count} characters in {cached:.0f} ms with the cache ({cached / count:.2f} ms each), "
        f"{plain:.0f} ms without ({plain / count:.2f} ms each)"
    )


def check_live_widgets(page, problems: list[str]) -> list[LiveReport]:
    """Load every live widget of the page, run its reference cases, compare with PyTorch.

    Args:
        page: A Playwright page, loaded, in light mode.
        problems: Where to report what is wrong (the light mode's report).

    Returns:
        One report per widget (empty for a page without widgets).
    """
    found = page.evaluate(js.LIVE_WIDGETS)
    if not found["widgets"]:
        return []
    if found["loaded"]:
        problems.append(
            f"live widgets loaded files before their button was pressed: {found['loaded']}"
        )
    page.emulate_media(reduced_motion="reduce")
    reports = []
    for widget in found["widgets"]:
        name = widget["name"]
        report = LiveReport(name)
        started = time.perf_counter()
        reports.append(report)
        start = page.evaluate(js.RESOURCE_COUNT)
        page.locator(f'.book-live[data-live="{name}"] .book-live__load').click()
        page.wait_for_function(
            "name => ['ready', 'done', 'error'].includes(document.querySelector("
            '`.book-live[data-live="${name}"]`).dataset.state)',
            arg=name,
            timeout=CASE_TIMEOUT_MS,
        )
        if page.evaluate(js.LIVE_STATE, name) == "error":
            problems.append(f"live {name}: the widget failed to load or run")
            continue
        report.bytes = page.evaluate(js.RESOURCES_SINCE, start)["bytes"]
        if report.bytes > budget(name):
            problems.append(
                f"live {name}: the widget downloads {report.bytes:,} bytes, over the "
                f"{budget(name):,} it may"
            )
        reference = page.evaluate(js.FETCH_JSON, widget["reference"])
        if name == "train":
            check_training(page, reference, report, problems)
            report.seconds = time.perf_counter() - started
            continue
        if name in KERNELS:
            check_kernels(page, name, reference, report, problems)
            report.seconds = time.perf_counter() - started
            continue
        tolerance = reference["tolerance"]
        for case in reference["cases"]:
            result = run_case(page, name, case)
            found_problems, differences = compare_case(name, case, result, tolerance)
            problems += found_problems
            report.cases += 1
            for key, difference in differences.items():
                if "logits" in key:
                    report.logit_difference = max(report.logit_difference, difference)
                else:
                    report.weight_difference = max(report.weight_difference, difference)
            report.timings.append(timing(name, case, result))
        page.evaluate(js.LIVE_CONTROLS, name)
        report.seconds = time.perf_counter() - started
    return reports


#: How long the FlashAttention widget's timing may take in the check (it stops by itself once a
#: call is slow, after n = 512 on SwiftShader).
TIMING_TIMEOUT_MS = 300_000


def compare_kernels(reference: dict, result: dict | None) -> tuple[list[str], list[dict]]:
    """Compare both WebGPU kernels' outputs with PyTorch's, case by case.

    Args:
        reference: ``reference.json`` (`booktools.live.flash`): the cases and the tolerance.
        result: What the page computed (``window.bookLive.flash.result``), or None.

    Returns:
        ``(problems, differences)``: what is wrong, and per case its shape and the largest
        difference of each kernel.
    """
    if result is None:
        return ["live flash: the page computed nothing"], []
    problems, differences = [], []
    if result.get("backend") != "webgpu":
        problems.append(
            f"live flash: the kernels did not run on WebGPU (backend {result.get('backend')!r})"
        )
    tolerance = reference["tolerance"]
    cases = result.get("cases") or []
    if len(cases) != len(reference["cases"]):
        problems.append(f"live flash: {len(cases)} cases computed, not {len(reference['cases'])}")
    for case, ours in zip(reference["cases"], cases, strict=False):
        label = f"n={case['length']}, head_dim={case['head_dim']}, causal={case['causal']}"
        found = {"case": label}
        for kernel in ("tiled", "naive"):
            difference = largest_difference(ours.get(kernel), case["out"])
            found[kernel] = difference
            if difference > tolerance:
                problems.append(
                    f"live flash, {label}: the {kernel} kernel differs from PyTorch's by up to "
                    f"{difference:.3g}, over the tolerance {tolerance:g}"
                )
        differences.append(found)
    return problems, differences


def check_kernels(page, name: str, reference: dict, report: LiveReport, problems: list[str]):
    """The FlashAttention widget: both kernels against PyTorch, then its timing button pressed.

    Args:
        page: The Playwright page, with the widget loaded (it ran the reference cases).
        name: The widget's name.
        reference: Its ``reference.json``.
        report: Where the differences and the timings go.
        problems: Where to report what is wrong.
    """
    found, differences = compare_kernels(reference, page.evaluate(js.LIVE_RESULT, name))
    problems += found
    report.cases = len(differences)
    for case in differences:
        report.weight_difference = max(report.weight_difference, case["tiled"], case["naive"])
        report.timings.append(
            f"{case['case']}: tiled {case['tiled']:.1e}, naive {case['naive']:.1e}"
        )
    if found:
        return
    widget = f'.book-live[data-live="{name}"]'
    page.locator(f"{widget} .book-live__time").click()
    page.wait_for_function(
        "name => ['done', 'error'].includes(document.querySelector("
        '`.book-live[data-live="${name}"]`).dataset.state)',
        arg=name,
        timeout=TIMING_TIMEOUT_MS,
    )
    result = page.evaluate(js.LIVE_RESULT, name) or {}
    if page.evaluate(js.LIVE_STATE, name) == "error" or not result.get("timings"):
        problems.append(f"live {name}: the timing of the kernels failed")
        return
    adapter = result["adapter"]
    where = "CPU emulation" if "swiftshader" in adapter.lower() else "GPU"
    report.timings += [
        f"n={t['n']}: tiled {t['tiled_ms']:.1f} ms, naive {t['naive_ms']:.1f} ms per call "
        f"({adapter}: {where})"
        for t in result["timings"]
    ]


# ---------------------------------------------------------------------------------------------
# The training playground (``train``): the page trains, PyTorch trained.

#: How long the page may take to train the reference cases (about 400 steps, 3 s here).
TRAINING_TIMEOUT_MS = 300_000


def decoded(text: str, dtype: str) -> list:
    """Numbers from base64 text (`booktools.live.train`): ``"<f8"`` floats or ``"u1"`` bytes."""
    import base64

    import numpy as np

    return np.frombuffer(base64.b64decode(text), dtype=dtype).tolist()


def relative_difference(ours: Any, theirs: list[float]) -> float:
    """The largest difference between two lists of numbers, over the largest magnitude of theirs.

    Returns:
        ``inf`` where the lengths differ or a number is missing or NaN.
    """
    scale = max((abs(x) for x in theirs), default=0.0) or 1.0
    return largest_difference(ours, theirs) / scale


def training_label(config: dict, steps: int) -> str:
    """A reference training in words: ``reverse, 2 layers, 2 heads, learned positions, ...``."""
    plural = lambda count, word: f"{count} {word}" + "s" * (count != 1)  # noqa: E731
    positions = "no" if config["positional"] == "none" else config["positional"]
    return (
        f"{config['task']}, {plural(config['num_blks'], 'layer')}, "
        f"{plural(config['num_heads'], 'head')}, {positions} positions, seed {config['seed']}, "
        f"{steps} steps"
    )


def compare_training(reference: dict, result: dict | None) -> tuple[list[str], list[dict]]:
    """Compare the page's trainings with PyTorch's, case by case.

    Args:
        reference: ``reference.json`` (`booktools.live.train`).
        result: What the page computed (``window.bookLive.train.check``): per case the losses,
            the final weights by name, the difference of its own initial weights from the
            exported ones, whether it drew the same batches, and its time per step.

    Returns:
        ``(problems, differences)``: what is wrong, and per case its label, the largest
        relative difference of its losses (each to its own size) and of its weights (each
        tensor to its largest magnitude), and the time per step.
    """
    if not result or not result.get("cases"):
        return ["live train: the page trained nothing"], []
    tolerance = reference["tolerance"]
    problems, differences = [], []
    if len(result["cases"]) != len(reference["cases"]):
        problems.append(
            f"live train: {len(result['cases'])} trainings, not {len(reference['cases'])}"
        )
    for case, ours in zip(reference["cases"], result["cases"], strict=False):
        config = case["config"]
        label = training_label(config, case["steps"])
        losses = max(
            (relative_difference([a], [b]) for a, b in zip(ours["losses"], case["losses"],
                                                          strict=False)),
            default=math.inf,
        )  # fmt: skip
        if len(ours["losses"]) != len(case["losses"]):
            losses = math.inf
        final, at, weights = decoded(case["final"], "<f8"), 0, 0.0
        for name, shape in zip(case["names"], case["shapes"], strict=True):
            size = math.prod(shape)
            theirs = final[at : at + size]
            weights = max(weights, relative_difference(ours["final"].get(name), theirs))
            at += size
        found = {"case": label, "losses": losses, "weights": weights,
                 "ms_per_step": ours["ms_per_step"]}  # fmt: skip
        differences.append(found)
        for what, difference in (("losses", losses), ("weights", weights)):
            if difference > tolerance:
                problems.append(
                    f"live train, {label}: the page's {what} differ from PyTorch's by up to "
                    f"{difference:.3g} (relative), over the tolerance {tolerance:g}"
                )
        if not ours["batches_equal"]:
            problems.append(f"live train, {label}: the page draws other batches than PyTorch")
        if not ours["init_difference"] <= 1e-12:
            problems.append(
                f"live train, {label}: the page's own initial weights differ from PyTorch's by "
                f"up to {ours['init_difference']:.3g}"
            )
    return problems, differences


#: The steps the check lets the reader's Train button run before it presses Pause.
CONTROL_STEPS = 30


def check_training(page, reference: dict, report: LiveReport, problems: list[str]) -> None:
    """The training widget: the reference trainings against PyTorch's, then its buttons pressed.

    The page trains every case of ``reference.json`` (from its exported weights, on its
    exported batches) and the result is compared with PyTorch's (`compare_training`). If it
    matches, the check presses Train, lets it run `CONTROL_STEPS` steps, presses Pause, Step
    (one step more) and Reset (back to step 0), as a reader does, then trains the default
    model with Train until it solves the task (`check_readers_run`).

    Args:
        page: The Playwright page, with the widget loaded.
        reference: Its ``reference.json``.
        report: Where the differences and the times go.
        problems: Where to report what is wrong.
    """
    result = page.evaluate("reference => window.bookLive.train.check(reference)", reference)
    found, differences = compare_training(reference, result)
    problems += found
    report.cases = len(differences)
    for case in differences:
        report.logit_difference = max(report.logit_difference, case["losses"])
        report.weight_difference = max(report.weight_difference, case["weights"])
        report.timings.append(f"{case['case']}: {case['ms_per_step']:.1f} ms per step")
    if found:  # a trainer that differs from PyTorch's: its buttons would show nothing more
        return
    widget = f'.book-live[data-live="{report.name}"]'
    steps = "window.bookLive.train.playground.steps"
    page.locator(f"{widget} .book-live__train").click()
    page.wait_for_function(f"{steps} >= {CONTROL_STEPS}", timeout=TRAINING_TIMEOUT_MS)
    page.locator(f"{widget} .book-live__pause").click()
    page.wait_for_function(
        f"document.querySelector('{widget}').dataset.state === 'ready'",
        timeout=TRAINING_TIMEOUT_MS,
    )
    paused = page.evaluate(steps)
    page.wait_for_timeout(200)
    if page.evaluate(steps) != paused:
        problems.append("live train: Pause did not stop the training")
    page.locator(f"{widget} .book-live__step").click()
    page.wait_for_function(f"{steps} === {paused + 1}", timeout=TRAINING_TIMEOUT_MS)
    page.locator(f"{widget} .book-live__reset").click()
    page.wait_for_function(f"{steps} === 0", timeout=TRAINING_TIMEOUT_MS)
    check_readers_run(page, widget, report, problems)


def check_readers_run(page, widget: str, report: LiveReport, problems: list[str]) -> None:
    """Train the default model with the Train button, as a reader does, until it solves the task.

    It stops at the build's limit if it does not; the step is compared with the build's study.

    Args:
        page: The Playwright page, the widget reset to its default configuration.
        widget: The widget's CSS selector.
        report: Where the reader's time per step goes.
        problems: Where to report a run that solves at another step than PyTorch's.
    """
    page.locator(f"{widget} .book-live__train").click()
    page.wait_for_function(
        "(() => { const run = window.bookLive.train.run; "
        "return run.solved_at !== null || run.playground.steps >= 1500; })()",
        timeout=TRAINING_TIMEOUT_MS,
    )
    page.locator(f"{widget} .book-live__pause").click()
    run = page.evaluate(
        "(() => { const run = window.bookLive.train.run; return { solved_at: run.solved_at, "
        "build: run.build_solved_at === undefined ? 'missing' : run.build_solved_at, "
        "ms: run.ms_per_step, config: run.playground.config }; })()"
    )
    if run["build"] == "missing":
        problems.append("live train: the build's study has no run of the default configuration")
    elif run["solved_at"] != run["build"]:
        problems.append(
            f"live train: the reader's run of the default configuration solved at step "
            f"{run['solved_at']}, PyTorch's in the build's study at {run['build']}"
        )
    report.timings.append(
        f"the Train button, default model (seed {run['config']['seed']}): solved at step "
        f"{run['solved_at']} (PyTorch: {run['build']}), {run['ms'] or 0:.1f} ms per step"
    )
