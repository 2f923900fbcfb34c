"""A page's kept verdict is reused only while everything the page loads is what it was.

Each test checks tiny pages with the real checker in headless Chromium (`main`, with
``--verdicts``), changes one thing, and checks again: a page whose files did not change is
not loaded a second time (its reports say ``kept``), and a page that loads a changed file, or
whose check changed, is loaded and judged again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_sites import PAGE_SOURCE, PIXEL, code_block, live_site, write_page

import booktools
from booktools.browser import verdicts as browser_verdicts
from booktools.browser.check import main
from booktools.browser.serve import launch
from booktools.browser.verdicts import Verdicts, checker_files, site_file
from booktools.plugin import katex

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (make chromium)"
)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        shared = launch(playwright)
        yield shared
        shared.close()


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A home page and two pages, each with its own image; the verdicts go beside the site."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(katex.installed(), site / "katex")  # the style sheet write_page links
    write_page(site, ".", "<main><p>home</p></main>")
    for name in ("one", "two"):
        (site / f"{name}.png").write_bytes(PIXEL)
        write_page(site, f"notes/{name}", f'<main><img src="/{name}.png" alt="{name}"></main>')
    return site


@pytest.fixture
def run(browser, capsys):
    """Check pages with verdicts kept beside the site: page -> (kept, problems), from output."""

    def checked(site: Path, *pages: str, **options) -> dict[str, tuple[bool, list[str]]]:
        argv = [str(site), "--verdicts", str(site.parent / "verdicts"), "--no-dark"]
        for name, value in options.items():
            argv += [f"--{name}", str(value)]
        for page in pages:
            argv += ["--page", page]
        capsys.readouterr()
        main(argv, browser)
        lines = capsys.readouterr().out.splitlines()
        seen = {}  # "path (mode)" -> (kept, problems), as main printed them
        for line in lines:
            if line.startswith(("ok ", "FAIL ")):
                url = line.split(maxsplit=1)[1].removesuffix(" (kept: nothing it loads changed)")
                seen[url] = (line.endswith("(kept: nothing it loads changed)"), [])
            elif line.startswith("     - "):
                seen[url][1].append(line.removeprefix("     - "))
        result = {}
        for page in pages:
            own = [way for url, way in seen.items() if url.startswith(f"{page} (")]
            assert own, "\n".join(lines)  # the page was reported, kept or checked
            result[page] = (all(kept for kept, _ in own), [p for _, found in own for p in found])
        return result

    return checked


def test_an_unchanged_page_is_kept_and_a_page_whose_image_changed_is_checked(site, run):
    first = run(site, "/notes/one/", "/notes/two/")
    assert first == {"/notes/one/": (False, []), "/notes/two/": (False, [])}
    assert run(site, "/notes/one/", "/notes/two/") == {
        "/notes/one/": (True, []),
        "/notes/two/": (True, []),
    }
    (site / "two.png").write_bytes(b"not a PNG any more")
    again = run(site, "/notes/one/", "/notes/two/")
    assert again["/notes/one/"] == (True, [])
    kept, failed = again["/notes/two/"]
    assert not kept and any("image did not load" in problem for problem in failed), again


def test_a_failing_page_is_never_kept(site, run):
    write_page(site, "notes/broken", '<main><img src="/missing.png" alt="gone"></main>')
    for _ in range(2):
        kept, failed = run(site, "/notes/broken/")["/notes/broken/"]
        assert not kept and failed


def test_a_file_the_page_fetches_from_a_script_is_part_of_its_key(site, run):
    (site / "data.json").write_text('{"ok": true}')
    script = (
        "<script>fetch('/data.json').then(r => r.json())"
        ".then(d => { if (!d.ok) throw new Error('the data says no'); })</script>"
    )
    write_page(site, "notes/fetches", f"<main><p>data</p></main>{script}")
    assert run(site, "/notes/fetches/")["/notes/fetches/"] == (False, [])
    assert run(site, "/notes/fetches/")["/notes/fetches/"] == (True, [])
    (site / "data.json").write_text('{"ok": false}')
    kept, failed = run(site, "/notes/fetches/")["/notes/fetches/"]
    assert not kept and any("the data says no" in problem for problem in failed), failed


def test_a_new_checker_checks_every_page_again(site, run, monkeypatch):
    run(site, "/notes/one/")
    assert run(site, "/notes/one/")["/notes/one/"] == (True, [])
    monkeypatch.setattr(browser_verdicts, "checker_key", lambda dark: "another checker")
    assert run(site, "/notes/one/")["/notes/one/"] == (False, [])


def test_an_edited_markdown_source_checks_the_copy_buttons_again(site, run, tmp_path):
    docs = tmp_path / "docs"
    (docs / "notes").mkdir(parents=True)
    (docs / "notes" / "x.md").write_text(PAGE_SOURCE)
    solution = f"<details><summary>A solution</summary>{code_block('print(2)')}</details>"
    write_page(site, "notes/x", "<main>" + code_block("print(1)") + solution + "</main>")
    assert run(site, "/notes/x/", docs=docs)["/notes/x/"] == (False, [])
    assert run(site, "/notes/x/", docs=docs)["/notes/x/"] == (True, [])
    (docs / "notes" / "x.md").write_text(PAGE_SOURCE.replace("print(1)", "print(3)"))
    kept, failed = run(site, "/notes/x/", docs=docs)["/notes/x/"]
    assert not kept and failed == [
        "no copy button copies this block of x.md as the snippets test it: 'print(3)'"
    ]


def test_a_kept_chapter_is_weighed_with_the_search_index_of_today(site, run):
    """The search index is not in a page's key, but its weight is: a grown index can fail it."""
    import base64
    import random

    index = site / "search" / "search_index.json"
    index.parent.mkdir()
    index.write_text('{"docs": []}')
    write_page(
        site,
        "chapters/a",
        "<main><p>a</p></main><script>fetch('/search/search_index.json')</script>",
    )
    assert run(site, "/chapters/a/")["/chapters/a/"] == (False, [])
    noise = base64.b64encode(random.Random(0).randbytes(600_000)).decode()  # compresses to ~610 kB
    index.write_text(f'{{"docs": [], "noise": "{noise}"}}')
    kept, failed = run(site, "/chapters/a/")["/chapters/a/"]
    assert kept, "the search index alone does not make a page load again"
    assert len(failed) == 1 and "over the 600 kB a chapter may weigh" in failed[0], failed


def test_a_kept_page_brings_its_screenshots(site, run, tmp_path):
    run(site, "/notes/one/", screenshots=tmp_path / "first")
    run(site, "/notes/one/", screenshots=tmp_path / "second")
    for mode in ("light", "phone"):
        name = f"notes-one.{mode}.png"
        assert (tmp_path / "second" / name).read_bytes() == (tmp_path / "first" / name).read_bytes()


def test_a_broken_live_widget_script_is_loaded_and_fails_again(site, run, live_models):
    path = live_site(site, live_models)
    assert run(site, path)[path] == (False, [])
    assert run(site, path)[path] == (True, [])
    live_site(site, live_models, broken="missing scale")
    kept, failed = run(site, path)[path]
    assert not kept and any("over the tolerance" in problem for problem in failed), failed


@pytest.mark.parametrize(
    ("request_", "file"),
    [
        ("/", "index.html"),
        ("/chapters/x/", "chapters/x/index.html"),
        ("/figures/a%20b.svg?v=1", "figures/a b.svg"),
        ("data:image/png;base64,AAAA", None),
    ],
)
def test_a_request_maps_to_the_file_the_server_sends(tmp_path, request_, file):
    assert site_file(request_, tmp_path) == file


def test_a_page_that_requested_another_host_is_not_kept(tmp_path):
    with pytest.raises(ValueError, match="another host"):
        site_file("https://example.com/x.js", tmp_path)
    verdicts = Verdicts(tmp_path / "verdicts", tmp_path, dark=False)
    write_page(tmp_path, ".", "<p>a page</p>")
    from booktools.browser.page import PageReport

    report = PageReport("/ (light)", loaded=["/", "https://example.com/x.js"])
    verdicts.keep("/", [report], None, {})
    assert verdicts.entries == {}
    report.loaded = ["/"]
    verdicts.keep("/", [report], None, {})
    assert list(verdicts.entries) == ["/"]


def test_the_checker_is_the_code_the_check_runs_and_not_the_rest_of_the_tooling():
    root = Path(booktools.__file__).parent
    names = {".".join(path.relative_to(root).with_suffix("").parts) for path in checker_files()}
    # What it imports at any depth: the page's checks, their scripts, the live widgets' check
    # and the limits it reads from booktools.live.widgets, the Markdown reader of the copy buttons.
    for module in ("browser.check", "browser.page", "browser.scripts", "browser.serve",
                   "browser.verdicts", "live.check", "live.widgets", "markdown",
                   "__init__"):  # fmt: skip
        assert module in names, module
    # What builds the pages is judged through the pages: an edit there keeps the verdicts.
    for module in ("build.figures", "build.plugin", "build.notebooks", "build.listings"):
        assert module not in names, module
