"""Open the built site in headless Chromium and check what a reader would see.

Usage: ``python -m booktools.browser_check site --screenshots screenshots``; add
``--page docs/chapters/x.md`` (several times if needed) to check only those pages.

Each page is loaded once, 1280 px wide in light mode, and looked at three ways: in light mode,
then 390 px wide (a phone, the viewport resized), then in dark mode (Material's palette toggle
pressed, as a reader does). Each way gets its own report. It fails:

- on a console error, an uncaught exception, a failed request or an HTTP error, an image that
  did not load (``naturalWidth == 0``), a formula that is not KaTeX's rendering (the build
  renders every formula: raw TeX or KaTeX's error box fails, with KaTeX's message), a formula
  without its MathML or without KaTeX's style sheet, a font that did not load, and a script
  that renders math in the page (pages load none), in every way;
- at 1280 px, in light and dark: on a code block that scrolls sideways, a serious or critical
  accessibility violation found by axe-core, and a figure the reader steps through whose
  slider does not change it;
- in light mode, on a page with a live widget (`booktools.live`): when the widget loads before
  its button is pressed, downloads more than it may, or computes other tokens than PyTorch, or
  logits and attention weights farther from PyTorch's than the reference's tolerance, for any
  of its held-out cases (`booktools.live_check`; the widget is loaded before axe runs, so axe,
  the phone width and dark mode see it loaded);
- in light mode: on a chapter page that transfers more than 600 kB on a first load (served
  compressed, as GitHub Pages serves it; every page's weight is printed), or that prints with
  closed folds or its navigation, and when a runnable block of the page's Markdown source (the
  code the snippets test, each block alone) is not what some copy button copies (``--docs``,
  the Markdown folder, ``docs`` by default);
- at 390 px: on a page that scrolls sideways;
- in dark mode: when the palette toggle does not switch to dark.

Then it types "attention" into the search box and expects results. With ``--screenshots`` it
saves full-page screenshots: of the chapters in light and dark mode when it checks the whole
site, of every way of the pages given with ``--page`` (``--all-screenshots``: every page, every
way). Pages are shared among one browser per core, each taking the next page when it is done.
It drives Debian's Chromium through Playwright (no browser download) and serves the site on a
local port.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from booktools import browser_scripts as js
from booktools.browsing import DESKTOP, PHONE, browsing, site_pages
from booktools.live_check import LiveReport, check_live_widgets
from booktools.markdown import runnable_blocks

#: A chapter page may transfer at most this much on a first load, compressed (HTML, figures,
#: scripts, style sheets, fonts, search index).
MAX_CHAPTER_BYTES = 600_000
MODES = ("light", "dark", "phone")
SEARCH = "search"

#: Which screenshots to take: of the page at `path`, seen in `mode`?
Shots = Callable[[str, str], bool]


def every_screenshot(path: str, mode: str) -> bool:
    """Every page, every way."""
    return True


def chapter_screenshots(path: str, mode: str) -> bool:
    """The chapters in light and dark mode: what a reviewer of the whole site looks at."""
    return "/chapters/" in path and mode in ("light", "dark")


@dataclass
class PageReport:
    """Everything found wrong on one page seen one way, and how many bytes it transferred."""

    url: str
    problems: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0  # how long checking the page took, every way (on its first report)
    live: list[LiveReport] = field(default_factory=list)  # its live widgets (light mode)


@functools.cache
def axe_source() -> str:
    """The axe-core script, from the installed axe-playwright-python package."""
    from importlib.resources import files

    return files("axe_playwright_python").joinpath("axe.min.js").read_text(encoding="utf-8")


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


def check_state(page, report: PageReport, desktop: bool) -> int:
    """Images and math, and at desktop width the code that scrolls sideways; returns the bytes."""
    state = page.evaluate(js.PAGE_STATE)
    for image in state["images"]:
        if not image["ok"]:
            report.problems.append(f"image did not load: {image['src']}")
    for script in state["math_scripts"]:
        report.problems.append(f"a math script is loaded (math is rendered at build): {script}")
    for formula in state["math"]:
        if not formula["rendered"]:
            why = f" (KaTeX: {formula['error']})" if formula["error"] else ""
            report.problems.append(f"math not rendered: {formula['text']!r}{why}")
        elif not formula["styled"]:
            report.problems.append(f"math without KaTeX's style sheet: {formula['text']!r}")
        elif not formula["mathml"]:
            report.problems.append(f"math without MathML for screen readers: {formula['text']!r}")
    for font in state["broken_fonts"]:
        report.problems.append(f"font did not load: {font}")
    for first_line in state["wide_code"] if desktop else []:
        report.problems.append(f"code scrolls sideways at this width: {first_line!r}")
    return state["bytes"]


def check_sliders_and_accessibility(page, report: PageReport) -> None:
    """Move every figure's slider, and run axe-core on the page as it is shown now."""
    for slider in page.evaluate(js.MOVE_SLIDERS):
        if not (slider["changed"] and slider["loaded"] and slider["relabelled"]):
            report.problems.append(f"the slider of {slider['figure']} did not work: {slider}")
    if not page.evaluate("() => Boolean(window.axe)"):
        page.evaluate(axe_source())
    for violation in page.evaluate(js.AXE_RUN):
        report.problems.append(
            "accessibility ({impact}): {id} on {count} element(s), first {first}".format(
                **violation
            )
        )


def check_copy_buttons(page, report: PageReport, source: Path) -> None:
    """Fail if a runnable block of the page's Markdown is not what some copy button copies.

    A page without runnable blocks (an API page, whose source listings have copy buttons by
    the hundred) has nothing to check, and its buttons are not pressed.
    """
    blocks = runnable_blocks(source.read_text(encoding="utf-8"))
    if not blocks:
        return
    copied = {text.strip("\n") for text in page.evaluate(js.COPY_BUTTONS)}
    for block in blocks:
        if block not in copied:
            first = block.split("\n")[0]
            report.problems.append(
                f"no copy button copies this block of {source.name} as the snippets test it: "
                f"{first!r}"
            )


def check_print(page, report: PageReport) -> None:
    """Fail if, in print, folds stay closed or the navigation is shown."""
    page.emulate_media(media="print")
    printed = page.evaluate(js.PRINT_STATE)
    page.emulate_media(media="screen")
    if printed["closed"] or printed["shown"]:
        report.problems.append(
            f"in print, {printed['closed']} folds stay closed and "
            f"{printed['shown']} navigation elements are shown"
        )


def switch_to_dark(page) -> None:
    """Show the page in dark mode: the system's scheme, and Material's toggle pressed.

    Raises:
        PlaywrightTimeout: If the toggle does not switch Material to its dark palette.
    """
    page.emulate_media(color_scheme="dark")
    palette = page.evaluate(js.DARK_PALETTE)
    if palette is not None:
        page.click(f'label[for="{palette}"]', timeout=10_000)
        page.wait_for_function(js.IS_DARK, timeout=10_000)
    page.wait_for_function(js.IMAGES_SETTLED, timeout=15_000)


def check_page(
    context,
    url: str,
    dark: bool = True,
    source: Path | None = None,
    screenshot: Callable[[str], Path | None] = lambda mode: None,
) -> list[PageReport]:
    """Load one page and report what a reader would see broken, in each way it is seen.

    Args:
        context: A Playwright browser context (light, 1280 px wide, clipboard allowed).
        url: The page.
        dark: Also look at it in dark mode.
        source: The page's Markdown, whose runnable blocks the copy buttons must copy, or None.
        screenshot: Where to save a full-page screenshot of each way (``"light"``,
            ``"dark"``, ``"phone"``), or None for none.

    Returns:
        The page's reports, light, then dark (if asked), then phone.
    """
    reports = {mode: PageReport(url) for mode in MODES if dark or mode != "dark"}
    seen = ["light"]  # the way the page is seen now

    def problem(text: str) -> None:
        reports[seen[0]].problems.append(text)

    page = context.new_page()
    page.on("console", lambda msg: msg.type == "error" and problem(f"console error: {msg.text}"))
    page.on("pageerror", lambda exc: problem(f"uncaught exception: {exc}"))
    page.on("requestfailed", lambda req: failed_request(req, url, reports[seen[0]]))
    page.on("response", lambda res: res.status >= 400 and problem(f"HTTP {res.status}: {res.url}"))

    def shoot(mode: str) -> None:
        path = screenshot(mode)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path), full_page=True)

    try:
        page.goto(url, wait_until="networkidle", timeout=30_000)
        # On a busy machine a long page can go quiet on the network before its parser reaches
        # its end: wait for the load event too.
        page.wait_for_load_state("load", timeout=60_000)
        light = reports["light"]
        light.bytes = check_state(page, light, desktop=True)
        if "/chapters/" in url and light.bytes > MAX_CHAPTER_BYTES:
            light.problems.append(
                f"the page transfers {light.bytes / 1e3:.0f} kB, over the "
                f"{MAX_CHAPTER_BYTES / 1e3:.0f} kB a chapter may weigh"
            )
        light.live = check_live_widgets(page, light.problems)
        check_sliders_and_accessibility(page, light)
        if "/chapters/" in url:
            check_print(page, light)
        shoot("light")

        seen[0] = "phone"  # code blocks scroll inside their own box there
        page.set_viewport_size(PHONE)
        check_state(page, reports["phone"], desktop=False)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > PHONE["width"] + 1:
            problem(f"the page scrolls sideways at 390 px ({width} px wide)")
        shoot("phone")
        page.set_viewport_size(DESKTOP)

        if dark:
            seen[0] = "dark"
            switch_to_dark(page)
            check_state(page, reports["dark"], desktop=True)
            check_sliders_and_accessibility(page, reports["dark"])
            shoot("dark")
        # Last: Material shows a "Copied" message for a while after each press, which the other
        # checks would see (axe reports its contrast while it fades).
        if source is not None:
            check_copy_buttons(page, reports[seen[0]], source)
    except Exception as exc:  # a timeout or a crash is a problem of the page, reported as such
        problem(f"could not check the page: {exc}")
        ways = [way for way in ("light", "phone", "dark") if way in reports]  # the order seen
        for way in ways[ways.index(seen[0]) + 1 :]:
            reports[way].problems.append("not checked: the page failed before (see above)")
    finally:
        page.close()
    return list(reports.values())


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
    """File name of a page's screenshot: ``chapters-bahdanau.light.png`` (``.dark``, ``.phone``)."""
    stem = url_path.strip("/").replace("/", "-") or "index"
    return f"{stem}.{scheme}.png"


@dataclass(frozen=True)
class Options:
    """How to check the pages of a site (the same for every browser that checks some)."""

    site_dir: Path
    screenshots: Path | None = None
    dark: bool = True
    docs_dir: Path | None = None
    shots: Shots = every_screenshot


def check_one(context_of, base_url: str, path: str, options: Options) -> list[PageReport]:
    """The reports of one page (or of the search box, for `SEARCH`), in a fresh context."""
    start = time.perf_counter()
    context = context_of()
    try:
        if path == SEARCH:
            return [PageReport(SEARCH, check_search(context, base_url))]

        def screenshot(mode: str) -> Path | None:
            if options.screenshots is None or not options.shots(path, mode):
                return None
            return options.screenshots / screenshot_name(path, mode)

        source = page_source(options.docs_dir, path)
        reports = check_page(context, base_url + path, options.dark, source, screenshot)
        ways = [mode for mode in MODES if options.dark or mode != "dark"]
        for report, mode in zip(reports, ways, strict=True):
            report.url = f"{path} ({mode})"
        reports[0].seconds = time.perf_counter() - start
        return reports
    finally:
        context.close()


def in_report_order(reports: list[PageReport], pages: list[str]) -> list[PageReport]:
    """Reports in the order of the output: light, dark, phone, each in `pages` order; search."""
    order = {path: k for k, path in enumerate(pages)}

    def position(report: PageReport) -> tuple[int, int]:
        path, _, mode = report.url.partition(" (")
        modes = [f"{m})" for m in MODES]
        return (modes.index(mode) if mode in modes else len(modes), order.get(path, len(order)))

    return sorted(reports, key=position)


def check_site(
    site_dir: Path,
    screenshots: Path | None = None,
    pages: list[str] | None = None,
    search: bool = True,
    dark: bool = True,
    docs_dir: Path | None = None,
    shots: Shots = every_screenshot,
    browser=None,
) -> list[PageReport]:
    """Check pages of a built site in one headless Chromium.

    Args:
        site_dir: The built site (``site/``).
        screenshots: Folder for full-page screenshots, or None for none.
        pages: URL paths to check; every page of the site by default.
        search: Also check that the search box finds "attention".
        dark: Also look at each page in dark mode. Every page is also looked at 390 px wide
            (``phone``), in light mode.
        docs_dir: The Markdown sources of the site, to check that the copy buttons copy the
            runnable blocks; None to skip that check.
        shots: Which screenshots to take (every page, every way, by default).
        browser: A Playwright browser to use, or None to launch one.

    Returns:
        One report per page and way (and one for the search), each listing its problems.
    """
    pages = site_pages(site_dir) if pages is None else pages
    options = Options(site_dir, screenshots, dark, docs_dir, shots)
    reports = []
    with browsing(site_dir, browser) as (new_context, base_url):
        for path in [*pages, SEARCH] if search else pages:
            reports += check_one(new_context, base_url, path, options)
    return in_report_order(reports, pages)


def _browser_worker(options: Options, tasks, results) -> None:
    """One browser of `check_site_in_parallel`: check pages from `tasks` until a None."""
    with browsing(options.site_dir) as (new_context, base_url):
        while (path := tasks.get()) is not None:
            results.put(check_one(new_context, base_url, path, options))


def check_site_in_parallel(
    site_dir: Path,
    screenshots: Path | None = None,
    pages: list[str] | None = None,
    search: bool = True,
    dark: bool = True,
    jobs: int = 1,
    docs_dir: Path | None = None,
    shots: Shots = every_screenshot,
) -> list[PageReport]:
    """`check_site` with the pages shared among `jobs` browsers in separate processes.

    Each process serves the site and drives its own Chromium, and takes the next page when it
    is done with one, the largest pages first; the reports come back in the order
    `check_site` gives them.
    """
    pages = site_pages(site_dir) if pages is None else pages
    jobs = max(1, min(jobs, len(pages)))
    if jobs == 1:
        return check_site(site_dir, screenshots, pages, search, dark, docs_dir, shots)
    options = Options(site_dir, screenshots, dark, docs_dir, shots)
    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    work = sorted(pages, key=lambda path: -_size(site_dir, path))
    for path in [*work, SEARCH] if search else work:
        tasks.put(path)
    for _ in range(jobs):
        tasks.put(None)
    workers = [
        context.Process(target=_browser_worker, args=(options, tasks, results)) for _ in range(jobs)
    ]
    for worker in workers:
        worker.start()
    reports: list[PageReport] = []
    expected = len(work) + search
    while expected:
        try:
            reports += results.get(timeout=5)
            expected -= 1
        except queue.Empty:
            if not any(worker.is_alive() for worker in workers):
                reports.append(PageReport("browser", [f"{expected} pages were never checked"]))
                break
    for worker in workers:
        worker.join()
    return in_report_order(reports, pages)


def _size(site_dir: Path, path: str) -> int:
    page = site_dir / path.strip("/") / "index.html"
    return page.stat().st_size if page.is_file() else 0


def main(argv: list[str] | None = None, browser=None) -> int:
    """Command-line entry point.

    Args:
        argv: The command line's arguments.
        browser: A Playwright browser to check with (tests share one), or None.

    Returns:
        1 when any page has a problem, else 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site folder")
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument(
        "--all-screenshots",
        action="store_true",
        help="screenshot every page in every way (default: the chapters in light and dark "
        "mode, or every way of the pages given with --page)",
    )
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
    shots = every_screenshot if args.all_screenshots or pages else chapter_screenshots
    docs_dir = args.docs or default_docs(args.site)
    # The search box is the site's, not a page's: it is checked with the whole site.
    if browser is not None:
        reports = check_site(
            args.site, args.screenshots, pages, pages is None, not args.no_dark, docs_dir, shots,
            browser=browser,
        )  # fmt: skip
    else:
        reports = check_site_in_parallel(
            args.site, args.screenshots, pages, pages is None, not args.no_dark, args.jobs,
            docs_dir, shots,
        )  # fmt: skip
    failed = [r for r in reports if r.problems]
    for report in reports:
        status = "FAIL" if report.problems else "ok"
        print(f"{status:4} {report.url}")
        for problem in report.problems:
            print(f"     - {problem}")
    weighed = [r for r in reports if r.bytes]
    if weighed:
        print("page weight (bytes transferred, first load, no cache, compressed):")
        for report in sorted(weighed, key=lambda r: -r.bytes):
            print(f"  {report.bytes / 1e3:6.0f} kB  {report.url}")
    live = [widget for report in reports for widget in report.live]
    if live:
        print("live widgets (this browser, on this machine):")
        for widget in live:
            print(f"  {widget.summary()}")
    timed = sorted((r for r in reports if r.seconds), key=lambda r: -r.seconds)
    if timed:
        total = sum(r.seconds for r in timed)
        print(f"time: {total:.0f} s of checking pages; the slowest (every way, one load):")
        for report in timed[:5]:
            print(f"  {report.seconds:6.1f} s  {report.url.partition(' (')[0]}")
    if args.screenshots:
        print(f"screenshots in {args.screenshots}/")
    print(f"browser: {len(reports) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
