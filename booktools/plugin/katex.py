r"""Math rendered when the site is built, by KaTeX: pages load KaTeX's style sheet, no script.

The chapters write math as ``$...$`` and ``$$...$$``; ``pymdownx.arithmatex`` (generic mode)
wraps each formula, still in TeX, in ``<span class="arithmatex">\(...\)</span>`` or
``<div class="arithmatex">\[...\]</div>``. Material's search plugin indexes the page at that
point, so the search index holds the TeX. Then `render_math` (run by the plugin on every built
page) replaces each formula by KaTeX's HTML, with MathML beside it for screen readers
(``output: "htmlAndMathml"``). A formula KaTeX cannot render fails the build with `KatexError`,
naming the page and the formula.

KaTeX runs where the site is built, in QuickJS (the ``quickjs`` package from PyPI, a JavaScript
engine in a Python extension): the machine needs no Node.js. It runs KaTeX's own
``katex.min.js``, from the same npm release whose style sheet and fonts the site serves
(`add_katex`, under ``assets/vendor/katex/``). That release is pinned in
``booktools/plugin/katex-lock.json`` by version and sha512 digest (npm's ``integrity``);
``python -m booktools.plugin.katex install`` (run by ``make setup``) downloads its tarball once,
checks the digest, and unpacks its ``dist/`` into the virtual environment
(``share/attention-book/katex-VERSION``). The build downloads nothing: without that folder it
stops and says to run ``make setup``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import html
import io
import json
import os
import re
import sys
import tarfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mkdocs.exceptions import PluginError

#: The pinned release: version, tarball and its digest.
LOCK_FILE = Path(__file__).with_name("katex-lock.json")

#: Where the site serves KaTeX's style sheet and fonts.
SITE_FOLDER = "assets/vendor/katex"

#: What the installed release holds, from the tarball's ``package/`` folder: the renderer, the
#: style sheet, its fonts and the licence.
KEPT = ("dist/katex.min.js", "dist/katex.min.css", "dist/fonts/", "LICENSE")

#: A formula as pymdownx.arithmatex (generic mode) writes it in a page's HTML.
FORMULA = re.compile(r'<(?P<tag>span|div) class="arithmatex">(?P<tex>.*?)</(?P=tag)>', re.S)

#: KaTeX's options: every formula must render (no error box, no lenient parsing), and MathML
#: goes beside the HTML for screen readers.
OPTIONS = {"throwOnError": True, "strict": "error", "output": "htmlAndMathml", "trust": False}


class KatexError(PluginError):
    """A formula that KaTeX cannot render, or KaTeX missing where the site is built."""


@dataclass(frozen=True)
class Lock:
    """The pinned KaTeX release (``booktools/plugin/katex-lock.json``)."""

    version: str
    tarball: str
    integrity: str


def lock() -> Lock:
    """The pinned release."""
    data = json.loads(LOCK_FILE.read_text(encoding="utf-8"))
    return Lock(data["version"], data["tarball"], data["integrity"])


def integrity(data: bytes) -> str:
    """The sha512 digest of `data`, written as npm writes a tarball's ``integrity``."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")


def install_dir(prefix: str | Path | None = None) -> Path:
    """Where the pinned release is unpacked: in the environment at `prefix` (this one's)."""
    return Path(prefix or sys.prefix) / "share" / "attention-book" / f"katex-{lock().version}"


def download_cache() -> Path:
    """Where a downloaded tarball is kept, so that a new environment need not fetch it again."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attention-book" / f"katex-{lock().version}.tgz"


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read()


def install(
    prefix: str | Path | None = None, fetch: Callable[[str], bytes] = _fetch, quiet: bool = False
) -> Path:
    """Unpack the pinned KaTeX release into an environment, fetching its tarball if needed.

    The tarball comes from the download cache when it is there and has the pinned digest, else
    from the npm registry; a tarball whose digest differs is refused. Only `KEPT` is unpacked.

    Args:
        prefix: The environment (``sys.prefix``: this one, by default).
        fetch: Downloads a URL (tests pass their own).
        quiet: Print nothing.

    Returns:
        The folder it is unpacked in (`install_dir`).

    Raises:
        ValueError: If the downloaded tarball's digest is not the pinned one.
    """
    pinned, target = lock(), install_dir(prefix)
    stamp = target / ".integrity"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == pinned.integrity:
        return target
    cache = download_cache()
    data = cache.read_bytes() if cache.is_file() else b""
    if integrity(data) != pinned.integrity:
        if not quiet:
            print(f"Fetching KaTeX {pinned.version} ({pinned.tarball})")
        data = fetch(pinned.tarball)
        if integrity(data) != pinned.integrity:
            raise ValueError(
                f"the tarball at {pinned.tarball} has digest {integrity(data)}, not the pinned "
                f"{pinned.integrity} (booktools/plugin/katex-lock.json): refused"
            )
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(data)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            name = member.name.removeprefix("package/")
            if not member.isfile() or not name.startswith(KEPT) or ".." in name.split("/"):
                continue
            path = target / name.removeprefix("dist/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.extractfile(member).read())
    stamp.write_text(pinned.integrity, encoding="utf-8")
    if not quiet:
        print(f"KaTeX {pinned.version} unpacked in {target}")
    return target


def installed(prefix: str | Path | None = None) -> Path:
    """The unpacked release, checked to be the pinned one.

    Raises:
        KatexError: If it is not there (``make setup`` installs it).
    """
    target = install_dir(prefix)
    stamp = target / ".integrity"
    if not (stamp.is_file() and stamp.read_text(encoding="utf-8") == lock().integrity):
        raise KatexError(
            f"KaTeX {lock().version} is not installed in {target}: run `make setup` "
            "(or `python -m booktools.plugin.katex install`)"
        )
    return target


class Renderer:
    """KaTeX's ``renderToString`` in a QuickJS context, with the book's `OPTIONS`.

    Args:
        script: KaTeX's ``katex.min.js``.
    """

    def __init__(self, script: Path):
        import quickjs

        self._context = quickjs.Context()
        self._context.eval("var self = globalThis;")  # where KaTeX's bundle puts `katex`
        self._context.eval(script.read_text(encoding="utf-8"))
        self.version = self._context.eval("katex.version")
        self._render = self._context.eval(
            "(tex, display) => { try { return JSON.stringify({html: katex.renderToString(tex,"
            f" Object.assign({{displayMode: display}}, {json.dumps(OPTIONS)}))}});"
            " } catch (error) { return JSON.stringify({error: String(error.message)}); } }"
        )
        self._cache: dict[tuple[str, bool], str] = {}

    def render(self, tex: str, display: bool) -> str:
        """KaTeX's HTML (and MathML) of one formula.

        Args:
            tex: The formula, without its delimiters.
            display: A display formula (its own line), or inline.

        Returns:
            The HTML.

        Raises:
            KatexError: With KaTeX's message, if KaTeX cannot render it.
        """
        key = (tex, display)
        if key not in self._cache:
            result = json.loads(self._render(tex, display))
            if "error" in result:
                raise KatexError(result["error"].replace("\u0332", ""))  # underlines the spot
            self._cache[key] = result["html"]
        return self._cache[key]


@functools.cache
def renderer() -> Renderer:
    """The renderer of this process, on the installed release (checked to be the pinned one)."""
    return Renderer(installed() / "katex.min.js")


def formula_tex(wrapped: str) -> tuple[str, bool]:
    r"""The TeX of a formula as arithmatex wrapped it, and whether it is a display formula.

    Args:
        wrapped: The element's content, HTML-escaped: ``\(...\)``, ``\[...\]``.

    Returns:
        ``(tex, display)``.
    """
    text = html.unescape(wrapped).strip()
    for opening, closing, display in (("\\(", "\\)", False), ("\\[", "\\]", True)):
        if text.startswith(opening) and text.endswith(closing):
            return text[len(opening) : -len(closing)].strip(), display
    return text, True  # an environment (\begin{align}...) written on its own


#: TeX's inline or display delimiters, as arithmatex leaves them in a page.
TEX_DELIMITER = re.compile(r"\\\((?:(?!\\\)).){1,200}?\\\)|\\\[(?:(?!\\\]).){1,200}?\\\]", re.S)
ARTICLE = re.compile(r"<article\b.*?</article>", re.S)


def raw_math_outside_content(page_html: str) -> list[str]:
    """Formulas in a built page outside its ``<article>``: the navigation, the table of contents.

    The page's content is rendered by `render_math`; the table of contents repeats a heading's
    text with its TeX as text, which the reader would see raw.

    Args:
        page_html: A built page.

    Returns:
        Each delimiter found there, with what follows it.
    """
    if "<article" not in page_html:  # not a built page (a fragment): no navigation to read
        return []
    return TEX_DELIMITER.findall(ARTICLE.sub("", page_html))


def render_math(page_html: str, page: str, render: Callable[[str, bool], str] | None = None) -> str:
    """Replace every formula of a built page by KaTeX's rendering of it.

    Args:
        page_html: The page's HTML.
        page: The page's source, named in an error (``chapters/x.md``).
        render: Renders one formula (`Renderer.render` of this process's renderer by default).

    Returns:
        The HTML, each ``arithmatex`` element holding KaTeX's HTML and MathML.

    Raises:
        KatexError: Naming the page, the formula and KaTeX's message, for the first formula
            KaTeX cannot render, or the first formula outside the page's content.
    """
    outside = raw_math_outside_content(page_html)
    if outside:
        raise KatexError(
            f"{page}: a formula outside the page's content, where KaTeX does not render it (a "
            f"heading's math shows as TeX in the table of contents): {outside[0]!r}; write the "
            "heading in words (or Unicode, as in √d)"
        )
    if 'class="arithmatex"' not in page_html:
        return page_html
    render = render or renderer().render

    def replace(match: re.Match) -> str:
        tex, display = formula_tex(match["tex"])
        try:
            rendered = render(tex, display)
        except KatexError as error:
            raise KatexError(f"{page}: KaTeX cannot render the formula {tex!r}: {error}") from None
        return f'<{match["tag"]} class="arithmatex">{rendered}</{match["tag"]}>'

    return FORMULA.sub(replace, page_html)


def add_katex(files, config) -> None:
    """Add KaTeX's style sheet, its fonts and its licence to the site (`SITE_FOLDER`).

    Args:
        files: The site's files (KaTeX's are appended).
        config: The mkdocs configuration.

    Raises:
        KatexError: If the pinned release is not installed.
    """
    from mkdocs.structure.files import File

    folder = installed()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative not in ("katex.min.js", ".integrity"):
            uri = f"{SITE_FOLDER}/{relative}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))


def main(argv: list[str] | None = None) -> int:
    """``python -m booktools.plugin.katex install``: unpack the pinned release here."""
    parser = argparse.ArgumentParser(description="KaTeX for the book's build")
    parser.add_argument("command", choices=["install", "where"])
    args = parser.parse_args(argv)
    if args.command == "install":
        install()
    else:
        print(installed())
    return 0


if __name__ == "__main__":
    sys.exit(main())
