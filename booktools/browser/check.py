"""Open the built site in headless Chromium and check what a reader would see.

Usage: ``python -m booktools.browser.check site --screenshots screenshots``; add
``--page docs/chapters/x.md`` (several times if needed) to check only those pages.

Each page is loaded once and looked at in light mode at 1280 px, 390 px wide (a phone), and in
dark mode; `booktools.browser.page` says what fails in each way (console errors, failed
requests, images, math, fonts, code that scrolls sideways, axe-core's accessibility audit, the
figures' sliders, the live widgets against PyTorch, the page's weight, print, the copy
buttons). Then it types what readers search for into the search box and expects a chapter
first (`booktools.browser.page.READER_QUERIES`). With
``--screenshots`` it saves full-page screenshots: of the chapters in light and dark mode when it
checks the whole site, of every way of the pages given with ``--page`` (``--all-screenshots``:
every page, every way). Pages are shared among one browser per core, each taking the next page
when it is done. It drives Debian's Chromium through Playwright (no browser download) and
serves the site on a local port. With ``--verdicts DIR`` (as `make test` runs it) a page that
passed before, and loads the same files now, is not loaded again: `booktools.browser.verdicts`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from booktools.browser.page import MODES, PageReport, check_page, check_search
from booktools.browser.serve import browsing, site_pages
from booktools.browser.verdicts import Verdicts

SEARCH = "search"

#: Which screenshots to take: of the page at `path`, seen in `mode`?
Shots = Callable[[str, str], bool]


def every_screenshot(path: str, mode: str) -> bool:
    """Every page, every way."""
    return True


def chapter_screenshots(path: str, mode: str) -> bool:
    """The chapters in light and dark mode: what a reviewer of the whole site looks at."""
    return "/chapters/" in path and mode in ("light", "dark")


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
    loaded: list[str] = []  # what the page requests, for booktools.browser.verdicts
    own = base_url + "/"
    context.on(
        "request",
        lambda request: loaded.append(
            request.url[len(base_url) :] if request.url.startswith(own) else request.url
        ),
    )
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
        reports[0].loaded = loaded
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
        "--verdicts",
        type=Path,
        default=None,
        help="keep the verdict of each page that passes in this folder, and reuse it while "
        "every file the page loads is unchanged (booktools.browser.verdicts); default: none",
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
    search = pages is None  # the search box is the site's, not a page's: checked with the site
    pages = site_pages(args.site) if pages is None else pages
    dark = not args.no_dark
    verdicts = Verdicts(args.verdicts, args.site, docs_dir, dark) if args.verdicts else None
    ways = [mode for mode in MODES if dark or mode != "dark"]

    def shots_of(path: str) -> dict[str, Path]:  # the screenshots the check takes of a page
        if args.screenshots is None:
            return {}
        folder = args.screenshots
        return {mode: folder / screenshot_name(path, mode) for mode in ways if shots(path, mode)}

    kept: list[PageReport] = []
    unchanged: set[str] = set()
    for path in pages if verdicts else []:
        reused = verdicts.reuse(path, page_source(docs_dir, path), shots_of(path))
        if reused is not None:
            kept += reused
            unchanged.add(path)
    to_check = [path for path in pages if path not in unchanged]
    started = time.perf_counter()
    if not to_check and not search:
        reports = []
    elif browser is not None:
        reports = check_site(
            args.site, args.screenshots, to_check, search, dark, docs_dir, shots, browser=browser
        )
    else:
        reports = check_site_in_parallel(
            args.site, args.screenshots, to_check, search, dark, args.jobs, docs_dir, shots
        )
    seconds = time.perf_counter() - started
    if verdicts:
        for path in to_check:
            of_page = [r for r in reports if r.url.partition(" (")[0] == path]
            verdicts.keep(path, of_page, page_source(docs_dir, path), shots_of(path))
        if search:  # the whole site was checked: forget the pages it no longer has
            verdicts.entries = {k: v for k, v in verdicts.entries.items() if k in pages}
        verdicts.save()
    reports = in_report_order(kept + reports, pages)
    failed = [r for r in reports if r.problems]
    for report in reports:
        status = "FAIL" if report.problems else "ok"
        print(
            f"{status:4} {report.url}{' (kept: nothing it loads changed)' if report.kept else ''}"
        )
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
    if verdicts:
        print(
            f"verdicts: {len(unchanged)} of {len(pages)} pages kept from an earlier check of "
            f"the same files ({args.verdicts}/); {len(to_check)} checked in {seconds:.0f} s"
        )
    print(f"browser: {len(reports) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
