"""Open the built site in headless Chromium and check what a reader would see.

Usage: ``python tests/browser_check.py site --screenshots screenshots``; add
``--page docs/chapters/x.md`` (several times if needed) to check only those pages.

For every page of the site it fails on a console error, an uncaught exception, a failed request
or an HTTP error, an image that did not load (``naturalWidth == 0``), a formula that MathJax
did not render (with MathJax's message), a code block that scrolls sideways at 1280 px, and a
chapter page that transfers more than 2 MB (served compressed, as GitHub Pages serves it; every
page's weight is printed), or that prints with closed folds or its navigation; at 390 px wide
(a phone) it fails a page that scrolls sideways. In light and dark mode it runs axe-core and
fails on any serious or critical accessibility violation, and it moves the slider of every
figure the reader steps through and fails if the figure does not change. In light mode it
presses the copy button of every Python block and fails if a runnable block of the page's
Markdown source (the code the snippets test, each block alone) is not what some button copies
(``--docs``, the Markdown folder, ``docs`` by default). It saves a full-page
screenshot of each page in light and dark mode and at 390 px. Then it types "attention" into
the search box and expects results. It drives Debian's Chromium through Playwright (no browser
download) and serves the site on a local port.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import multiprocessing
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# True once MathJax has started, or at once on a page without math.
MATHJAX_READY = """() => !document.querySelector('.arithmatex')
  || Boolean(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)"""

# Waits until MathJax (when the page loads it) has typeset, then reports the state of the page.
PAGE_STATE = """async () => {
  // A TeX error, or an undefined macro that MathJax's noundefined extension paints red.
  const MATH_ERROR = 'mjx-merror, [data-mjx-error], mjx-mtext[style*="color: red"]';
  if (window.MathJax && window.MathJax.startup) {
    await window.MathJax.startup.promise;
  }
  const math = [...document.querySelectorAll('.arithmatex')];
  // Folded blocks count too: a reader opens them. Open every fold to measure, then restore.
  const folds = [...document.querySelectorAll('details')].filter(d => !d.open);
  folds.forEach(d => { d.open = true; });
  const images = [...document.querySelectorAll('img')];
  const wide = [...document.querySelectorAll('pre > code')]
    .filter(code => code.getClientRects().length > 0)  // displayed (not in a hidden tab)
    .filter(code => [code, code.parentElement].some(box =>
      getComputedStyle(box).display !== 'inline' && box.scrollWidth > box.clientWidth + 1))
    .map(code => code.textContent.trim().split('\\n')[0].slice(0, 60));
  folds.forEach(d => { d.open = false; });
  return {
    images: images.map(img => ({
      src: img.currentSrc || img.src,
      ok: img.complete && img.naturalWidth > 0,
    })),
    math: math.map(el => {
      const error = el.querySelector(MATH_ERROR);
      return {
        text: el.textContent.slice(0, 80),
        ok: el.querySelector('mjx-container') !== null && error === null,
        // MathJax's own message: "Undefined control sequence \\foo", or the red macro name.
        error: error && (error.getAttribute('data-mjx-error') || error.textContent).slice(0, 160),
      };
    }),
    mathjax: Boolean(window.MathJax && window.MathJax.startup),
    // Code that scrolls sideways hides its line ends.
    wide_code: wide,
    // Bytes the page transferred: the document and every resource it loaded.
    bytes: performance.getEntriesByType('navigation').concat(
      performance.getEntriesByType('resource')
    ).reduce((total, entry) => total + (entry.transferSize || entry.encodedBodySize || 0), 0),
  };
}"""


#: A chapter page may transfer at most this much (HTML, figures, scripts, fonts, search index).
MAX_CHAPTER_BYTES = 2_000_000


@dataclass
class PageReport:
    """Everything found wrong on one page, and how many bytes it transferred."""

    url: str
    problems: list[str] = field(default_factory=list)
    bytes: int = 0


def find_chromium() -> str:
    """Path of the system Chromium."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("chromium is not installed: run `make chromium` (Debian's chromium package)")


def site_pages(site_dir: Path) -> list[str]:
    """URL paths of every page of a built site (each ``index.html`` but the 404 page)."""
    pages = []
    for path in sorted(site_dir.rglob("index.html")):
        relative = path.parent.relative_to(site_dir).as_posix()
        if relative.startswith(("assets", "search")):
            continue
        pages.append("/" if relative == "." else f"/{relative}/")
    return sorted(pages)


@contextmanager
def serve(site_dir: Path) -> Iterator[str]:
    """Serve a directory on a free local port for the duration of the block."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietServer(http.server.ThreadingHTTPServer):
    """A local server that does not print a traceback when the browser drops a connection."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset
            super().handle_error(request, client_address)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site as a static host does (GitHub Pages): text compressed with gzip."""

    COMPRESSED = (".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".ipynb")

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and path.is_file() and path.suffix in self.COMPRESSED):
            return super().do_GET()
        body = gzip.compress(path.read_bytes(), mtime=0)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None


# In print: Material hides the navigation, and the book's script opens every fold first.
PRINT_STATE = """() => {
  window.dispatchEvent(new Event('beforeprint'));
  const closed = document.querySelectorAll('details:not([open])').length;
  const shown = [...document.querySelectorAll('.md-header, .md-sidebar, .md-footer')]
    .filter(el => getComputedStyle(el).display !== 'none').length;
  window.dispatchEvent(new Event('afterprint'));
  return {closed, shown};
}"""

# axe-core (shipped inside the axe-playwright-python wheel, so nothing is downloaded): the
# serious and critical violations of the WCAG rules it checks.
AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => ({id: v.id, impact: v.impact, count: v.nodes.length,
                first: v.nodes[0].target.join(' ')}));
}"""


@functools.cache
def axe_source() -> str:
    """The axe-core script, from the installed axe-playwright-python package."""
    from importlib.resources import files

    return files("axe_playwright_python").joinpath("axe.min.js").read_text(encoding="utf-8")


# Every figure the reader steps through: move its slider to another frame, wait for the image,
# and report whether the image changed, loaded, and the label followed; then move it back.
MOVE_SLIDERS = """async () => {
  const results = [];
  for (const player of document.querySelectorAll('.book-frames')) {
    const slider = player.querySelector('input[type=range]');
    const image = [...player.querySelectorAll('img')].find(i => i.getClientRects().length > 0);
    const label = player.querySelector('output');
    const start = slider.value, before = image.src, beforeLabel = label.textContent;
    slider.value = start === slider.max ? slider.min : slider.max;
    const loaded = new Promise(done => { image.onload = done; image.onerror = done; });
    slider.dispatchEvent(new Event('input', {bubbles: true}));
    await Promise.race([loaded, new Promise(done => setTimeout(done, 10000))]);
    results.push({
      figure: player.dataset.base,
      changed: image.src !== before,
      loaded: image.complete && image.naturalWidth > 0,
      relabelled: label.textContent !== beforeLabel,
    });
    slider.value = start;
    slider.dispatchEvent(new Event('input', {bubbles: true}));
  }
  return results;
}"""

#: The phone pass: a page must read at this width without scrolling sideways.
PHONE = {"width": 390, "height": 844}


FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})(?P<info>.*)$")


def runnable_blocks(markdown: str) -> list[str]:
    """The code of each runnable Python block of a page (a bare ``python`` fence), dedented as
    the site shows it inside an admonition or a list."""
    blocks, lines, i = [], markdown.split("\n"), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(match["ticks"]):
            j += 1
        if match["info"].strip() == "python":
            body = [line.removeprefix(match["indent"]) for line in lines[i + 1 : j]]
            blocks.append("\n".join(body).strip("\n"))
        i = j + 1
    return blocks


def page_source(docs_dir: Path | None, url_path: str) -> Path | None:
    """The Markdown file of a page under `docs_dir` (``/chapters/x/`` -> chapters/x.md)."""
    if docs_dir is None:
        return None
    stem = url_path.strip("/")
    for candidate in (f"{stem}.md", f"{stem}/index.md" if stem else "index.md"):
        if (docs_dir / candidate).is_file():
            return docs_dir / candidate
    return None


def default_docs(site_dir: Path) -> Path | None:
    """The Markdown sources of a site built by mkdocs in its project folder, if they are there."""
    project = site_dir.resolve().parent
    docs = project / "docs"
    return docs if (project / "mkdocs.yml").is_file() and docs.is_dir() else None


def copied_texts(page) -> list[str]:
    """Press the copy button of every Python block of the page (in folds and tabs too) and
    return what each put on the clipboard."""
    page.evaluate(
        "() => { document.querySelectorAll('details:not([open])').forEach(d => {"
        " d.open = true; d.dataset.bookClosed = ''; });"
        " const all = document.createElement('style'); all.id = 'book-all-tabs';"
        " all.textContent = '.tabbed-content > .tabbed-block { display: block !important; }';"
        " document.head.append(all); }"
    )  # folds and tabs opened to press the buttons inside, as they were again below
    buttons = page.locator(".language-python button[data-md-type=copy]")
    texts = []
    for k in range(buttons.count()):
        page.evaluate("() => navigator.clipboard.writeText('')")
        buttons.nth(k).click()
        page.wait_for_function(
            "async () => (await navigator.clipboard.readText()) !== ''", timeout=5_000
        )
        texts.append(page.evaluate("() => navigator.clipboard.readText()"))
    page.evaluate(
        "() => { document.querySelectorAll('details[data-book-closed]').forEach(d => {"
        " d.open = false; delete d.dataset.bookClosed; });"
        " document.getElementById('book-all-tabs').remove(); }"
    )
    return texts


def failed_request(request, page_url: str, report: PageReport) -> None:
    """Report a request that failed, except one the page itself gave up on.

    A request of the site's own that the page aborts (``net::ERR_ABORTED``: a slider swapped
    the image before it arrived, or the page closed) is not a broken page; a missing file still
    fails, as an HTTP 404, and a request to another host fails whatever its error.
    """
    origin = "/".join(page_url.split("/")[:3])  # http://127.0.0.1:PORT
    own = request.url.startswith(origin + "/")
    if own and request.failure == "net::ERR_ABORTED":
        return
    report.problems.append(f"request failed: {request.url} ({request.failure})")


def check_page(
    context,
    url: str,
    screenshot: Path | None,
    mode: str = "light",
    source: Path | None = None,
) -> PageReport:
    """Load one page and report what a reader would see broken.

    Args:
        context: A Playwright browser context (its colour scheme and viewport set).
        url: The page.
        screenshot: Where to save a full-page screenshot, or None.
        mode: ``"light"`` and ``"dark"`` (1280 px wide) check everything, light mode also how
            the page prints; ``"phone"`` (390 px) checks that the page does not scroll
            sideways (code blocks scroll inside their own box there).
        source: The page's Markdown, whose runnable blocks the copy buttons must copy (light
            mode), or None.

    Returns:
        The page's report.
    """
    report = PageReport(url)
    page = context.new_page()
    page.on(
        "console",
        lambda msg: msg.type == "error" and report.problems.append(f"console error: {msg.text}"),
    )
    page.on("pageerror", lambda exc: report.problems.append(f"uncaught exception: {exc}"))
    page.on("requestfailed", lambda req: failed_request(req, url, report))
    page.on(
        "response",
        lambda res: res.status >= 400 and report.problems.append(f"HTTP {res.status}: {res.url}"),
    )
    try:
        page.goto(url, wait_until="networkidle", timeout=30_000)
        # On a busy machine a long page can go quiet on the network before its parser reaches
        # the MathJax script at its end: wait for the load event, then for MathJax, and let
        # PAGE_STATE report it missing if it never comes.
        page.wait_for_load_state("load", timeout=60_000)
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        with suppress(PlaywrightTimeout):  # reported below: "MathJax did not load"
            page.wait_for_function(MATHJAX_READY, timeout=30_000)
        state = page.evaluate(PAGE_STATE)
        for image in state["images"]:
            if not image["ok"]:
                report.problems.append(f"image did not load: {image['src']}")
        if state["math"] and not state["mathjax"]:
            report.problems.append("page has math but MathJax did not load")
        for formula in state["math"]:
            if not formula["ok"]:
                why = f" (MathJax: {formula['error']})" if formula["error"] else ""
                report.problems.append(f"math not rendered: {formula['text']!r}{why}")
        if mode != "phone":
            for slider in page.evaluate(MOVE_SLIDERS):
                if not (slider["changed"] and slider["loaded"] and slider["relabelled"]):
                    report.problems.append(
                        f"the slider of {slider['figure']} did not work: {slider}"
                    )
            page.evaluate(axe_source())
            for violation in page.evaluate(AXE_RUN):
                report.problems.append(
                    "accessibility ({impact}): {id} on {count} element(s), first {first}".format(
                        **violation
                    )
                )
        if mode == "light" and source is not None:
            copied = {text.strip("\n") for text in copied_texts(page)}
            for block in runnable_blocks(source.read_text(encoding="utf-8")):
                if block not in copied:
                    first = block.split("\n")[0]
                    report.problems.append(
                        f"no copy button copies this block of {source.name} as the snippets "
                        f"test it: {first!r}"
                    )
        if mode == "phone":
            width = page.evaluate("() => document.documentElement.scrollWidth")
            if width > PHONE["width"] + 1:
                report.problems.append(f"the page scrolls sideways at 390 px ({width} px wide)")
        elif mode == "light" and "/chapters/" in url:
            page.emulate_media(media="print")
            printed = page.evaluate(PRINT_STATE)
            page.emulate_media(media="screen")
            if printed["closed"] or printed["shown"]:
                report.problems.append(
                    f"in print, {printed['closed']} folds stay closed and "
                    f"{printed['shown']} navigation elements are shown"
                )
        report.bytes = state["bytes"] if mode != "phone" else 0
        if "/chapters/" in url and report.bytes > MAX_CHAPTER_BYTES:
            report.problems.append(
                f"the page transfers {report.bytes / 1e6:.2f} MB, over the "
                f"{MAX_CHAPTER_BYTES / 1e6:.0f} MB a chapter may weigh"
            )
        for first_line in state["wide_code"] if mode != "phone" else []:
            report.problems.append(f"code scrolls sideways at this width: {first_line!r}")
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
    except Exception as exc:  # a timeout or a crash is a problem of the page, reported as such
        report.problems.append(f"could not check the page: {exc}")
    finally:
        page.close()
    return report


def check_search(context, base_url: str, query: str = "attention") -> list[str]:
    """Type a query into Material's search box and expect at least one result."""
    page = context.new_page()
    try:
        page.goto(base_url + "/", wait_until="networkidle", timeout=30_000)
        search_box = page.locator("input.md-search__input")
        search_box.click()
        page.keyboard.type(query, delay=20)  # key events, as a reader types: fill() sends none
        page.locator(".md-search-result__item").first.wait_for(timeout=15_000)
        count = page.locator(".md-search-result__item").count()
        return [] if count > 0 else [f"search for {query!r} found nothing"]
    except Exception as exc:
        return [f"search for {query!r} failed: {exc}"]
    finally:
        page.close()


def page_url(source: str) -> str:
    """The URL path of a page given by its source file, e.g. ``docs/chapters/x.md``.

    Args:
        source: ``docs/...`` path of a Markdown page or of the Quick tour's ``.py``, or a URL
            path (``/chapters/x/``) as it is.

    Returns:
        The page's URL path, with a trailing slash.
    """
    if source.startswith("/"):
        return source if source.endswith("/") else source + "/"
    path = source.removeprefix("./").removeprefix("docs/")
    for suffix in (".md", ".py", ".ipynb"):
        path = path.removesuffix(suffix)
    path = path.removesuffix("index").rstrip("/")
    return f"/{path}/" if path else "/"


def screenshot_name(url_path: str, scheme: str) -> str:
    """File name of a page's screenshot, e.g. ``chapters-bahdanau.light.png`` (or ``.dark``,
    ``.phone``)."""
    stem = url_path.strip("/").replace("/", "-") or "index"
    return f"{stem}.{scheme}.png"


def check_site(
    site_dir: Path,
    screenshots: Path | None = None,
    pages: list[str] | None = None,
    search: bool = True,
    dark: bool = True,
    docs_dir: Path | None = None,
) -> list[PageReport]:
    """Check every page of a built site in headless Chromium.

    Args:
        site_dir: The built site (``site/``).
        screenshots: Folder for full-page screenshots, or None for none.
        pages: URL paths to check; every page of the site by default.
        search: Also check that the search box finds "attention".
        dark: Also load each page in dark mode (and screenshot it). Every page is also
            loaded 390 px wide (``phone``), in light mode.
        docs_dir: The Markdown sources of the site, to check that the copy buttons copy the
            runnable blocks; None to skip that check.

    Returns:
        One report per page (and one for the search), each listing its problems.
    """
    from playwright.sync_api import sync_playwright

    pages = site_pages(site_dir) if pages is None else pages
    reports = []
    with serve(site_dir) as base_url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
        modes = ["light", "dark", "phone"] if dark else ["light", "phone"]
        for mode in modes:
            context = browser.new_context(
                color_scheme="dark" if mode == "dark" else "light",
                viewport=PHONE if mode == "phone" else {"width": 1280, "height": 900},
            )
            context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
            for path in pages:
                shot = screenshots / screenshot_name(path, mode) if screenshots else None
                source = page_source(docs_dir, path)
                report = check_page(context, base_url + path, shot, mode, source)
                report.url = f"{path} ({mode})"
                reports.append(report)
            if search and mode == "light":
                reports.append(PageReport("search", check_search(context, base_url)))
            context.close()
        browser.close()
    return reports


def _check_part(arguments: tuple) -> list[PageReport]:
    site_dir, screenshots, pages, search, dark, docs_dir = arguments
    return check_site(site_dir, screenshots, pages, search=search, dark=dark, docs_dir=docs_dir)


def check_site_in_parallel(
    site_dir: Path,
    screenshots: Path | None = None,
    pages: list[str] | None = None,
    search: bool = True,
    dark: bool = True,
    jobs: int = 1,
    docs_dir: Path | None = None,
) -> list[PageReport]:
    """`check_site` with the pages shared among `jobs` browsers in separate processes.

    Each process serves the site and drives its own Chromium; the reports come back in the
    order `check_site` would give them (all pages light, then dark, then phone).
    """
    pages = site_pages(site_dir) if pages is None else pages
    jobs = max(1, min(jobs, len(pages)))
    if jobs == 1:
        return check_site(site_dir, screenshots, pages, search=search, dark=dark, docs_dir=docs_dir)
    parts = [pages[k::jobs] for k in range(jobs)]
    arguments = [
        (site_dir, screenshots, part, search and k == 0, dark, docs_dir)
        for k, part in enumerate(parts)
    ]
    context = multiprocessing.get_context("spawn")
    with context.Pool(jobs) as pool:
        results = pool.map(_check_part, arguments)
    order = {path: k for k, path in enumerate(pages)}
    reports = [report for part in results for report in part]

    def position(report: PageReport) -> tuple[int, int]:
        path, _, mode = report.url.partition(" (")
        modes = ["light)", "dark)", "phone)"]
        return (modes.index(mode) if mode in modes else len(modes), order.get(path, len(order)))

    return sorted(reports, key=position)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns 1 when any page has a problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site folder")
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument("--no-dark", action="store_true", help="check light mode only")
    parser.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="the Markdown sources, whose runnable blocks the copy buttons must copy (default: "
        "the docs folder beside the site folder, when a mkdocs.yml is there too)",
    )
    parser.add_argument(
        "--page",
        action="append",
        help="check only this page (docs/chapters/x.md or /chapters/x/); repeat for more",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="browsers checking pages at once (default: one per core)",
    )
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"{args.site}/index.html not found: build the site first (make site)")
        return 1
    pages = None
    if args.page:
        pages = [page_url(page) for page in args.page]
        absent = [p for p in pages if p not in site_pages(args.site)]
        if absent:
            print(f"not pages of {args.site}: {', '.join(absent)}")
            return 1
    # The search box is the site's, not a page's: it is checked with the whole site.
    reports = check_site_in_parallel(
        args.site,
        args.screenshots,
        pages,
        search=pages is None,
        dark=not args.no_dark,
        jobs=args.jobs,
        docs_dir=args.docs or default_docs(args.site),
    )
    failed = [r for r in reports if r.problems]
    for report in reports:
        status = "FAIL" if report.problems else "ok"
        print(f"{status:4} {report.url}")
        for problem in report.problems:
            print(f"     - {problem}")
    weighed = [r for r in reports if r.bytes]
    if weighed:
        print("page weight (bytes transferred, first load, no cache):")
        for report in sorted(weighed, key=lambda r: -r.bytes):
            print(f"  {report.bytes / 1e6:6.2f} MB  {report.url}")
    if args.screenshots:
        print(f"screenshots of every page in {args.screenshots}/")
    print(f"browser: {len(reports) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
