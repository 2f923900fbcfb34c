"""The book's experiments: what the chapters train and measure, apart from how it is drawn.

One module per chapter that runs an experiment, and a second where a chapter measures more than
its main run, each read top to bottom in the order of the experiment (configuration, data,
models, training, evaluation):

- `attention_book.experiments.nadaraya_watson`: the estimators of the attention-pooling
  chapter on one data set, with bandwidths chosen by leave-one-out and their test errors.
- `attention_book.experiments.scoring`: what scaling by 1/sqrt(d) does to dot-product scores.
- `attention_book.experiments.bahdanau`: two GRU translators, with and without Bahdanau
  attention, trained once and cached; BLEU by source length.
- `attention_book.experiments.multihead`: one wide attention head against several narrow
  ones on a task that asks for two relations at once.
- `attention_book.experiments.self_attention`: convolution, GRU and self-attention timed
  against sequence length, and how far back each one's gradient reaches.
- `attention_book.experiments.playground`: the playground's tiny GPTs learning to reverse and to
  sort digits, with learned, sinusoidal or no positions: the steps each one needs, per seed.
- `attention_book.experiments.transformer`: the Transformer on the Bahdanau chapter's data and
  split (label smoothing, warmup), against the Bahdanau model.
- `attention_book.experiments.transformer_studies`: beyond that split: a length-generalization
  split for both attention models, post-norm against pre-norm (with and without warm-up), and
  decoding with and without the key/value cache.
- `attention_book.experiments.transformer_timings`: the Transformer chapter's timings, decoding
  with and without the key/value cache and a training batch of each of the three translators.
- `attention_book.experiments.vit`: a small ViT against a small ResNet on scikit-learn's
  digits, at several training-set sizes and seeds; attention maps and distances.
- `attention_book.experiments.flash`: peak memory of naive and tiled attention, the roofline
  model, and the GPUs' public specifications.
- `attention_book.experiments.optimizations`: a character-level GPT on the corpus's French
  side and its variants (grouped and multi-query attention, sinusoidal positions, linear
  attention).
- `attention_book.experiments.optimizations_measurements`: what those optimizations cost,
  without training: generation with and without the cache, attention timings, receptive
  fields, the cache sizes of published models.
- `attention_book.experiments.beyond_one_device`: ring attention on several processes
  (equality, bytes, memory, causal balance), the paged cache's memory on a workload, and static
  against continuous batching of the trained GPT.

A module whose runs are stored declares them in a tuple ``RUNS`` (`attention_book.store.Run`):
each is keyed by what it declares, its frozen configuration, its module's ``VERSION``, the
inputs it reads and the library versions, never by the source (`attention_book.store`).
`attention_book.experiments.probes` replays a small probe of every run to show that code at
an unchanged ``VERSION`` still computes the same; `attention_book.experiments.spread` holds
the headline numbers of the full results to the spread recorded for them over other CPU
arithmetic and seeds, and trains the runs for ``make crossmachine``. The figures of
`attention_book.figures` import these functions and draw their results. The modules are not
imported here: import the one you need.

Two functions read, from the modules' source, which code trains: `cached_runs` (the cached runs
each experiment function may start) and `runs_started_by` (those a piece of code, such as a
chapter's block, may start). The site's build uses them to say, before a block, what it trains
on its first run and how long that took.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

__all__ = ["cached_runs", "runs_started_by"]

_PACKAGE = __name__


def _cache_name(call: ast.Call, function: ast.FunctionDef) -> str | None:
    """The name a ``cached(...)`` call in `function` gives its run.

    A string, or an f-string's fixed start followed by ``*`` (``f"optimizations-{variant}"``
    gives ``"optimizations-*"``), also when it is first assigned to a local name.
    """
    if not call.args:
        return None
    name = call.args[0]
    if isinstance(name, ast.Name):
        assigned = [
            node.value
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets)
        ]
        name = assigned[-1] if assigned else name
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value
    if isinstance(name, ast.JoinedStr):
        start = ""
        for part in name.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            start += part.value
        return start + "*"
    return None


@functools.cache
def cached_runs() -> dict[tuple[str, str], tuple[str, ...]]:
    """The cached runs each function of the experiment modules may compute, read from source.

    A function starts a run when it calls `attention_book.store.cached`, or calls (by name)
    a function of its own module, or one it imports from another experiment module, that does;
    the run's name is the first argument of ``cached``. Nothing is run: the modules' source is
    parsed, so this costs no training and no import of torch.

    Returns:
        ``{(module, function): names}``, for every top-level function that starts at least one
        run; a name ending in ``*`` stands for the runs whose names start with what precedes it.
    """
    calls: dict[tuple[str, str], set[tuple[str, str]]] = {}
    direct: dict[tuple[str, str], set[str]] = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        module = f"{_PACKAGE}.{path.stem}" if path.stem != "__init__" else _PACKAGE
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            node.name: (module, node.name)
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for node in tree.body:  # from attention_book.experiments.x import f
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_PACKAGE):
                for alias in node.names:
                    names[alias.asname or alias.name] = (node.module, alias.name)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            key = (module, node.name)
            calls[key], direct[key] = set(), set()
            for call in ast.walk(node):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                    continue
                if call.func.id == "cached" and (name := _cache_name(call, node)):
                    direct[key].add(name)
                elif call.func.id in names:
                    calls[key].add(names[call.func.id])

    def reached(key, seen):
        if key in seen or key not in calls:
            return set()
        seen.add(key)
        found = set(direct[key])
        for callee in calls[key]:
            found |= reached(callee, seen)
        return found

    runs = {key: tuple(sorted(reached(key, set()))) for key in calls}
    return {key: names for key, names in runs.items() if names}


def runs_started_by(code: str) -> tuple[str, ...]:
    """The cached runs a piece of Python (a chapter's code block) may compute when run.

    The code's ``from attention_book.experiments.<module> import ...`` statements and the
    calls of what they import are read, and looked up in `cached_runs`.

    Args:
        code: Python source.

    Returns:
        The names of the runs (see `cached_runs`), sorted; empty if the code trains nothing.

    Raises:
        SyntaxError: If `code` is not valid Python.
    """
    tree = ast.parse(code)
    imported: dict[str, tuple[str, str]] = {}  # a name -> (module, function)
    modules: dict[str, str] = {}  # a name -> an experiment module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_PACKAGE):
            for alias in node.names:
                if node.module == _PACKAGE:  # from attention_book.experiments import bahdanau
                    modules[alias.asname or alias.name] = f"{_PACKAGE}.{alias.name}"
                else:
                    imported[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(f"{_PACKAGE}.") and alias.asname:
                    modules[alias.asname] = alias.name
                elif alias.name.startswith(f"{_PACKAGE}."):
                    modules[alias.name] = alias.name  # used by its full dotted name
    runs = cached_runs()
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name):
            found.update(runs.get(imported.get(node.func.id), ()))
        elif isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if owner in modules:
                found.update(runs.get((modules[owner], node.func.attr), ()))
    return tuple(sorted(found))
