"""Figures and build fragments, drawn at build time from the package and cached per figure.

A page shows a figure with ``![alt](../figures/NAME.svg)`` and inserts a build fragment (a
table or a sentence of measured numbers, Markdown that a figure function returns) with
``{{ build:NAME }}``, or one value of a figure function that returns a dict of them with
``{{ build:NAME.KEY }}``, so that a sentence of the page's own prose can cite a number the
build measured. The build finds every name the pages use (`referenced_names`), draws the
missing ones with ``python -m attention_book.figures`` in parallel worker processes, one figure
module per worker at a time (`render`), into ``.cache/figures/``, each under its own key
(`figure_key`): the code it runs, docstrings and comments left out (`booktools.plugin.code_keys`),
the keys of the stored results it shows (`attention_book.figures.declaration`), a digest of what
the store holds for those results, the library versions, and the committed benchmark results or
recorded spreads it shows. A cold build first trains the declared runs that the figures need
(`train_missing`), all cores at once, then draws. An unchanged figure is never drawn twice, and
editing a docstring or a comment draws nothing. Figures are added to the site
without writing into ``docs/`` (`add_figures`); the pages then show each figure in its light
and dark variant, or with its slider (`light_and_dark_figures`), and get their fragments
(`insert_fragments`). The tooling, not the package, knows where the results are: it passes
``benchmarks/results`` as ``--results-dir``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib.metadata import version
from pathlib import Path
from traceback import format_exception
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File, Files

from attention_book.figures.__main__ import main as draw_figures
from booktools import ROOT
from booktools.plugin.code_keys import code_key
from booktools.plugin.state import BuildState

log = get_plugin_logger(__name__)

CACHE = ROOT / ".cache"
#: Where the scripts of ``benchmarks/`` commit their results, which some figures show.
RESULTS = ROOT / "benchmarks" / "results"
FIGURE_LINK = re.compile(r"(?<=\]\()(?:\.\./)*figures/([A-Za-z_][A-Za-z0-9_]*)\.svg(?=[)\s])")
FIGURE_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<dir>(?:\.\./)*)figures/(?P<name>\w+)\.svg\)")
#: ``{{ build:NAME }}`` (a fragment of Markdown) or ``{{ build:NAME.KEY }}`` (one value of a
#: figure function that returns a dict of values, written into a sentence of the page).
BUILD_FRAGMENT = re.compile(r"\{\{ build:(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.(?P<key>\w+))? \}\}")
# Libraries whose version can change a figure: those that draw, and those that compute what
# the figures show (an experiment's own cache key covers them too).
FIGURE_LIBRARIES = ("matplotlib", "torch", "numpy", "babel", "num2words", "sacrebleu")
#: The module of the recorded spreads: a figure module that reaches it writes words from them.
SPREAD = "attention_book.experiments.spread"


@functools.cache
def declarations() -> dict[str, Any]:
    """What every figure is drawn from: ``python -m attention_book.figures --declarations``.

    Read in a fresh interpreter (the package as it is now, not as this process imported it),
    once per build: the plugin clears it when a build starts.

    Returns:
        ``{"figures": {name: [module, shows_results]}, "modules": {module: declaration},
        "stored": {run: bool or None}, "render_version": int}``.
    """
    # -P: the package as installed (or on PYTHONPATH), not as the working folder holds it.
    command = [sys.executable, "-P", "-m", "attention_book.figures", "--declarations"]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise PluginError(f"reading the figures' declarations failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout)


def figure_index() -> dict[str, tuple[str, bool]]:
    """Every figure's name, the module that lists it, and whether it shows benchmark results.

    Returns:
        ``{name: (module, shows_results)}``.
    """
    return {name: tuple(entry) for name, entry in declarations()["figures"].items()}


def figure_key(module: str, shows_results: bool, results: Path = RESULTS) -> str:
    """The key of a module's figures: the code they run and the results they read.

    It covers the code of the module and of every package module it imports, without
    docstrings, comments or layout (`booktools.plugin.code_keys.code_key`: editing prose draws
    nothing again, any other edit of that code does), the module's declaration
    (`attention_book.figures.declaration`: the keys of the stored runs it shows), a digest of
    what the store holds for each of those runs (a run trained again under the same key, on
    another machine, holds other numbers), how figures are saved (``RENDER_VERSION``), the
    versions of the libraries that compute and draw, the committed benchmark results for a
    figure that shows them, and the recorded spreads for a module whose sentences read them.

    Args:
        module: The figure's module (``attention_book.figures.x``).
        shows_results: Whether the figure shows the committed benchmark results.
        results: The folder of those results.

    Returns:
        16 hexadecimal digits.
    """
    declared = declarations()
    declaration = declared["modules"][module]
    digest = hashlib.sha256()
    versions = " ".join(f"{name} {version(name)}" for name in FIGURE_LIBRARIES)
    digest.update(f"{versions}\nrender {declared['render_version']}\n".encode())
    digest.update(f"code {code_key(module)}\n".encode())
    digest.update(json.dumps(declaration, sort_keys=True).encode())
    for run in sorted(declaration["runs"]):  # what the store holds for it, not only its key
        digest.update(f"{run} {declared.get('digests', {}).get(run)}\n".encode())
    if shows_results:
        for path in sorted(results.glob("*.json")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    if SPREAD in declaration["computations"]:  # its sentences read the recorded spreads
        from attention_book.experiments.spread import HEADLINES

        if HEADLINES.exists():
            digest.update(b"headlines\0" + HEADLINES.read_bytes())
    return digest.hexdigest()[:16]


def referenced_names(
    pages: Iterable[tuple[str, str]],
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The figures and the fragments that pages reference, each with the pages that do.

    Args:
        pages: ``(page, markdown)`` pairs; `page` is how errors name it (``docs/x.md``).

    Returns:
        ``(figures, fragments)``, each ``{name: [page, ...]}``.
    """
    figures: dict[str, list[str]] = {}
    fragments: dict[str, list[str]] = {}
    for page, text in pages:
        inserted = [match["name"] for match in BUILD_FRAGMENT.finditer(text)]
        for found, names in ((figures, FIGURE_LINK.findall(text)),
                             (fragments, inserted)):  # fmt: skip
            for name in names:
                found.setdefault(name, []).append(page)
    return figures, fragments


def render_jobs() -> int:
    """How many chapters' figures are drawn at once: ``BOOK_JOBS``, or one per core."""
    return max(1, int(os.environ.get("BOOK_JOBS", 0)) or os.cpu_count() or 1)


def train_missing(names: list[str], modules: dict[str, str]) -> None:
    """Train, before anything is drawn, the declared runs that these figures need and lack.

    A figure module declares the runs it shows (`attention_book.figures.declaration`); those
    the store lacks (or whose key waits for another run's result) are trained by
    ``python -m attention_book.experiments train``, `render_jobs` runs at a time and the cores
    divided between them, so that no drawing worker waits on another's training.

    Args:
        names: The figures about to be drawn.
        modules: Each figure's module.

    Raises:
        PluginError: If the training fails.
    """
    declared = declarations()
    needed = {
        run
        for name in names
        for run in declared["modules"].get(modules.get(name), {}).get("runs", ())
    }
    missing = sorted(run for run in needed if declared["stored"].get(run) is not True)
    if not missing:
        return
    start = time.perf_counter()
    jobs = min(render_jobs(), len(missing))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "attention_book.experiments", "train"]
        command += [str(Path(scratch) / "trained.json"), "--jobs", str(jobs)]
        command += [argument for run in missing for argument in ("--run", run)]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise PluginError(f"training {', '.join(missing)} failed:\n{result.stderr[-6000:]}")
    log.info(
        "figures: trained or loaded %d runs (%s) in %.1f s (%d workers)",
        len(missing), ", ".join(missing), time.perf_counter() - start, jobs,
    )  # fmt: skip


def render(names: list[str], out_dir: Path, modules: dict[str, str] | None = None) -> None:
    """Render figures in fresh interpreters, one figure module at a time per worker.

    The figures of one module are drawn by one worker, in the order given, so that what a
    module computes once (a measurement) is shared by its figures as in a serial build; `draw`
    has trained the runs they show first (`train_missing`). Workers run in parallel
    (`render_jobs`), and the cores are divided between them so that they are used, not
    oversubscribed.

    Args:
        names: The figures to draw.
        out_dir: Where to write them (``NAME.svg``, ``NAME.dark.svg``, ``NAME.md``, ...).
        modules: Each figure's module; read from `figure_index` when None.

    Raises:
        PluginError: If a chapter's figures fail, naming the chapter's module.
    """
    if not names:
        return
    start = time.perf_counter()
    if modules is None:
        modules = {name: module for name, (module, _) in figure_index().items()}
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(modules.get(name, "?"), []).append(name)
    jobs = min(render_jobs(), len(groups))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    arguments = ["--out-dir", str(out_dir), "--results-dir", str(RESULTS)]
    arguments += ["--threads", str(threads)]
    os.environ.setdefault("MPLBACKEND", "Agg")
    context = multiprocessing.get_context("spawn")  # fresh interpreters: the edited package
    failures = []
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {
            pool.submit(draw_figures, [*group, *arguments]): m for m, group in groups.items()
        }
        for future in as_completed(futures):
            try:
                if future.result() != 0:
                    failures.append(f"{futures[future]}: exit status {future.result()}")
            except Exception as error:  # the worker's own traceback travels with the error
                failures.append(f"{futures[future]}: {''.join(format_exception(error))}")
    if failures:
        raise PluginError("rendering figures failed:\n" + "\n".join(failures)[-6000:])
    log.info(
        "figures: rendered %d in %.1f s (%d workers, %d threads each)",
        len(names), time.perf_counter() - start, jobs, threads,
    )  # fmt: skip


def draw(figures: dict[str, list[str]], fragments: dict[str, list[str]]) -> dict[str, Path]:
    """Draw what the cache lacks of the named figures and fragments; say where each one is.

    Each figure is cached as ``.cache/figures/NAME-KEY.svg`` (or ``.md``) under its own
    `figure_key`: editing a module draws again only the figures that import it.

    Args:
        figures: The figures pages show, with those pages (`referenced_names`).
        fragments: The fragments pages insert, with those pages.

    Returns:
        Each name's cached path without its suffix (``.cache/figures/NAME-KEY``).

    Raises:
        PluginError: If a page names an unknown figure, naming the page.
    """
    index = figure_index()
    unknown = sorted((set(figures) | set(fragments)) - set(index))
    if unknown:
        where = {**fragments, **figures}
        lines = [f"{', '.join(where[name])}: unknown figure {name!r}" for name in unknown]
        raise PluginError(
            "\n".join(lines) + "\nA figure is a function listed in the FIGURES tuple of "
            "a module of attention_book/figures/ (`python -m attention_book.figures --list`)."
        )
    out_dir = CACHE / "figures"
    wanted = sorted(set(figures) | set(fragments))
    modules = {name: index[name][0] for name in wanted}
    stored = declarations()["stored"]
    needed = {run for module in set(modules.values())
              for run in declarations()["modules"][module]["runs"]}  # fmt: skip
    if any(stored.get(run) is not True for run in needed):
        # First the runs they show, then their keys: a key holds what the store holds.
        train_missing(wanted, modules)
        declarations.cache_clear()
    keys = {entry: figure_key(*entry) for entry in {index[name] for name in wanted}}
    paths = {name: out_dir / f"{name}-{keys[index[name]]}" for name in wanted}
    missing = [name for name in wanted if not _rendered(paths[name])]
    if len(wanted) > len(missing):
        log.info("figures: %d of %d from the cache", len(wanted) - len(missing), len(wanted))
    if missing:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir, prefix="drawing-") as scratch:
            render(missing, Path(scratch), {name: index[name][0] for name in missing})
            for name in missing:
                for drawn in Path(scratch).glob(f"{name}.*"):  # .svg, .dark.svg or .md
                    suffix = drawn.name.removeprefix(name)
                    os.replace(drawn, out_dir / f"{paths[name].name}{suffix}")
    return paths


def _rendered(stem: Path) -> bool:
    """Whether a figure was drawn under this name and key (an SVG, Markdown or values)."""
    return any(stem.with_suffix(suffix).exists() for suffix in (".svg", ".md", ".json"))


def read_fragments(fragments: dict[str, list[str]], paths: dict[str, Path]) -> dict[str, str]:
    """The Markdown of each drawn fragment.

    Args:
        fragments: The fragments pages insert, with those pages.
        paths: Where `draw` put them.

    Returns:
        ``{name: markdown}``, and for a function that returned values, ``{"name.key": value}``
        for each of them.

    Raises:
        PluginError: If a fragment's function returned a figure, naming the pages.
    """
    found = {}
    for name in sorted(fragments):
        text, values = paths[name].with_suffix(".md"), paths[name].with_suffix(".json")
        if text.exists():
            found[name] = text.read_text(encoding="utf-8").strip()
        elif values.exists():
            for key, value in json.loads(values.read_text(encoding="utf-8")).items():
                found[f"{name}.{key}"] = value
        else:
            raise PluginError(
                f"{', '.join(fragments[name])}: build fragment {name!r} returned a figure, not "
                f"Markdown; show it with ![...](../figures/{name}.svg)"
            )
    return found


def page_fragments(markdown: str, page: str) -> dict[str, str]:
    """The fragments one page inserts, drawn or read from the cache (for its notebook alone).

    Args:
        markdown: The page.
        page: Its path, named in errors.

    Returns:
        ``{name: markdown}``.
    """
    _, fragments = referenced_names([(page, markdown)])
    return read_fragments(fragments, draw({}, fragments))


def add_figures(files: Files, config, state: BuildState) -> None:
    """Draw the figures and fragments the pages use; add the figures to the site.

    Every frame of a figure the reader steps through goes to the site too, and the build
    state learns its control and labels (`BuildState.frames`) and every fragment's Markdown
    (`BuildState.fragments`).

    Args:
        files: The site's files (figures are appended).
        config: The mkdocs configuration.
        state: This build's state, filled here.

    Raises:
        PluginError: If a page names an unknown figure, or shows a fragment as an image (or a
            figure as a fragment), naming the page.
    """
    pages = [(f"docs/{file.src_uri}", file.content_string) for file in files.documentation_pages()]
    figures, fragments = referenced_names(pages)
    paths = draw(figures, fragments)
    out_dir = CACHE / "figures"
    state.frames.clear()
    for name in sorted(figures):
        if not paths[name].with_suffix(".svg").exists():
            raise PluginError(
                f"{', '.join(figures[name])}: figure {name!r} returned Markdown, but the page "
                f"shows it as an SVG; insert it with {{{{ build:{name} }}}}"
            )
        stem = paths[name].name
        drawn = [".svg", ".dark.svg"]
        about = out_dir / f"{stem}.frames.json"
        if about.exists():  # a figure the reader steps through: every frame goes to the site
            state.frames[name] = json.loads(about.read_text(encoding="utf-8"))
            for number in range(len(state.frames[name]["labels"])):
                drawn += [f".frame-{number}.svg", f".frame-{number}.dark.svg"]
        for suffix in drawn:
            if (out_dir / f"{stem}{suffix}").exists():
                source = str(out_dir / f"{stem}{suffix}")
                files.append(File.generated(config, f"figures/{name}{suffix}", abs_src_path=source))
    state.fragments = read_fragments(fragments, paths)


def insert_fragments(markdown: str, page: str, state: BuildState) -> str:
    """Replace each ``{{ build:NAME }}`` by its fragment, indented like the line it is on.

    A fragment of several lines inside an admonition or a list keeps that indentation on
    every line, so a table can sit in an exercise's solution.

    Args:
        markdown: A page (or one line of it).
        page: The page, named in errors.
        state: The build's state, with the fragments drawn.

    Returns:
        The Markdown with the fragments in place.

    Raises:
        MissingFragmentError: If the build drew no such fragment, naming the page and it.
    """

    def fragment(match: re.Match, indent: str) -> str:
        name = match["name"] if match["key"] is None else f"{match['name']}.{match['key']}"
        lines = state.fragment(name, page).split("\n")
        return "\n".join([lines[0], *(indent + line if line else "" for line in lines[1:])])

    out = []
    for line in markdown.split("\n"):
        indent = line[: len(line) - len(line.lstrip())]
        out.append(BUILD_FRAGMENT.sub(lambda m, indent=indent: fragment(m, indent), line))
    return "\n".join(out)


def light_and_dark_figures(markdown: str, state: BuildState, page_url: str = "") -> str:
    """Show each figure drawn for the page's colour scheme, a `Frames` figure with its slider.

    Material shows an image whose address ends in ``#only-light`` in light mode and one ending
    in ``#only-dark`` in dark mode; both get the page's alt text.

    Args:
        markdown: A page.
        state: The build's state, which knows the figures drawn as `Frames`.
        page_url: The built page's URL (``chapters/x/``), for the slider's raw HTML.

    Returns:
        The Markdown with every figure image doubled (or made a slider).
    """

    def both(match: re.Match) -> str:
        alt, base = match["alt"], f"{match['dir']}figures/{match['name']}"
        if match["name"] in state.frames:
            up = "../" * len([part for part in page_url.split("/") if part])
            return frames_player(match["name"], alt, up, state.frames[match["name"]])
        return f"![{alt}]({base}.svg#only-light)![{alt}]({base}.dark.svg#only-dark)"

    return FIGURE_IMAGE.sub(both, markdown)


def frames_player(name: str, alt: str, up: str, about: dict) -> str:
    """The HTML of a figure the reader steps through: its start frame and a slider.

    ``docs/assets/javascripts/book.js`` swaps the image when the slider moves; the frames are
    SVGs of the site, so it works offline. Without JavaScript the start frame stays.

    Args:
        name: The figure's name.
        alt: Its alt text.
        up: The path from the built page to the site's root (raw HTML is not rewritten by
            mkdocs, as Markdown links are).
        about: Its control, labels and start frame (``NAME-KEY.frames.json``).

    Returns:
        The raw HTML.
    """
    labels, start = about["labels"], about["start"]
    base = f"{up}figures/{name}"
    control = html.escape(about["control"])
    label_data = html.escape(json.dumps(labels), quote=True)
    text = html.escape(alt)
    images = "".join(
        f'<img class="no-lightbox" src="{base}.frame-{start}{variant}" alt="{text}">'
        for variant in (".svg#only-light", ".dark.svg#only-dark")
    )
    return (
        f'<figure class="book-frames" data-base="{base}">{images}<figcaption>'
        f'<label>{control} <input type="range" min="0" max="{len(labels) - 1}" '
        f'value="{start}" data-labels="{label_data}" aria-label="{control}"></label> '
        f"<output>{html.escape(labels[start])}</output></figcaption></figure>"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m booktools.plugin.figures keys FILE``: write every figure module's key.

    CI keys its saved ``.cache/figures`` by a digest of this file, as it keys the result store
    by the declared keys of the runs: a change that draws nothing saves no new cache.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        The exit status.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m booktools.plugin.figures")
    parser.add_argument("command", choices=["keys"])
    parser.add_argument("file", type=Path, help="where to write {module: key} as JSON")
    args = parser.parse_args(argv)
    modules = sorted(set(figure_index().values()))
    keys = {module: figure_key(module, shows) for module, shows in modules}
    args.file.parent.mkdir(parents=True, exist_ok=True)
    args.file.write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
