"""What the browser check looks at on one page, in headless Chromium (`check_page`).

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
- in light mode, on a page with a live widget (`booktools.live.widgets`): when the widget loads
  before its button is pressed, downloads more than it may, or computes other tokens than
  PyTorch, or
  logits and attention weights farther from PyTorch's than the reference's tolerance, for any
  of its held-out cases, or, for the FlashAttention widget, when its WebGPU kernels differ from
  PyTorch's outputs (`booktools.live.check`; the widget is loaded before axe runs, so axe, the
  phone width and dark mode see it loaded);
- in light mode: on a chapter page that transfers more than 600 kB on a first load (served
  compressed, as GitHub Pages serves it; every page's weight is printed), or that prints with
  closed folds or its navigation, and when a runnable block of the page's Markdown source (the
  code the snippets test, each block alone) is not what some copy button copies (``--docs``,
  the Markdown folder, ``docs`` by default);
- at 390 px: on a page that scrolls sideways;
- in dark mode: when the palette toggle does not switch to dark.

`check_search` types "attention" into the search box and expects results. Which pages are
checked, in how many browsers, and the report are `booktools.browser.check`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from booktools.browser import scripts as js
from booktools.browser.serve import DESKTOP, PHONE
from booktools.live.check import LiveReport, check_live_widgets
from booktools.markdown import runnable_blocks

#: A chapter page may transfer at most this much on a first load, compressed (HTML, figures,
#: scripts, style sheets, fonts, search index).
MAX_CHAPTER_BYTES = 600_000
#: The ways a page is seen, each with its own report.
MODES = ("light", "dark", "phone")


@dataclass
class PageReport:
    """Everything found wrong on one page seen one way, and how many bytes it transferred."""

    url: str
    problems: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0  # how long checking the page took, every way (on its first report)
    live: list[LiveReport] = field(default_factory=list)  # its live widgets (light mode)
    # What the page requested while it was checked, every way (on its first report): the URL
    # path of each request to the site, the whole URL of any other (booktools.browser.verdicts).
    loaded: list[str] = field(default_factory=list)
    kept: bool = False  # a verdict kept from an earlier check of the same files, not checked now


def weight_problem(path: str, transferred: int) -> str | None:
    """What is wrong with a page's weight: a chapter over `MAX_CHAPTER_BYTES`, or None."""
    if "/chapters/" in path and transferred > MAX_CHAPTER_BYTES:
        return (
            f"the page transfers {transferred / 1e3:.0f} kB, over the "
            f"{MAX_CHAPTER_BYTES / 1e3:.0f} kB a chapter may weigh"
        )
    return None


@functools.cache
def axe_source() -> str:
    """The axe-core script, from the installed axe-playwright-python package."""
    from importlib.resources import files

    return files("axe_playwright_python").joinpath("axe.min.js").read_text(encoding="utf-8")


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


def report_errors(page, problem: Callable[[str], None]) -> None:
    """Report each console error, uncaught exception and HTTP error of `page` to `problem`."""
    page.on("console", lambda msg: msg.type == "error" and problem(f"console error: {msg.text}"))
    page.on("pageerror", lambda exc: problem(f"uncaught exception: {exc}"))
    page.on("response", lambda res: res.status >= 400 and problem(f"HTTP {res.status}: {res.url}"))


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
    page.evaluate(js.ANIMATIONS_SETTLED)


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
    report_errors(page, problem)
    page.on("requestfailed", lambda req: failed_request(req, url, reports[seen[0]]))

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
        if heavy := weight_problem(url, light.bytes):
            light.problems.append(heavy)
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


#: What readers search for, and where the first result must lead: a chapter, not the API page
#: of the same name (the API pages carry a lower search boost, `booktools.plugin.events`).
READER_QUERIES = {
    "attention": "/chapters/",
    "kv cache": "/chapters/",
    "rope": "/chapters/optimizations-positions/",
    "nadaraya": "/chapters/nadaraya-watson/",
    "vit": "/chapters/",
    "flash attention": "/chapters/flash-attention/",
}


def check_search(context, base_url: str, queries: dict[str, str] | None = None) -> list[str]:
    """Type each reader's query into Material's search box; its first result must be a chapter.

    It also fails on a console error, an uncaught exception or an HTTP error while the home
    page loads the search index and the sitemap and searches: those two files are the site's,
    and the verdicts that `booktools.browser.verdicts` keeps for pages do not depend on them.

    Args:
        context: A browser context.
        base_url: The site's address.
        queries: ``{query: part of the address the first result must have}``
            (`READER_QUERIES` by default).

    Returns:
        What failed, one line each.
    """
    problems: list[str] = []
    page = context.new_page()
    report_errors(page, problems.append)
    try:
        page.goto(base_url + "/", wait_until="networkidle", timeout=30_000)
        search_box = page.locator("input.md-search__input")
        for query, expected in (queries or READER_QUERIES).items():
            search_box.click()
            search_box.fill("")
            page.keyboard.type(query, delay=20)  # key events, as a reader types: fill() sends none
            first = page.locator(".md-search-result__item a").first
            first.wait_for(timeout=15_000)
            page.wait_for_timeout(1000)  # the worker answers each key; let the last answer land
            href = page.locator(".md-search-result__item a").first.get_attribute("href") or ""
            if expected not in href:
                problems.append(f"search for {query!r}: the first result is {href}, not {expected}")
    except Exception as exc:
        problems.append(f"search failed: {exc}")
    finally:
        page.close()
    return problems
