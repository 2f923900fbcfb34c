"""The book's trained models, live in the reader's browser: the build's side of the widgets.

A page puts a widget where it writes ``{{ live:NAME }}`` (``translator`` or ``gpt``, the models of
`booktools.live.export`; ``flash``, the FlashAttention chapter's WebGPU kernels, whose reference
`booktools.live.flash` exports; or ``train``, the playground that trains a small GPT in the page,
whose reference and study `booktools.live.train` exports), and cites a number about it with
``{{ live:NAME.KEY }}`` (`VALUES`). At build time `add_live_models` exports each named model, in a
fresh interpreter, into ``.cache/live/`` under the name of the stored result it comes from (a
rebuild with the same result exports nothing), and adds its files to the site under ``live/``
without writing into ``docs/``. `insert_live` then replaces the placeholders: the widget is a short
block of HTML with a Load button (shown by ``book.js``, hidden without JavaScript, where a
``<noscript>`` note says why and points at the static figures) and the addresses of the model and
of the code. Nothing of the model or of its code (``docs/assets/javascripts/live/``) loads before
the reader presses the button, so the page's first load does not grow. The browser check
(`booktools.browser.check`) presses it, types the held-out cases of ``reference.json`` into the
widget and compares what the page computed with PyTorch's numbers.
"""

from __future__ import annotations

import gzip
import html
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File, Files

from booktools import ROOT
from booktools.plugin.state import BuildState

log = get_plugin_logger(__name__)

CACHE = ROOT / ".cache"
#: The widgets' code and style, served from ``assets/javascripts/live/``.
CODE_DIR = ROOT / "docs" / "assets" / "javascripts" / "live"
#: ``{{ live:NAME }}`` (the widget) or ``{{ live:NAME.KEY }}`` (a value about it).
LIVE = re.compile(r"\{\{ live:(?P<name>[a-z]+)(?:\.(?P<key>\w+))? \}\}")
#: The files of the site a reader's browser downloads for each widget: its code and style,
#: then the exported model (``model.json`` and ``weights.bin``).
CODE = {
    "translator": ("widget.js", "dom.js", "layers.js", "text.js", "transformer.js", "live.css"),
    "gpt": ("widget.js", "dom.js", "layers.js", "gpt.js", "live.css"),
    "flash": ("flash.js", "dom.js"),
    "train": ("train_widget.js", "train.js", "dom.js", "layers.js", "transformer.js", "live.css"),
}
#: The module book.js imports when the reader presses a widget's button (`widget.js` by default).
MODULES = {"flash": "flash.js", "train": "train_widget.js"}
#: The widgets that run no trained model, each with the module that exports its files: the
#: FlashAttention kernels checked against PyTorch on fixed inputs (`booktools.live.flash`) and
#: the playground that trains in the page (`booktools.live.train`).
KERNELS = {"flash": "booktools.live.flash", "train": "booktools.live.train"}
#: The files each of them adds to the site, and those of them the widget itself downloads (the
#: browser check alone reads the playground's ``reference.json``).
KERNEL_FILES = {"flash": ("reference.json",), "train": ("reference.json", "study.json")}
FETCHED = {"flash": ("reference.json",), "train": ("study.json",)}
#: The FlashAttention widget may download at most this much, compressed with gzip.
MAX_FLASH_GZIP_BYTES = 60_000
#: The training widget may download at most this much, compressed with gzip.
MAX_TRAIN_GZIP_BYTES = 150_000
MODEL_FILES = ("model.json", "weights.bin")
#: Every file of an exported model that goes to the site (the check reads reference.json).
SITE_FILES = (*MODEL_FILES, "reference.json")
#: A widget may download at most this much, compressed with gzip (code, model and weights).
MAX_WIDGET_GZIP_BYTES = 500_000
#: What each widget is called on its button, what it shows first, and what the page says
#: without JavaScript.
WIDGETS = {
    "translator": {
        "title": "the translator",
        "example": None,  # the reference's first sentence, the static explorer's
        "noscript": "JavaScript is off in this browser, so the model cannot run here. The "
        '<a href="#where-the-trained-model-looks">static explorer</a> further down shows '
        "the same trained model's attention, every block and head, on one test sentence.",
    },
    "gpt": {
        "title": "the character GPT",
        "example": "Elle a ",
        "noscript": "JavaScript is off in this browser, so the model cannot run here. The "
        "figure above shows the same model's time per character with and without the cache, "
        "measured when the book was built.",
    },
    "train": {
        "title": "the training playground",
        "example": "",
        "noscript": "JavaScript is off in this browser, so nothing can train here. The figure "
        "below shows the same training, run in PyTorch when the book was built.",
    },
    "flash": {
        "title": "the FlashAttention widget",
        "example": "",
        "noscript": "JavaScript is off in this browser, so the kernels cannot run here. The "
        "book's browser check runs them on every build, on a CPU, against PyTorch.",
    },
}


def referenced_live(pages: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The widgets that pages use (in either form), each with the pages that use it.

    Args:
        pages: ``(page, markdown)`` pairs.

    Returns:
        ``{name: [page, ...]}``.

    Raises:
        PluginError: For an unknown widget, naming the page.
    """
    found: dict[str, list[str]] = {}
    for page, text in pages:
        for match in LIVE.finditer(text):
            if match["name"] not in CODE:
                raise PluginError(
                    f"{page}: unknown live widget {match['name']!r} (one of {sorted(CODE)})"
                )
            found.setdefault(match["name"], []).append(page)
    return found


def gzip_bytes(path: Path) -> int:
    """Bytes of a file once compressed with gzip (level 9, as static hosts compress)."""
    return len(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))


def export(names: list[str], out_dir: Path = CACHE / "live") -> dict[str, Path]:
    """Export the named models (or find them exported) with ``python -m booktools.live.export``.

    Args:
        names: Widgets' names.
        out_dir: The folder of exported models.

    Returns:
        Each name's folder.

    Raises:
        PluginError: If the export fails, with its error output.
    """
    start = time.perf_counter()
    models = [name for name in names if name not in KERNELS]
    commands = []
    if models:
        commands.append(
            [sys.executable, "-m", "booktools.live.export", "--out", str(out_dir), *models]
        )
    for name in names:  # no trained model: PyTorch's outputs, its reference trainings
        if name in KERNELS:
            commands.append([sys.executable, "-m", KERNELS[name], "--out", str(out_dir)])
    folders = {}
    for command in commands:
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            raise PluginError(f"exporting the live models failed:\n{result.stderr[-4000:]}")
        for line in result.stdout.splitlines():
            entry = json.loads(line)
            folders[entry["name"]] = Path(entry["folder"])
    log.info("live models: %s in %.1f s", ", ".join(sorted(folders)), time.perf_counter() - start)
    return folders


def budget(name: str) -> int:
    """The most a widget may download, compressed with gzip."""
    return {"flash": MAX_FLASH_GZIP_BYTES, "train": MAX_TRAIN_GZIP_BYTES}.get(
        name, MAX_WIDGET_GZIP_BYTES
    )


def widget_facts(name: str, folder: Path) -> dict:
    """What the page and the check know about one exported widget: ``about.json`` and sizes.

    Args:
        name: The widget's name.
        folder: Its exported model's folder.

    Returns:
        ``about.json``'s values, with ``folder``, ``code_gzip_bytes``, ``download_gzip_bytes``
        (code, model and weights, all compressed), ``download_bytes`` (the same with the
        weights as they are: a static host compresses text, not a binary file; the check's
        server does the same), ``reference_cases`` and ``example``.

    Raises:
        PluginError: If the widget would download more than `MAX_WIDGET_GZIP_BYTES`.
    """
    about = json.loads((folder / "about.json").read_text(encoding="utf-8"))
    reference = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
    code = sum(gzip_bytes(CODE_DIR / file) for file in CODE[name])
    if name in KERNELS:
        download = code + sum(gzip_bytes(folder / file) for file in FETCHED[name])
        if download > budget(name):
            raise PluginError(
                f"the live {name} downloads {download:,} bytes (gzip), over the "
                f"{budget(name):,} it may"
            )
        return {
            **about,
            "folder": folder.name,
            "code_gzip_bytes": code,
            "download_gzip_bytes": download,
            "download_bytes": download,
            "reference_cases": len(reference["cases"]),
            "example": WIDGETS[name]["example"],
        }
    download = code + about["model_gzip_bytes"] + about["weights_gzip_bytes"]
    if download > MAX_WIDGET_GZIP_BYTES:
        raise PluginError(
            f"the live {name} downloads {download:,} bytes (gzip), over the "
            f"{MAX_WIDGET_GZIP_BYTES:,} a widget may"
        )
    first = reference["cases"][0]
    example = WIDGETS[name]["example"] or first.get("sentence") or first.get("prompt")
    return {
        **about,
        "folder": folder.name,
        "code_gzip_bytes": code,
        "download_gzip_bytes": download,
        "download_bytes": code + about["model_gzip_bytes"] + about["weights_bytes"],
        "reference_cases": len(reference["cases"]),
        "example": example,
    }


def add_live_models(files: Files, config, state: BuildState) -> None:
    """Export the models the pages' widgets run, and add their files to the site.

    Args:
        files: The site's files (the models' files are appended under ``live/``).
        config: The mkdocs configuration.
        state: This build's state; ``state.live`` learns each widget's facts (`widget_facts`).
    """
    pages = [(f"docs/{file.src_uri}", file.content_string) for file in files.documentation_pages()]
    names = sorted(referenced_live(pages))
    state.live.clear()
    if not names:
        return
    for name, folder in export(names).items():
        for file in KERNEL_FILES[name] if name in KERNELS else SITE_FILES:
            uri = f"live/{folder.name}/{file}"
            files.append(File.generated(config, uri, abs_src_path=str(folder / file)))
        state.live[name] = widget_facts(name, folder)


def kilobytes(count: int) -> str:
    """Bytes in kilobytes, as the page says them: ``352 KB``."""
    return f"{count / 1000:.0f} KB"


#: The values a page may cite, ``{{ live:NAME.KEY }}``, each from the widget's facts.
VALUES = {
    "num_parameters": lambda facts: f"{facts['num_parameters']:,}",
    "vocab_size": lambda facts: str(facts["vocab_size"]),
    "download": lambda facts: kilobytes(facts["download_bytes"]),
    "download_gzip": lambda facts: kilobytes(facts["download_gzip_bytes"]),
    "weights_raw": lambda facts: kilobytes(facts["weights_bytes"]),
    "weights_gzip": lambda facts: kilobytes(facts["weights_gzip_bytes"]),
    "code_gzip": lambda facts: kilobytes(facts["code_gzip_bytes"]),
    "float16_change": lambda facts: f"{facts['float16_max_logit_change']:.3f}",
    "tolerance": lambda facts: f"{facts['tolerance']:g}",
    "reference_cases": lambda facts: str(facts["reference_cases"]),
    "budget": lambda facts: kilobytes(MAX_WIDGET_GZIP_BYTES),
}


def widget_html(name: str, up: str, facts: dict) -> str:
    """The HTML of one widget before it loads: what it is, its Load button, its noscript note.

    Args:
        name: The widget's name.
        up: The path from the built page to the site's root.
        facts: Its facts (`widget_facts`).

    Returns:
        One block of raw HTML.
    """
    widget = WIDGETS[name]
    size = kilobytes(facts["download_bytes"])
    attributes = {
        "class": "book-live",
        "data-live": name,
        "data-model": f"{up}live/{facts['folder']}/",
        "data-module": f"{up}assets/javascripts/live/{MODULES.get(name, 'widget.js')}",
        "data-example": facts["example"],
    }
    opening = " ".join(
        f'{key}="{html.escape(value, quote=True)}"' for key, value in attributes.items()
    )
    return (
        f"<div {opening}>\n"
        f'<div class="book-live__app">\n'
        f'<button type="button" class="md-button book-live__load" hidden>'
        f"Load {widget['title']} ({size})</button>\n"
        f"<noscript><p>{widget['noscript']}</p></noscript>\n"
        "</div>\n</div>"
    )


def insert_live(markdown: str, page: str, page_url: str, state: BuildState) -> str:
    """Replace each ``{{ live:NAME }}`` by its widget and each ``{{ live:NAME.KEY }}`` by a value.

    Args:
        markdown: A page.
        page: The page, named in errors.
        page_url: The built page's URL (``chapters/x/``): raw HTML is not rewritten by mkdocs.
        state: The build's state, with the widgets exported.

    Returns:
        The Markdown with the widgets and values in place.

    Raises:
        PluginError: For a widget the build did not export or an unknown value, naming the page.
    """
    up = "../" * len([part for part in page_url.split("/") if part])

    def replace(match: re.Match) -> str:
        name, key = match["name"], match["key"]
        if name not in state.live:
            raise PluginError(f"{page}: the live widget {name!r} was not exported")
        if key is None:
            return widget_html(name, up, state.live[name])
        if key not in VALUES:
            raise PluginError(f"{page}: unknown value {key!r} of a live widget ({sorted(VALUES)})")
        return VALUES[key](state.live[name])

    return LIVE.sub(replace, markdown)


def upper_first(text: str) -> str:
    """`text` with its first letter in upper case, the rest as it is (``GPT`` stays ``GPT``)."""
    return text[:1].upper() + text[1:]


def notebook_text(markdown: str, page_url: str, site_url: str, state: BuildState) -> str:
    """The placeholders of a chapter's notebook: a link to the widget, and the values.

    Args:
        markdown: A line of the chapter.
        page_url: The built page's URL.
        site_url: The site's URL.
        state: The build's state (no values are inserted when it holds no widget).

    Returns:
        The line, each widget replaced by a sentence that links to it on the page.
    """

    def replace(match: re.Match) -> str:
        name, key = match["name"], match["key"]
        if key is None:
            return (
                f"*{upper_first(WIDGETS[name]['title'])} runs in the browser on "
                f"[the book's page]({site_url}{page_url}); a notebook cannot show it.*"
            )
        return VALUES[key](state.live[name]) if name in state.live else match[0]

    return LIVE.sub(replace, markdown)
