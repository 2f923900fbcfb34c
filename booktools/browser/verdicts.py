"""The browser check's verdicts on the pages that passed, kept under what each page loaded.

Checking a page in Chromium takes seconds (its axe audits, its live widgets, its
screenshots), and the site has about seventy pages. A page that loads the same bytes as when it
last passed, in the same browser and with the same checker, gives the same verdict: `Verdicts`
keeps that verdict and hands it back instead of loading the page again. Nothing is guessed
from file names or from what the page's Markdown imports; the browser says what the page loads:

- `keep` records, for a page that passed in every way, the digest of every file of the site
  that the page requested while it was checked (its HTML, style sheets, scripts, fonts,
  figures, the frames a slider brought, a live widget's model and reference cases), and of its
  Markdown source (whose blocks the copy buttons must copy); and the screenshots it took;
- `reuse` hands the verdict back only when every one of those files is still what it was, and
  the check is still the same (`checker_key`: the code of the check, Chromium's version,
  Playwright's and axe-core's, Python's, dark mode or not). Otherwise the page is checked again.

A page with a problem is never kept, and neither is a page that requested anything from another
host: it is checked on every run until it passes.

Two files of the site are requested by every page and change with any page: Material's search
index and the sitemap (`SITE_WIDE`). They are the site's, not the page's: the search check
runs on every run, loads them and fails on an error. A page's own check sees them only through
its weight; so they are not part of its key, and a kept page's weight is recomputed with their
compressed size of today. A chapter that a grown search index pushes over its limit fails.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

from booktools.browser.page import PageReport, weight_problem
from booktools.browser.serve import COMPRESSED, find_chromium
from booktools.live.check import LiveReport

#: Bump when what a kept verdict holds changes meaning.
VERSION = 1
#: Files every page requests, which change with any page (see the module's docstring).
SITE_WIDE = ("search/search_index.json", "sitemap.xml")
#: Marks a file the page requested that the site does not have (the page then failed).
ABSENT = "absent"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, or `ABSENT`."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ABSENT


def served_size(path: Path) -> int | None:
    """How many bytes the local server sends for a file's body (compressed as it compresses)."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    return len(gzip.compress(data, mtime=0)) if path.suffix in COMPRESSED else len(data)


def checker_files() -> list[Path]:
    """The source files of the browser check, which are part of every page's key.

    They are `booktools.browser.check` and every module of the tooling that it imports,
    directly or through another, at the top or inside a function. An edit to another module
    of the tooling (the figures, the notebooks, the plugin) changes the check only through the
    pages it builds, and those are in each page's own key.
    """
    tooling = Path(__file__).resolve().parents[1]

    def source(module: str) -> Path | None:
        parts = module.split(".")[1:]
        for path in (tooling.joinpath(*parts).with_suffix(".py"),
                     tooling.joinpath(*parts, "__init__.py")):  # fmt: skip
            if parts and path.is_file():
                return path
        return None

    found, todo = {tooling / "__init__.py"}, ["booktools.browser.check"]
    while todo:
        path = source(todo.pop())
        if path is None or path in found:  # `from booktools import ROOT` names no module
            continue
        found.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("booktools"):
                todo.append(node.module)
                todo += [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("booktools.")]
    return sorted(found)


@functools.cache
def checker_key(dark: bool) -> str:
    """What the check itself is: its code, the browser, the libraries that drive it, the ways."""
    digest = hashlib.sha256(f"verdicts {VERSION}; dark {dark}; python {sys.version}".encode())
    for path in checker_files():
        digest.update(
            path.relative_to(Path(__file__).resolve().parents[2]).as_posix().encode()
            + b"\0"
            + path.read_bytes()
        )
    chromium = subprocess.run(
        [find_chromium(), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    digest.update(f"chromium {chromium}".encode())
    for library in ("playwright", "axe-playwright-python"):
        digest.update(f"{library} {metadata.version(library)}".encode())
    return digest.hexdigest()


def site_file(request: str, site_dir: Path) -> str | None:
    """The file of the site that a request of the page fetched, relative to the site.

    Args:
        request: What `check_page` records: the URL path of a request to the site
            (``/chapters/x/``), or the whole URL of any other.
        site_dir: The built site.

    Returns:
        ``chapters/x/index.html`` for ``/chapters/x/``; None for a request that fetches no file
        (``data:``, ``blob:``).

    Raises:
        ValueError: For a request to another host: such a page cannot be kept.
    """
    if not request.startswith("/"):
        if request.startswith(("data:", "blob:", "about:")):
            return None
        raise ValueError(f"a request to another host: {request}")
    path = unquote(urlsplit(request).path).lstrip("/")
    if path == "" or path.endswith("/") or (site_dir / path).is_dir():
        path = f"{path.rstrip('/')}/index.html".lstrip("/")
    return path


@dataclasses.dataclass
class Verdicts:
    """The kept verdicts of one site's pages, in `folder` (``verdicts.json`` and ``shots/``).

    Args:
        folder: Where the verdicts are kept (``.cache/browser`` for `make test`).
        site_dir: The built site.
        docs_dir: The Markdown sources of its pages, or None.
        dark: Whether the pages are also checked in dark mode.
    """

    folder: Path
    site_dir: Path
    docs_dir: Path | None = None
    dark: bool = True
    entries: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        try:
            stored = json.loads((self.folder / "verdicts.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = {}
        if stored.get("checker") == checker_key(self.dark):
            self.entries = stored.get("pages", {})

    def _inputs_hold(self, inputs: dict[str, str], source: Path | None) -> bool:
        for name, digest in inputs.items():
            if name == "source:":
                current = file_digest(source) if source is not None else ABSENT
            elif name.removeprefix("site:") in SITE_WIDE:
                continue
            else:
                current = file_digest(self.site_dir / name.removeprefix("site:"))
            if current != digest:
                return False
        return True

    def reuse(
        self, path: str, source: Path | None, shots: dict[str, Path]
    ) -> list[PageReport] | None:
        """The reports of the page at `path` as it passed before, if nothing it loads changed.

        Args:
            path: The page's URL path.
            source: Its Markdown source, or None.
            shots: The screenshots the check would take of it now: mode -> file. They are
                copied from the kept ones; a page without one of them is checked again.

        Returns:
            One report per way, as `check_page` gives them, or None: check the page.
        """
        entry = self.entries.get(path)
        if entry is None or not self._inputs_hold(entry["inputs"], source):
            return None
        if any(mode not in entry["shots"] for mode in shots):
            return None
        weight_change = 0
        for name, was in entry["site_wide"].items():
            now = served_size(self.site_dir / name)
            if now is None:
                return None
            weight_change += now - was
        for mode, target in shots.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.folder / "shots" / entry["shots"][mode], target)
        reports = []
        for kept in entry["reports"]:
            report = PageReport(f"{path} ({kept['mode']})", kept=True)
            report.bytes = kept["bytes"] + weight_change if kept["bytes"] else 0
            report.live = [LiveReport(**live) for live in kept["live"]]
            if kept["bytes"] and (problem := weight_problem(path, report.bytes)):
                report.problems.append(problem)
            reports.append(report)
        return reports

    def keep(
        self, path: str, reports: list[PageReport], source: Path | None, shots: dict[str, Path]
    ) -> None:
        """Keep the verdict of a page checked just now, if it passed in every way.

        Args:
            path: The page's URL path.
            reports: Its reports, light first (whose ``loaded`` lists what the page requested).
            source: Its Markdown source, or None.
            shots: The screenshots taken of it: mode -> file.
        """
        self.entries.pop(path, None)
        if not reports or any(report.problems for report in reports):
            return
        inputs, site_wide = {}, {}
        try:
            files = {site_file(request, self.site_dir) for request in reports[0].loaded}
        except ValueError:
            return
        for name in sorted(files - {None}):
            if name in SITE_WIDE:
                site_wide[name] = served_size(self.site_dir / name) or 0
            inputs[f"site:{name}"] = file_digest(self.site_dir / name)
        if not inputs:
            return
        inputs["source:"] = file_digest(source) if source is not None else ABSENT
        kept_shots = {}
        for mode, shot in shots.items():
            if shot.is_file():
                name = shot.name
                (self.folder / "shots").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, self.folder / "shots" / name)
                kept_shots[mode] = name
        self.entries[path] = {
            "inputs": inputs,
            "site_wide": site_wide,
            "shots": kept_shots,
            "reports": [
                {
                    "mode": report.url.rpartition(" (")[2].rstrip(")"),
                    "bytes": report.bytes,
                    "live": [dataclasses.asdict(live) for live in report.live],
                }
                for report in reports
            ],
        }

    def save(self) -> None:
        """Write the verdicts down in `folder`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"checker": checker_key(self.dark), "pages": self.entries}
        (self.folder / "verdicts.json").write_text(
            json.dumps(record, indent=1, sort_keys=True), encoding="utf-8"
        )
