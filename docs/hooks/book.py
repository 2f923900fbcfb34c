"""The Attention Book's mkdocs hook: build-time figures, vendored MathJax, chapter notebooks.

What it does, in build order:

1. ``on_files``: finds every figure a page references (``figures/NAME.svg``) and every
   build fragment (``{{ build:NAME }}``), renders the missing ones with
   ``python -m attention_book.figures`` (in parallel worker processes, one chapter module per
   worker at a time) into ``.cache/figures/``, each under its own key: the source of its
   module and of the package modules it imports, library and corpus versions, and the
   committed benchmark results it shows (`figure_key`). An unchanged figure is never drawn
   twice, and an edit draws again only the figures it can change. Figures are added to the
   site without writing into ``docs/``. The hook, not the
   package, knows where the results are: it passes ``benchmarks/results`` as
   ``--results-dir``. It also adds MathJax, copied from the ``django-static-mathjax`` package
   that ``requirements.txt`` installs (no CDN), and one Jupyter notebook per chapter for
   readers to download.
2. ``on_page_markdown``: expands the listings of package source (`book_listings`: docstrings
   cut to their summary, a link to the API entry under each), replaces ``{{ build:NAME }}``
   with the rendered Markdown, puts a note of what it trains and for how long before each
   block that may train (`first_run_notes`), and a download link under each chapter's title.
3. ``on_post_page``: strips the CDN script tags that nbconvert adds to notebook pages; the
   site's own MathJax renders their math.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import multiprocessing
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib.metadata import version
from pathlib import Path
from traceback import format_exception

import nbformat
from book_listings import expand_listings, listing  # docs/hooks/, on sys.path for hooks
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from attention_book.experiments import runs_started_by
from attention_book.figures.__main__ import main as draw_figures
from attention_book.training.cache import COMPUTE_TIMES, cache_dir, compute_seconds

log = logging.getLogger("mkdocs.hooks.book")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attention_book"
CACHE = ROOT / ".cache"
FIGURE_LINK = re.compile(r"(?<=\]\()(?:\.\./)*figures/([A-Za-z_][A-Za-z0-9_]*)\.svg(?=[)\s])")
BUILD_FRAGMENT = re.compile(r"\{\{ build:([A-Za-z_][A-Za-z0-9_]*) \}\}")
CHAPTERS = "chapters/"
# Libraries whose version can change a figure: those that draw, and those that compute what
# the figures show (an experiment's own cache key covers them too).
FIGURE_LIBRARIES = ("matplotlib", "torch", "numpy", "babel", "num2words", "sacrebleu")

_fragments: dict[str, str] = {}
_frames: dict[str, dict] = {}  # figures drawn as Frames: their control, labels and start frame


# ---------------------------------------------------------------------------------------------
# Figures and build fragments


def results_dir() -> Path:
    """Where the scripts of ``benchmarks/`` commit their results, which some figures show."""
    return ROOT / "benchmarks" / "results"


def figure_index() -> dict[str, tuple[str, bool]]:
    """Every figure's name, the module that lists it, and whether it shows benchmark results.

    Read from ``python -m attention_book.figures --list`` in a fresh interpreter, and kept in
    ``.cache/figures/`` under a hash of the drawing code (``attention_book/figures/``), which
    alone decides which functions are figures: a warm build reads the file instead.
    """
    digest = hashlib.sha256()
    for path in sorted((PACKAGE / "figures").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    index_file = CACHE / "figures" / f"index-{digest.hexdigest()[:16]}.json"
    if index_file.exists():
        return {name: tuple(entry) for name, entry in json.loads(index_file.read_text()).items()}
    command = [sys.executable, "-m", "attention_book.figures", "--list"]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise PluginError(f"listing the figures failed:\n{result.stderr[-4000:]}")
    index = {}
    for line in result.stdout.splitlines():
        name, module, needs = line.split()
        index[name] = (module, needs == "results")
    index_file.parent.mkdir(parents=True, exist_ok=True)
    index_file.write_text(json.dumps(index, sort_keys=True))
    return index


def figure_key(module: str, shows_results: bool) -> str:
    """Hash of what one figure is drawn from, so that an edit re-renders only what it touches.

    It covers the source of the figure's module and of every package module it imports,
    transitively, drawing code included (`package_source_hash(module, drawing_code=True)`),
    the rendering entry point (``attention_book.figures.__main__`` and what it imports: how an
    SVG is saved), the built-in corpus version, the versions of the libraries that compute
    and draw, and, for a figure that shows them, the committed benchmark results. Hashes are
    taken anew at every build (not the per-process cache of `package_source_hash`), so
    ``mkdocs serve`` sees each edit.
    """
    from attention_book.data import CORPUS_VERSION
    from attention_book.training import package_source_hash

    source_hash = package_source_hash.__wrapped__  # uncached: this process outlives edits
    digest = hashlib.sha256()
    versions = " ".join(f"{name} {version(name)}" for name in FIGURE_LIBRARIES)
    digest.update(f"{versions}\ncorpus {CORPUS_VERSION}\n".encode())
    for name in (module, "attention_book.figures.__main__"):
        digest.update(f"{name} {source_hash(name, drawing_code=True)}\n".encode())
    if shows_results:
        for path in sorted(results_dir().glob("*.json")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def referenced_names(files: Files) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The figures and the fragments that the Markdown pages reference, each with its pages."""
    figures: dict[str, list[str]] = {}
    fragments: dict[str, list[str]] = {}
    for file in files.documentation_pages():
        text = Path(file.abs_src_path).read_text(encoding="utf-8")
        for found, names in ((figures, FIGURE_LINK.findall(text)),
                             (fragments, BUILD_FRAGMENT.findall(text))):  # fmt: skip
            for name in names:
                found.setdefault(name, []).append(f"docs/{file.src_uri}")
    return figures, fragments


def render_jobs() -> int:
    """How many chapters' figures are drawn at once: ``BOOK_JOBS``, or one per core."""
    return max(1, int(os.environ.get("BOOK_JOBS", 0)) or os.cpu_count() or 1)


def render(names: list[str], out_dir: Path, modules: dict[str, str] | None = None) -> None:
    """Render figures in fresh interpreters, one chapter module at a time per worker.

    The figures of one chapter module are drawn by one worker, in the order given, so that
    what a chapter computes once (an experiment, a timing) is shared by its figures as in a
    serial build. Workers run in parallel (`render_jobs`), and the cores are divided between
    them so that they are used, not oversubscribed.
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
    arguments = ["--out-dir", str(out_dir), "--results-dir", str(results_dir())]
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


def add_figures(files: Files, config) -> None:
    """Render what is missing from the cache and hand every figure to the site.

    Each figure is cached as ``.cache/figures/NAME-KEY.svg`` (or ``.md``) under its own
    `figure_key`: editing a module draws again only the figures that import it.
    """
    figures, fragments = referenced_names(files)
    _frames.clear()
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
    keys = {entry: figure_key(*entry) for entry in set(index.values())}
    wanted = {name: "svg" for name in figures} | {name: "md" for name in fragments}
    paths = {name: out_dir / f"{name}-{keys[index[name]]}" for name in wanted}
    missing = sorted(name for name in wanted if not _rendered(paths[name]))
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
    for name in sorted(figures):
        path = paths[name].with_suffix(".svg")
        if not path.exists():
            raise PluginError(
                f"{', '.join(figures[name])}: figure {name!r} returned Markdown, but the page "
                f"shows it as an SVG; insert it with {{{{ build:{name} }}}}"
            )
        stem = paths[name].name
        drawn = [".svg", ".dark.svg"]
        about = out_dir / f"{stem}.frames.json"
        if about.exists():  # a figure the reader steps through: every frame goes to the site
            _frames[name] = json.loads(about.read_text(encoding="utf-8"))
            for number in range(len(_frames[name]["labels"])):
                drawn += [f".frame-{number}.svg", f".frame-{number}.dark.svg"]
        for suffix in drawn:
            if (out_dir / f"{stem}{suffix}").exists():
                source = str(out_dir / f"{stem}{suffix}")
                files.append(File.generated(config, f"figures/{name}{suffix}", abs_src_path=source))
    _fragments.clear()
    for name in sorted(fragments):
        path = paths[name].with_suffix(".md")
        if not path.exists():
            raise PluginError(
                f"{', '.join(fragments[name])}: build fragment {name!r} returned a figure, not "
                f"Markdown; show it with ![...](../figures/{name}.svg)"
            )
        _fragments[name] = path.read_text(encoding="utf-8").strip()


def _rendered(stem: Path) -> bool:
    """Whether a figure was drawn under this name and key (as an SVG or as Markdown)."""
    return stem.with_suffix(".svg").exists() or stem.with_suffix(".md").exists()


# ---------------------------------------------------------------------------------------------
# MathJax, served from the site itself


def add_mathjax(files: Files, config) -> None:
    """Add MathJax 3 from the installed ``django-static-mathjax`` package to the site."""
    import mathjax  # the django-static-mathjax distribution; it needs no Django to import

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-mml-chtml.js").exists():
        raise PluginError(f"MathJax not found at {es5}; run `make setup`")
    for path in sorted(es5.rglob("*")):
        relative = path.relative_to(es5)
        is_other_bundle = len(relative.parts) == 1 and relative.name != "tex-mml-chtml.js"
        if path.is_file() and not is_other_bundle:
            uri = f"assets/vendor/mathjax/{relative.as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))


# ---------------------------------------------------------------------------------------------
# One notebook per chapter

FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<info>.*)$")
PAGE_LINK = re.compile(r"\]\((?!https?://)(?P<path>[^)\s#]+)\.md(?P<anchor>#[^)\s]*)?\)")
CODEBLOCKS_COMMENT = re.compile(r"^\s*<!--\s*(pytest-codeblocks:|pytest\.mark\.).*-->\s*$")


def absolute_links(line: str, page_url: str, site_url: str) -> str:
    """Point a page's relative figure and page links at the site, so they work in a notebook."""
    line = FIGURE_LINK.sub(lambda m: f"{site_url}figures/{m[1]}.svg", line)
    src_dir = posixpath.dirname(page_url.rstrip("/"))  # "chapters/x/" was "chapters/x.md"

    def page(match: re.Match) -> str:
        target = posixpath.normpath(posixpath.join(src_dir, match["path"]))
        url = "" if target == "index" else target.removesuffix("/index") + "/"
        return f"]({site_url}{url}{match['anchor'] or ''})"

    return PAGE_LINK.sub(page, line)


SKIP_MARK = re.compile(
    r"^\s*<!--\s*pytest\.mark\.(?:skipif\((?P<condition>.+?),\s*|skip\()"
    r"reason=(?P<quote>[\"'])(?P<reason>.*?)(?P=quote)\)\s*-->\s*$"
)


def guarded(code: str, skip: re.Match | None) -> str:
    """A block's code for a notebook cell; a block the page skips under a condition (no GPU)
    becomes a cell that runs where the condition does not hold and says why elsewhere."""
    if skip is None:
        return code
    body = "\n".join(f"    {line}" if line else "" for line in code.split("\n"))
    reason = skip["reason"]
    return (
        f"# The book runs this cell only where this holds: not ({skip['condition']})\n"
        f"if not ({skip['condition']}):\n{body}\nelse:\n    print({f'Skipped: {reason}.'!r})"
    )


# First cell of a notebook whose code runs Triton: the page's run sets TRITON_INTERPRET before
# Python starts (make snippets); a notebook sets it before any cell can import Triton.
TRITON_SETUP = """\
# Triton reads TRITON_INTERPRET once, at its first import: without a CUDA GPU, its kernels run
# under its interpreter on the CPU. Set it here, before any other cell imports Triton.
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")"""


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _run_time(name: str) -> str:
    """A cached run's name and how long it took, from `compute_seconds` (``*`` names a group)."""
    if name.endswith("*"):
        prefix = name[:-1]
        path = cache_dir() / COMPUTE_TIMES
        try:
            times = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            times = {}
        records = [record for run, record in times.items() if run.startswith(prefix)]
        shown = f"the `{prefix}…` runs it uses"
        if not records:
            return f"{shown} (not timed here: the machine that built this page had them cached)"
        low = min(record["seconds"] for record in records)
        high = max(record["seconds"] for record in records)
        span = _duration(low) if low == high else f"{_duration(low)} to {_duration(high)}"
        return f"{shown} ({span} each on the machine that built this page, {_cpus(records[0])})"
    record = compute_seconds(name)
    if record is None:
        return f"`{name}` (not timed here: the machine that built this page had it cached)"
    return (
        f"`{name}` ({_duration(record['seconds'])} on the machine that built this page, "
        f"{_cpus(record)})"
    )


def _cpus(record: dict) -> str:
    return f"{record['cpus']} CPU cores" if record.get("cpus") else "its CPUs"


def first_run_notes(markdown: str) -> str:
    """Put a note before each Python block that may train: what it trains, and for how long.

    Which blocks train is read from their code (`runs_started_by`): a block that calls a
    function of ``attention_book.experiments`` that starts a cached run gets the note, with the
    time the run took when the cache computed it (`compute_seconds`). Copied into a fresh
    session without the cache, such a block trains first; with the cache, it loads.
    """
    lines = markdown.split("\n")
    out = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match or match["info"].strip() != "python":  # not a runnable block
            out.append(lines[i])
            i += 1
            continue
        indent, ticks = match["indent"], match["ticks"]
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            j += 1
        body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : j])
        try:
            runs = runs_started_by(body)
        except SyntaxError:
            runs = ()  # a listing of something else than Python: ruff's check reports it
        if runs:
            trains = " and ".join(_run_time(name) for name in runs)
            out += [
                f"{indent}> **The first run trains.** In a fresh session without the book's "
                f"cache, this block first trains {trains}; after that it loads the result from "
                "the cache in seconds.",
                "",
            ]
        out += lines[i : j + 1]
        i = j + 1
    return "\n".join(out)


def chapter_notebook(
    markdown: str, page_url: str, site_url: str, page: str = "a page"
) -> nbformat.NotebookNode:
    """Turn a chapter into a notebook: runnable blocks become code cells, the rest Markdown.

    `page` names the chapter in error messages (an include of a missing section).
    """
    cells: list[nbformat.NotebookNode] = []
    prose: list[str] = []
    lines = first_run_notes(markdown).splitlines()
    i = 0
    output_follows = False  # the next fence is the expected output of the block above it

    def flush_prose() -> None:
        text = "\n".join(prose).strip("\n")
        if text.strip():
            cells.append(nbformat.v4.new_markdown_cell(text))
        prose.clear()

    skip = None  # the pytest mark of the next block, if it is skipped

    while i < len(lines):
        match = FENCE.match(lines[i])
        if CODEBLOCKS_COMMENT.match(lines[i]):
            output_follows = "expected-output" in lines[i]
            mark = SKIP_MARK.match(lines[i])
            skip = mark if mark else skip
            i += 1
            continue
        if not match:
            line = BUILD_FRAGMENT.sub(lambda m: _fragments.get(m[1], m[0]), lines[i])
            prose.append(absolute_links(line, page_url, site_url))
            i += 1
            continue
        indent, ticks, info = match["indent"], match["ticks"], match["info"].strip()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            j += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : j]]
        if output_follows:
            output_follows = False  # running the cell above shows its output
        elif info == "python" and skip is not None and skip["condition"] is None:
            reason = skip["reason"]  # never run: shown as a listing, with the page's reason
            prose.extend(["```python", *body, "```", "", f"*Not run here: {reason}.*"])
        elif info == "python":
            flush_prose()
            cells.append(nbformat.v4.new_code_cell(guarded("\n".join(body), skip)))
        else:
            title = re.fullmatch(r'python title="(?P<path>[^"]+)"', info)
            shown = listing(title["path"], body, page)[0].split("\n") if title else body
            prose.extend([f"```{info.split()[0] if info else ''}", *shown, "```"])
        i, skip = j + 1, None
    flush_prose()
    header = (
        f"*This notebook was generated from [the Attention Book]({site_url}{page_url}). "
        "It imports the book's package: run it from a clone of the book's repository after "
        "`make setup`, or after `pip install -e .` in that clone.*"
    )
    cells.insert(0, nbformat.v4.new_markdown_cell(header))
    if any(cell.cell_type == "code" and "triton" in cell.source.lower() for cell in cells):
        cells.insert(1, nbformat.v4.new_code_cell(TRITON_SETUP))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{number}"  # stable ids: the same chapter gives the same file
    return notebook


def notebook_uri(file: File) -> str:
    """Where the notebook of a chapter page lives in the site."""
    return "notebooks/" + Path(file.src_uri).stem + ".ipynb"


def add_notebooks(files: Files, config) -> None:
    """Write one notebook per chapter under ``.cache/notebooks`` and add it to the site."""
    out_dir = CACHE / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    for file in list(files.documentation_pages()):
        if file.src_uri.endswith(".py"):  # a jupytext notebook page: convert it as it is
            import jupytext

            path = out_dir / Path(notebook_uri(file)).name
            jupytext.write(jupytext.read(file.abs_src_path), path, fmt="ipynb")
            files.append(File.generated(config, notebook_uri(file), abs_src_path=str(path)))
            continue
        if not file.src_uri.startswith(CHAPTERS):
            continue
        markdown = Path(file.abs_src_path).read_text(encoding="utf-8")
        site_url = config["site_url"] or ""
        notebook = chapter_notebook(markdown, file.url, site_url, f"docs/{file.src_uri}")
        path = out_dir / Path(notebook_uri(file)).name
        path.write_text(nbformat.writes(notebook), encoding="utf-8")
        files.append(File.generated(config, notebook_uri(file), abs_src_path=str(path)))


# ---------------------------------------------------------------------------------------------
# mkdocs events


def on_files(files: Files, config) -> Files:
    """Add figures, MathJax and chapter notebooks to the site."""
    add_figures(files, config)
    add_mathjax(files, config)
    add_notebooks(files, config)
    return files


def insert_fragments(markdown: str, page: str) -> str:
    """Replace each ``{{ build:NAME }}`` by its fragment, indented like the line it is on.

    A fragment of several lines inside an admonition or a list keeps that indentation on
    every line, so a table can sit in an exercise's solution.
    """

    def fragment(match: re.Match, indent: str) -> str:
        if match[1] not in _fragments:
            raise PluginError(f"{page}: unknown build fragment {match[1]!r}")
        lines = _fragments[match[1]].split("\n")
        return "\n".join([lines[0], *(indent + line if line else "" for line in lines[1:])])

    out = []
    for line in markdown.split("\n"):
        indent = line[: len(line) - len(line.lstrip())]
        out.append(BUILD_FRAGMENT.sub(lambda m, indent=indent: fragment(m, indent), line))
    return "\n".join(out)


FIGURE_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<dir>(?:\.\./)*)figures/(?P<name>\w+)\.svg\)")


def light_and_dark_figures(markdown: str, page_url: str = "") -> str:
    """Show each figure drawn for the page's colour scheme (Material's ``#only-light`` and
    ``#only-dark`` images), with the same alt text; a `Frames` figure with its slider.

    `page_url` is the built page's URL (``chapters/x/``), for the slider's raw HTML."""

    def both(match: re.Match) -> str:
        alt, base = match["alt"], f"{match['dir']}figures/{match['name']}"
        if match["name"] in _frames:
            up = "../" * len([part for part in page_url.split("/") if part])
            return frames_player(match["name"], alt, up)
        return f"![{alt}]({base}.svg#only-light)![{alt}]({base}.dark.svg#only-dark)"

    return FIGURE_IMAGE.sub(both, markdown)


def frames_player(name: str, alt: str, up: str) -> str:
    """The HTML of a figure the reader steps through: its start frame and a slider.

    ``docs/assets/javascripts/book.js`` swaps the image when the slider moves; the frames are
    SVGs of the site, so it works offline. Without JavaScript the start frame stays. `up` leads
    from the built page to the site's root (raw HTML is not rewritten by mkdocs, as Markdown
    links are).
    """
    about = _frames[name]
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


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """Expand the listings, insert build fragments and, on chapters, the notebook's link."""
    markdown = expand_listings(markdown, f"docs/{page.file.src_uri}")
    markdown = first_run_notes(markdown)

    markdown = insert_fragments(markdown, f"docs/{page.file.src_uri}")
    markdown = light_and_dark_figures(markdown, page.url)
    if page.file.src_uri.startswith(CHAPTERS):
        name = Path(notebook_uri(page.file)).name
        link = (
            "[:material-download: Download this chapter as a notebook]"
            f'(../{notebook_uri(page.file)}){{ .md-button download="{name}" }}'
        )
        lines = markdown.split("\n")
        title = next((k for k, line in enumerate(lines) if line.startswith("# ")), -1)
        lines.insert(title + 1, f"\n{link}\n")
        markdown = "\n".join(lines)
    return markdown


CDN_SCRIPT = re.compile(r'<script[^>]*\bsrc="https?://[^"]*"[^>]*>\s*</script>', re.S)
MODULE_IMPORT = re.compile(
    r"<script type=\"module\">(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>", re.S
)


def on_post_page(output: str, page, config) -> str:
    """Remove scripts that nbconvert loads from CDNs: the site must load nothing from outside."""
    if page.file.src_uri.endswith((".py", ".ipynb")):
        output = CDN_SCRIPT.sub("", output)
        output = MODULE_IMPORT.sub("", output)
    return output
