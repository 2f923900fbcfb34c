"""The browser check must catch what a reader would see broken.

These tests build tiny sites in a temporary folder, one healthy and one deliberately broken,
and run the real checker on them in headless Chromium (one browser for the whole file: starting
Chromium takes longer than checking a tiny page).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from browser_sites import (
    BROKEN,
    KATEX_CSS,
    LIVE_JS,
    PAGE_SOURCE,
    PIXEL,
    code_block,
    live_site,
    rendered,
    write_page,
)

from booktools.browser.check import (
    check_site,
    check_site_in_parallel,
    default_docs,
    main,
    page_source,
    page_url,
)
from booktools.browser.serve import launch, site_pages
from booktools.markdown import runnable_blocks
from booktools.plugin import katex

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="needs Debian's chromium (make chromium)"
)

_SHARED = []  # the browser of this file's tests, while they run


@pytest.fixture(scope="module", autouse=True)
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        shared = launch(playwright)
        _SHARED.append(shared)
        yield shared
        _SHARED.clear()
        shared.close()


def check(site: Path, **options):
    """`check_site` in this file's browser."""
    return check_site(site, browser=_SHARED[0], **options)


@pytest.fixture
def tiny_site(tmp_path: Path) -> Path:
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    image = '<img src="/pixel.png" alt="a pixel">'
    shutil.copytree(katex.installed(), tmp_path / "katex")
    write_page(tmp_path, ".", f"{image}<p>Attention {rendered('a_{ij} = x^2')}</p>")
    return tmp_path


def problems_of(site: Path, path: str) -> list[str]:
    """Problems of one page, light mode and phone width together."""
    reports = check(site, pages=[path], search=False, dark=False)
    return [problem for report in reports for problem in report.problems]


def test_a_healthy_page_passes(tiny_site: Path):
    assert problems_of(tiny_site, "/") == []


def test_a_broken_image_fails(tiny_site: Path):
    write_page(tiny_site, "broken-image", '<img src="/missing.svg">')
    found = problems_of(tiny_site, "/broken-image/")
    assert any("image did not load" in p for p in found), found
    assert any("HTTP 404" in p for p in found), found


def test_unrendered_math_fails(tiny_site: Path):
    write_page(tiny_site, "raw-math", '<span class="arithmatex">\\(x^2\\)</span>')
    found = problems_of(tiny_site, "/raw-math/")
    assert any("math not rendered" in p for p in found), found


def test_katex_error_box_fails_with_katex_message(tiny_site: Path):
    # What KaTeX draws for a formula it cannot parse when it is told not to throw.
    message = "KaTeX parse error: Undefined control sequence: \\nope"
    box = f'<span class="katex-error" title="{message}" style="color:#cc0000">\\nope</span>'
    write_page(tiny_site, "tex-error", f'<span class="arithmatex">{box}</span>')
    found = problems_of(tiny_site, "/tex-error/")
    assert any("math not rendered" in p and f"(KaTeX: {message})" in p for p in found), found


def test_math_without_katex_style_sheet_fails(tiny_site: Path):
    write_page(tiny_site, "no-css", f"<p>{rendered('x^2')}</p>")
    page = tiny_site / "no-css" / "index.html"
    page.write_text(page.read_text().replace(KATEX_CSS, ""))
    found = problems_of(tiny_site, "/no-css/")
    assert any("math without KaTeX's style sheet: 'x^2'" in p for p in found), found


def test_math_without_mathml_fails(tiny_site: Path):
    html_only = katex.renderer().render("y", False).split('<span class="katex-html"')
    without = html_only[0].split('<span class="katex-mathml">')[0] + '<span class="katex-html"'
    write_page(tiny_site, "no-mathml", f'<span class="arithmatex">{without}{html_only[1]}</span>')
    found = problems_of(tiny_site, "/no-mathml/")
    assert any("math without" in p for p in found), found


def test_a_font_that_does_not_load_fails(tiny_site: Path):
    (tiny_site / "katex" / "fonts" / "KaTeX_Main-Regular.woff2").unlink()
    found = problems_of(tiny_site, "/")
    assert any("KaTeX_Main-Regular.woff2" in p for p in found), found  # HTTP 404


def test_a_math_script_fails(tiny_site: Path):
    (tiny_site / "tex-mml-chtml.js").write_text("window.MathJax = {};")
    write_page(tiny_site, "script", "<script src='/tex-mml-chtml.js'></script><p>x</p>")
    found = problems_of(tiny_site, "/script/")
    assert any("a math script is loaded" in p and "window.MathJax" in p for p in found), found


def test_code_that_scrolls_sideways_fails(tiny_site: Path):
    long_line = "x = " + "1 + " * 400 + "1"
    style = "<style>pre { max-width: 300px; overflow-x: auto; }</style>"
    write_page(tiny_site, "wide", f"{style}<pre><code>{long_line}\nshort</code></pre>")
    found = problems_of(tiny_site, "/wide/")
    assert any("code scrolls sideways" in p and "x = 1 + 1" in p for p in found), found
    write_page(tiny_site, "narrow", f"{style}<pre><code>x = 1\ny = 2</code></pre>")
    assert problems_of(tiny_site, "/narrow/") == []
    # Inside a closed fold too: a reader opens it.
    folded = f"<details><summary>Code</summary><pre><code>{long_line}</code></pre></details>"
    write_page(tiny_site, "folded", f"{style}{folded}")
    assert any("code scrolls sideways" in p for p in problems_of(tiny_site, "/folded/"))


def test_a_heavy_chapter_page_fails_and_every_page_is_weighed(tiny_site: Path):
    (tiny_site / "big.bin").write_bytes(b"0" * 610_000)
    fetch = "<script>fetch('/big.bin').then(r => r.text())</script>"
    write_page(tiny_site, "chapters/heavy", fetch)
    report = check(tiny_site, pages=["/chapters/heavy/"], search=False, dark=False)[0]
    assert report.bytes > 600_000
    assert any("over the 600 kB a chapter may weigh" in p for p in report.problems)
    light = check(tiny_site, pages=["/"], search=False, dark=False)[0]
    assert 0 < light.bytes < 100_000 and light.problems == []  # KaTeX's style sheet and fonts


def test_a_page_wider_than_a_phone_fails_at_390_px(tiny_site: Path):
    write_page(tiny_site, "wide-page", "<div style='width: 900px'>a wide table</div>")
    reports = check(tiny_site, pages=["/wide-page/"], search=False, dark=False)
    light, phone = reports
    assert light.problems == []  # 900 px fit at 1280
    assert any("scrolls sideways at 390 px" in p for p in phone.problems), phone.problems


def test_a_chapter_prints_with_its_folds_open(tiny_site: Path):
    fold = "<details><summary>Solution</summary><p>42</p></details>"
    opener = (
        "<script>addEventListener('beforeprint', () =>"
        " document.querySelectorAll('details').forEach(d => { d.open = true; }))</script>"
    )
    write_page(tiny_site, "chapters/folded", fold)
    write_page(tiny_site, "chapters/opens", fold + opener)
    assert any("folds stay closed" in p for p in problems_of(tiny_site, "/chapters/folded/"))
    assert problems_of(tiny_site, "/chapters/opens/") == []


def test_an_accessibility_violation_fails(tiny_site: Path):
    faint = "<p style='color: #bbb; background: #fff'>grey on white</p>"
    write_page(tiny_site, "faint", f"<main>{faint}</main>")
    found = problems_of(tiny_site, "/faint/")
    assert any("accessibility (serious): color-contrast" in p for p in found), found
    clear = "<p style='color: #222; background: #fff'>dark on white</p>"
    write_page(tiny_site, "clear", f"<main>{clear}</main>")
    assert not any("color-contrast" in p for p in problems_of(tiny_site, "/clear/"))


def test_a_faint_style_of_code_fails_however_rare_or_common_it_is(tiny_site: Path):
    # In highlighted code, axe checks the contrast of one token of each style: a faint style
    # fails whether it is the only token of the block or one of hundreds.
    def block(spans: str) -> str:
        return f"<main><div class='highlight'><pre><code>{spans}</code></pre></div></main>"

    dark = "<span style='color: #222'>dark</span>\n<span style='color: #222'>=</span>\n"
    faint = "<span style='color: #ccc'>+</span>\n<span style='color: #ccc'>faint</span>\n"
    write_page(tiny_site, "clear-code", block(dark * 300))
    assert not any("color-contrast" in p for p in problems_of(tiny_site, "/clear-code/"))
    for name, spans in (("one-faint", dark * 300 + faint), ("all-faint", faint * 300)):
        write_page(tiny_site, name, block(spans))
        found = problems_of(tiny_site, f"/{name}/")
        assert any("accessibility (serious): color-contrast" in p for p in found), (name, found)
    # Text of the code element itself (outside any span) is checked too.
    write_page(
        tiny_site,
        "faint-text",
        block(dark * 10).replace("<code>", "<code style='color: #ccc'>plain text"),
    )
    found = problems_of(tiny_site, "/faint-text/")
    assert any("color-contrast" in p for p in found), found


PLAYER = """<figure class="book-frames" data-base="/f">
<img src="/f.frame-0.svg#only-light" alt="frame"><figcaption>
<label>width <input type="range" min="0" max="1" value="0" data-labels='["a", "b"]'
aria-label="width"></label> <output>a</output></figcaption></figure>"""

SWAP = """<script>document.addEventListener('input', e => {
  const p = e.target.closest('.book-frames');
  p.querySelector('img').src = `/f.frame-${e.target.value}.svg#only-light`;
  p.querySelector('output').textContent = JSON.parse(e.target.dataset.labels)[e.target.value];
});</script>"""


def test_a_slider_that_changes_nothing_fails(tiny_site: Path):
    for frame in (0, 1):
        (tiny_site / f"f.frame-{frame}.svg").write_text(
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{10 + frame}' height='10'/>"
        )
    write_page(tiny_site, "works", PLAYER + SWAP)
    assert problems_of(tiny_site, "/works/") == []
    write_page(tiny_site, "stuck", PLAYER)  # no script: the slider moves, the figure does not
    assert any("did not work" in p for p in problems_of(tiny_site, "/stuck/"))


def test_a_console_error_fails(tiny_site: Path):
    write_page(tiny_site, "console", "<script>console.error('boom')</script>")
    found = problems_of(tiny_site, "/console/")
    assert any("console error: boom" in p for p in found), found


def test_an_uncaught_exception_fails(tiny_site: Path):
    write_page(tiny_site, "exception", "<script>null.field</script>")
    found = problems_of(tiny_site, "/exception/")
    assert any("uncaught exception" in p for p in found), found


def test_a_request_to_another_host_fails(tiny_site: Path):
    write_page(tiny_site, "cdn", '<script src="http://cdn.invalid/lib.js"></script>')
    found = problems_of(tiny_site, "/cdn/")
    assert any("request failed" in p for p in found), found


def test_an_image_the_page_replaces_before_it_arrives_is_not_a_failure(tiny_site: Path):
    # A slider swaps an image's source while the first one loads: the browser aborts it.
    write_page(
        tiny_site,
        "swap",
        '<img id="a" src="/pixel.png?first" alt="a">'
        "<script>document.getElementById('a').src = '/pixel.png?second';</script>",
    )
    assert problems_of(tiny_site, "/swap/") == []


def test_site_pages_lists_every_page_but_assets(tiny_site: Path):
    write_page(tiny_site, "chapters/one", "")
    write_page(tiny_site, "assets/vendor", "")
    assert site_pages(tiny_site) == ["/", "/chapters/one/"]


def test_screenshots_are_saved(tiny_site: Path, tmp_path_factory):
    shots = tmp_path_factory.mktemp("shots")
    check(tiny_site, screenshots=shots, pages=["/"], search=False, dark=True)
    names = sorted(p.name for p in shots.iterdir())
    assert names == ["index.dark.png", "index.light.png", "index.phone.png"]


@pytest.mark.parametrize(
    ("source", "url"),
    [
        ("docs/chapters/bahdanau.md", "/chapters/bahdanau/"),
        ("docs/index.md", "/"),
        ("docs/quick-tour.py", "/quick-tour/"),
        ("docs/api/index.md", "/api/"),
        ("/chapters/x/", "/chapters/x/"),
    ],
)
def test_page_url_maps_a_source_file_to_its_page(source: str, url: str):
    assert page_url(source) == url


def test_the_page_option_checks_only_that_page(tiny_site: Path, capsys):
    write_page(tiny_site, "chapters/broken", '<img src="/missing.svg">')
    shared = _SHARED[0]
    assert main([str(tiny_site), "--page", "docs/index.md", "--no-dark"], shared) == 0
    assert "2 passed, 0 failed" in capsys.readouterr().out  # light and phone
    assert main([str(tiny_site), "--page", "docs/chapters/broken.md", "--no-dark"], shared) == 1
    assert main([str(tiny_site), "--page", "docs/chapters/absent.md"], shared) == 1
    assert "not pages of" in capsys.readouterr().out


def test_two_browsers_give_the_reports_one_would(tiny_site: Path):
    for name in ("one", "two", "three"):
        write_page(tiny_site, f"chapters/{name}", f"<p>{name}</p>")
    write_page(tiny_site, "chapters/two", '<img src="/missing.svg">')
    serial = check(tiny_site, search=False, dark=False)
    parallel = check_site_in_parallel(tiny_site, search=False, dark=False, jobs=2)

    def summary(reports):  # the port differs between servers
        return [(r.url, [re.sub(r":\d+/", ":PORT/", p) for p in r.problems]) for r in reports]

    assert summary(parallel) == summary(serial)
    assert any(r.problems for r in parallel)  # the broken page is reported


def test_runnable_blocks_are_the_bare_python_fences_dedented():
    assert runnable_blocks(PAGE_SOURCE) == ["print(1)", "print(2)"]


def test_page_source_finds_the_markdown_of_a_page(tmp_path: Path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "x.md").write_text("# x")
    (tmp_path / "index.md").write_text("# home")
    assert page_source(tmp_path, "/chapters/x/") == tmp_path / "chapters" / "x.md"
    assert page_source(tmp_path, "/") == tmp_path / "index.md"
    assert page_source(tmp_path, "/quick-tour/") is None and page_source(None, "/") is None
    assert default_docs(tmp_path / "site") is None  # no mkdocs.yml beside it
    assert default_docs(Path("site")) == Path("docs").resolve()  # this repository


def test_a_copy_button_that_copies_another_code_than_the_tested_block_fails(
    tiny_site: Path, tmp_path_factory
):
    docs = tmp_path_factory.mktemp("docs")
    (docs / "notes").mkdir()  # not a chapter: no print check on this page
    (docs / "notes" / "x.md").write_text(PAGE_SOURCE)
    solution = f"<details><summary>A solution</summary>{code_block('print(2)')}</details>"
    write_page(tiny_site, "notes/x", code_block("print(1)") + solution)
    reports = check(tiny_site, pages=["/notes/x/"], search=False, dark=False, docs_dir=docs)
    assert [problem for report in reports for problem in report.problems] == []
    write_page(tiny_site, "notes/x", code_block("print(1)  # not what was tested") + solution)
    reports = check(tiny_site, pages=["/notes/x/"], search=False, dark=False, docs_dir=docs)
    problems = [problem for report in reports for problem in report.problems]
    assert problems == [
        "no copy button copies this block of x.md as the snippets test it: 'print(1)'"
    ]


def live_problems(site: Path, path: str):
    reports = check(site, pages=[path], search=False, dark=False)
    return [p for report in reports for p in report.problems], reports[0].live


def test_the_live_widgets_compute_what_pytorch_computes(tiny_site: Path, live_models):
    problems, live = live_problems(tiny_site, live_site(tiny_site, live_models))
    assert problems == []
    assert [(report.name, report.cases) for report in live] == [("translator", 2), ("gpt", 2)]
    assert all(0 < report.logit_difference < 1e-4 for report in live), live
    assert all(0 < report.weight_difference < 1e-4 for report in live), live


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_forward_pass_fails_the_check(tiny_site: Path, live_models, broken: str):
    problems, _ = live_problems(tiny_site, live_site(tiny_site, live_models, broken))
    for name in ("translator", "gpt"):
        found = [p for p in problems if p.startswith(f"live {name}")]
        assert any("over the tolerance" in p for p in found), (broken, name, problems)


def test_the_page_tokenizes_as_python_does(tiny_site: Path):
    from attention_book.data.corpus import builtin_pairs
    from attention_book.data.text import Vocab, tokenize
    from booktools.browser.serve import browsing

    tricky = [
        "Hello, world!", "It is 3:45 PM, déjà.", "1,000 or 3.5?", "end.", "a;b; c;", " x , y ",
        "Va\u202f! Il est 3:45\u202fPM", "tab\there\nnew line\r\n", "nbsp\xa0and\x85next\x1cfs",
        "zero\u200bwidth\ufeffbom", "İstanbul ΣΑΣ Straße", "!!! ...", "", "   ", "?", "a,",
        "ÉTATS-UNIS, 12:00.", "x\u3000y\u2028z",
    ]  # fmt: skip
    pairs = [pair for split in ("train", "valid", "test") for pair in builtin_pairs(split)]
    sentences = tricky + [text for pair in pairs for text in pair]
    vocab = Vocab([tokenize(source) for source, _ in builtin_pairs("train")])
    shutil.copytree(LIVE_JS / "live", tiny_site / "assets" / "javascripts" / "live")
    with browsing(tiny_site, _SHARED[0]) as (new_context, base_url):
        context = new_context()
        page = context.new_page()
        page.goto(base_url + "/")
        found = page.evaluate(  # one string each way: Playwright is slow on large arrays
            """async (given) => {
              const [sentences, tokens] = JSON.parse(given);
              const text = await import('/assets/javascripts/live/text.js');
              const vocab = new text.Vocab(tokens);
              return JSON.stringify(
                sentences.map(s => [text.tokenize(s), vocab.indices(text.tokenize(s))]));
            }""",
            json.dumps([sentences, vocab.idx_to_token]),
        )
        found = json.loads(found)
        context.close()
    expected = [[tokenize(s), vocab[tokenize(s)]] for s in sentences]
    wrong = [(s, f, e) for s, f, e in zip(sentences, found, expected, strict=True) if f != e]
    assert wrong == [], wrong[:5]
    assert any(vocab.unk in indices for _, indices in expected)  # unknown words were tried


# A stand-in for Material's search box: typing shows one result, a link to the page that
# `FIRST_RESULTS` names for the query typed, and the index it fetches is the site's own
# search/search_index.json.
def search_box(first_results: dict[str, str]) -> str:
    return (
        "<input class='md-search__input' aria-label='Search'><ol aria-label='results'></ol><script>"
        "fetch('/search/search_index.json').then(r => r.json())"
        ".catch(e => console.error('index: ' + e));"
        f"const first = {json.dumps(first_results)};"
        "document.querySelector('input').addEventListener('keyup', (event) => {"
        " const href = first[event.target.value] || '/api/nothing/';"
        " document.querySelector('ol').innerHTML ="
        " `<li class='md-search-result__item'><a href='${href}'>a</a></li>`; });"
        "</script>"
    )


def chapters_first() -> dict[str, str]:
    from booktools.browser.page import READER_QUERIES

    return {q: p if p != "/chapters/" else "/chapters/x/" for q, p in READER_QUERIES.items()}


def test_the_search_check_fails_on_an_error_while_the_site_searches(tiny_site: Path):
    """The search index and the sitemap are the search check's (booktools.browser.verdicts)."""
    write_page(tiny_site, ".", search_box(chapters_first()))
    (tiny_site / "search").mkdir()
    (tiny_site / "search" / "search_index.json").write_text('{"docs": []}')
    assert check(tiny_site, pages=[], search=True)[-1].problems == []
    (tiny_site / "search" / "search_index.json").write_text("{not json")
    problems = check(tiny_site, pages=[], search=True)[-1].problems
    assert any(p.startswith("console error: index: SyntaxError") for p in problems), problems


def test_the_search_check_fails_when_an_api_page_comes_before_the_chapter(tiny_site: Path):
    write_page(tiny_site, ".", search_box({**chapters_first(), "kv cache": "/api/kv_cache/"}))
    (tiny_site / "search").mkdir()
    (tiny_site / "search" / "search_index.json").write_text('{"docs": []}')
    (problem,) = check(tiny_site, pages=[], search=True)[-1].problems
    assert problem.startswith("search for 'kv cache': the first result is ")
    assert "/api/kv_cache/" in problem
