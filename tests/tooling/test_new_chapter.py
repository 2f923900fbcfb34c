"""A new chapter, with one figure and one trained run, is six files: nothing else lists it.

In a copy of the repository (the package, the pages, ``mkdocs.yml`` and the recorded files:
what the build reads), the test writes a tiny chapter the way CONTRIBUTING.md's "Add a
chapter" walks through it: the concept module, its test, the experiment (one run, stored by
`cached`), the figure module, the page, and its line in the nav. Then it runs the book
plugin's events on the copy's configuration, as ``mkdocs build`` does (what draws the figures,
exports the live models, renders KaTeX and writes notebooks does nothing here: it needs the
figure cache, and its own tests cover it), and finds the chapter everywhere the book lists its
chapters: the nav, the chapter map, the learning path, the plan of the book, the API reference
(a generated page, its nav entry, its row in the index) and the experiments page. The figure
is drawn, and its run trained, from the copy by the package's own command, and ``make probes``'s
command records the run's probe: those recorded files are made by commands, not by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mkdocs.config import load_config
from mkdocs.structure.files import get_files
from mkdocs.structure.nav import Section, get_navigation
from repo import ROOT

from booktools.plugin import events as book_plugin
from booktools.plugin.state import BuildState

CONCEPT = '''"""Local attention: each query attends only to the keys within a window around it."""

from __future__ import annotations

import torch

__all__ = ["local_attention"]


# --8<-- [start:local_attention]
def local_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, window: int
) -> torch.Tensor:
    """Scaled dot-product attention over the keys at most `window` positions away.

    Args:
        queries: The queries.
        keys: The keys.
        values: The values.
        window: How far from its own position a query may look.

    Returns:
        One weighted average of the values per query.

    Shapes:
        queries, keys, values: (batch, n, d) -> (batch, n, d)
    """
    if window < 0:
        raise ValueError(f"window must be at least 0, got {window}")
    n = queries.shape[1]
    positions = torch.arange(n)
    far = (positions[:, None] - positions[None, :]).abs() > window  # (n, n)
    scores = queries @ keys.transpose(1, 2) / queries.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(far, float("-inf")), dim=-1) @ values
# --8<-- [end:local_attention]
'''

CONCEPT_TEST = """import torch

from attention_book.local_attention import local_attention


def test_a_window_as_wide_as_the_sequence_is_full_attention():
    x = torch.randn(2, 5, 4)
    full = torch.softmax(x @ x.transpose(1, 2) / 2, dim=-1) @ x
    assert torch.allclose(local_attention(x, x, x, window=4), full)
"""

EXPERIMENT = '''"""The local-attention chapter's experiment: local against full attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attention_book.local_attention import local_attention
from attention_book.store import Run, cached, declared_key

__all__ = ["LOCAL_CONFIG", "LOCAL_PROBE", "RUNS", "VERSION", "local_attention_experiment"]

VERSION = 1


@dataclass(frozen=True)
class LocalConfig:
    """Sequence length, width and the windows measured."""

    length: int = 16
    dim: int = 8
    windows: tuple[int, ...] = (0, 1, 2, 4, 8, 15)
    seed: int = 0


LOCAL_CONFIG = LocalConfig()
LOCAL_PROBE = LocalConfig(length=4, windows=(0, 3))


def local_attention_run(config: LocalConfig) -> dict[str, list[float]]:
    """The largest difference between local and full attention, for each window."""
    generator = torch.Generator().manual_seed(config.seed)
    x = torch.randn(1, config.length, config.dim, generator=generator)
    full = local_attention(x, x, x, window=config.length)
    errors = [(local_attention(x, x, x, w) - full).abs().max().item() for w in config.windows]
    return {"windows": list(config.windows), "errors": errors}


def local_attention_key() -> dict:
    return declared_key(LOCAL_CONFIG, VERSION)


def local_attention_experiment() -> dict[str, list[float]]:
    """The full result, from the store."""
    return cached(
        "local-attention", local_attention_key(), lambda: local_attention_run(LOCAL_CONFIG)
    )


RUNS = (
    Run(
        "local-attention",
        VERSION,
        probe=lambda: local_attention_run(LOCAL_PROBE),
        result=local_attention_experiment,
        key=local_attention_key,
        headline=lambda result: {"error_window_0": result["errors"][0]},
        tolerance=0.01,
    ),
)
'''

FIGURE = '''"""Figures of the local-attention chapter."""

from __future__ import annotations

from matplotlib.figure import Figure

from attention_book.experiments.local_attention import local_attention_experiment

__all__ = ["FIGURES", "local_attention_error_plot"]


def local_attention_error_plot() -> Figure:
    """The largest difference from full attention, against the window."""
    result = local_attention_experiment()
    figure = Figure(figsize=(4, 3))
    axes = figure.subplots()
    axes.plot(result["windows"], result["errors"], marker="o")
    axes.set_xlabel("window")
    axes.set_ylabel("largest difference")
    return figure


FIGURES = (local_attention_error_plot,)
'''

PAGE = """---
builds: Attention inside a window of neighbours, against full attention
route: optional
read_first: [optimizations.md]
plan: attention limited to a window of neighbours, and how far it lands from full attention.
---

# Local attention

Each query looks only at its neighbours.

```python title="attention_book/local_attention.py"
--8<-- "attention_book/local_attention.py:local_attention"
```

![Its error falls to zero as the window grows.](../figures/local_attention_error_plot.svg)

## Summary

- Limit attention to a window.
- Measure what the window costs.
- Choose a window.

## Exercises

1. Widen the window to the whole sequence.
"""

NAV_LINE = "      - Local attention: chapters/local-attention.md\n"

#: The six files of a new chapter, as CONTRIBUTING.md lists them.
SIX = [
    "attention_book/local_attention.py",
    "tests/package/test_local_attention.py",
    "attention_book/experiments/local_attention.py",
    "attention_book/figures/local_attention.py",
    "docs/chapters/local-attention.md",
    "mkdocs.yml",
]


def copy_of_the_book(tmp_path: Path) -> Path:
    """The repository's files that the build reads: the package, the pages, the config."""
    repo = tmp_path / "book"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "assets")
    shutil.copytree(ROOT / "attention_book", repo / "attention_book", ignore=skip)
    shutil.copytree(ROOT / "docs", repo / "docs", ignore=skip)
    shutil.copytree(ROOT / "tests" / "recorded", repo / "tests" / "recorded")
    (repo / "tests" / "package").mkdir()  # where a concept's test goes
    shutil.copy(ROOT / "mkdocs.yml", repo / "mkdocs.yml")
    return repo


def snapshot(repo: Path) -> dict[str, str]:
    """A digest of every file of the copy, by its path."""
    return {
        path.relative_to(repo).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(repo.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


class Writer:
    """Writes the chapter's files into the copy, and remembers which."""

    def __init__(self, repo: Path):
        self.repo, self.written = repo, []

    def write(self, path: str, text: str) -> None:
        (self.repo / path).write_text(text, encoding="utf-8")
        self.written.append(path)

    def add_nav_line(self, before: str, line: str) -> None:
        config = (self.repo / "mkdocs.yml").read_text(encoding="utf-8")
        assert before in config
        self.write("mkdocs.yml", config.replace(before, line + before, 1))


#: The pages whose Markdown the test reads after ``on_page_markdown``.
READ = [
    "index.md",
    "chapters/introduction.md",
    "chapters/local-attention.md",
    "api/index.md",
    "api/experiments.md",
]


def build_events(repo: Path, monkeypatch) -> dict:
    """Run the plugins' events on the copy's configuration, as ``mkdocs build`` does.

    Returns:
        The files, the nav, the build's state, and the Markdown of each page of `READ` after
        ``on_page_markdown``, by its path.
    """
    for name in ("add_figures", "add_live_models", "add_katex", "add_notebooks"):
        monkeypatch.setattr(book_plugin, name, lambda *args, **kwargs: None)
    for name in ("expand_listings", "insert_fragments", "light_and_dark_figures"):
        monkeypatch.setattr(book_plugin, name, lambda markdown, *args, **kwargs: markdown)
    monkeypatch.setattr(book_plugin, "first_run_notes", lambda markdown: markdown)
    monkeypatch.setattr(book_plugin, "insert_live", lambda markdown, *args: markdown)
    config = load_config(str(repo / "mkdocs.yml"))
    plugins = config.plugins  # every plugin of mkdocs.yml, the book's last, as in a build
    config = plugins.on_config(config)
    files = plugins.on_files(get_files(config), config=config)
    nav = plugins.on_nav(get_navigation(files, config), config=config, files=files)
    markdown = {}
    for page in nav.pages:
        if page.file.src_uri in READ:
            page.read_source(config)
            markdown[page.file.src_uri] = plugins.on_page_markdown(
                page.markdown, page=page, config=config, files=files
            )
    return {"files": files, "nav": nav, "state": config["booktools_state"], "pages": markdown}


def package_command(repo: Path, tmp_path: Path, *args: str) -> str:
    """Run a command of the copy's package (its figures, its experiments) in the copy."""
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "MPLBACKEND": "Agg",
        "ATTENTION_BOOK_CACHE": str(tmp_path / "store"),
    }
    result = subprocess.run(
        [sys.executable, "-m", *args], cwd=repo, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def chapter(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("new-chapter")
    repo = copy_of_the_book(tmp_path)
    before = snapshot(repo)
    writer = Writer(repo)
    writer.write("attention_book/local_attention.py", CONCEPT)
    writer.write("tests/package/test_local_attention.py", CONCEPT_TEST)
    writer.write("attention_book/experiments/local_attention.py", EXPERIMENT)
    writer.write("attention_book/figures/local_attention.py", FIGURE)
    writer.write("docs/chapters/local-attention.md", PAGE)
    writer.add_nav_line("  - Further reading: further-reading.md\n", NAV_LINE)
    written = snapshot(repo)
    with pytest.MonkeyPatch.context() as monkeypatch:
        built = build_events(repo, monkeypatch)
    return {
        "tmp": tmp_path,
        "repo": repo,
        "writer": writer,
        "changed": sorted(p for p in written if before.get(p) != written[p]),
        "after_build": snapshot(repo),
        "written": written,
        **built,
    }


def test_the_chapter_is_six_files_and_the_build_writes_none(chapter):
    assert chapter["writer"].written == SIX
    assert chapter["changed"] == sorted(SIX)  # nothing else was edited
    assert chapter["after_build"] == chapter["written"]  # the build wrote nothing in the tree


def test_the_chapter_is_in_the_nav(chapter):
    pages = [page.file.src_uri for page in chapter["nav"].pages]
    assert "chapters/local-attention.md" in pages
    efficient = next(item for item in chapter["nav"].items if item.title == "Efficient attention")
    assert efficient.children[-1].title == "Local attention"


def test_the_chapter_is_in_the_map_the_learning_path_and_the_plan(chapter):
    home = chapter["pages"]["index.md"]
    assert (
        "| | [Local attention](chapters/local-attention.md) | Attention inside a window of "
        "neighbours, against full attention |"
    ) in home
    # Its row of the learning path and its item of the plan come last, numbered after the
    # others (whatever their number is now).
    path = re.findall(r"^\| (\d+) \| \[([^]]+)\]", home, flags=re.MULTILINE)
    assert path[-1] == (str(len(path)), "Local attention")
    assert (
        f"| {len(path)} | [Local attention](chapters/local-attention.md) | Transformer "
        "optimizations |" in home
    )
    plan = chapter["pages"]["chapters/introduction.md"]
    items = re.findall(r"^(\d+)\. \[([^]]+)\]\(", plan, flags=re.MULTILINE)
    assert items[-1] == (str(len(items)), "Local attention")
    item = f"{len(items)}. [Local attention](local-attention.md): attention limited to a window"
    assert item in plan


def test_the_chapter_is_in_the_api_reference(chapter):
    generated = chapter["files"].get_file_from_path("api/local_attention.md")
    assert generated is not None and generated.generated_by == "book"
    assert "::: attention_book.local_attention" in generated.content_string
    assert not (chapter["repo"] / "docs" / "api" / "local_attention.md").exists()
    api = next(item for item in chapter["nav"].items if item.title == "API reference")
    assert isinstance(api, Section)
    assert "local_attention" in [child.title for child in api.children]
    index = chapter["pages"]["api/index.md"]
    row = "| [`attention_book.local_attention`](local_attention.md) | Local attention: each query"
    assert row in index
    experiments = chapter["pages"]["api/experiments.md"]
    assert "::: attention_book.experiments.local_attention" in experiments


def test_the_chapter_page_gets_what_every_chapter_gets(chapter):
    page = chapter["pages"]["chapters/local-attention.md"]
    assert "Download this chapter as a notebook" in page
    assert isinstance(chapter["state"], BuildState) and chapter["state"].book is not None


def test_the_figure_is_found_and_its_run_trained_and_recorded_by_commands(chapter):
    repo, tmp_path = chapter["repo"], chapter["tmp"]
    out = tmp_path / "figures"
    package_command(
        repo,
        tmp_path,
        "attention_book.figures",
        "local_attention_error_plot",
        "--out-dir",
        str(out),
    )
    assert (out / "local_attention_error_plot.svg").exists()
    assert any((tmp_path / "store").iterdir())  # the run, stored by `cached`
    recorded = repo / "tests" / "recorded" / "probes.json"
    others = json.loads(recorded.read_text(encoding="utf-8"))
    package_command(
        repo, tmp_path, "attention_book.experiments", "record-probes", str(recorded),
        "--run", "local-attention",
    )  # fmt: skip
    now = json.loads(recorded.read_text(encoding="utf-8"))
    assert now.pop("local-attention")["version"] == 1
    assert now == others  # no other run's record is rewritten
