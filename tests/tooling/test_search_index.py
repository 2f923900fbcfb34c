"""What the search index holds and weighs (booktools.plugin.search_index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

from booktools.plugin import search_index
from booktools.plugin.search_index import check_search_index, exclude_code, paragraph_samples

PAGE = (
    "<h2 id='idea'>The idea</h2><p>Attention is a weighted average of values, where the "
    "weights come from queries and keys.</p><pre><code>import torch</code></pre>"
    "<table><tr><td>num_heads</td></tr></table><p>Short one.</p>"
)


API = (
    "<h1>attention_book.x</h1><p>What the authors wrote about the module.</p>"
    '<div class="doc doc-contents first"><p>The module, in one line.</p><p>More.</p>'
    '<h2 id="f">f</h2><div class="doc doc-contents "><p class="doc doc-class-bases">Bases</p>'
    "<p>What f does.</p><ul><li>a detail</li></ul><table><tr><td>num_heads</td></tr></table>"
    "<pre><code>def f(): ...</code></pre></div></div>"
)


def test_code_blocks_are_left_out_of_the_index():
    chapter = exclude_code(PAGE, "chapters/x.md")
    assert '<pre data-search-exclude="code">' in chapter
    assert "<p>" in chapter  # a chapter's text is kept
    assert '<table data-search-exclude="code">' in chapter  # its tables are not
    assert exclude_code(PAGE, "api/index.md").count("data-search-exclude") == 2  # no docstring


def test_the_api_pages_keep_each_docstring_summary_only():
    from types import SimpleNamespace

    from material.plugins.search.plugin import SearchIndex

    index = SearchIndex(lang=["en"], separator="", pipeline=[], fields={})
    page = SimpleNamespace(
        content=exclude_code(API, "api/x.md"), toc=[], url="api/x/", meta={}, title="x"
    )
    index.add_entry_from_context(page)
    text = " ".join(entry["title"] + " " + entry["text"] for entry in index.entries)
    for kept in ("What the authors wrote", "The module, in one line.", "What f does.", "f"):
        assert kept in text
    for left_out in ("More.", "Bases", "a detail", "num_heads", "def f"):
        assert left_out not in text


def test_a_pages_reference_list_is_left_out_and_its_citations_kept():
    from types import SimpleNamespace

    from material.plugins.search.plugin import SearchIndex

    chapter = (
        '<h2 id="idea">The idea</h2><p>Shazeer (2019) shares one key head.</p>'
        "<ul><li>a list of the prose</li></ul>"
        '<h2 id="references">References<a class="headerlink" href="#references">¶</a></h2>\n'
        "<ul>\n<li>Shazeer, N. (2019). Fast Transformer decoding.</li>\n</ul>"
    )
    index = SearchIndex(lang=["en"], separator="", pipeline=[], fields={})
    page = SimpleNamespace(
        content=exclude_code(chapter, "chapters/x.md"), toc=[], url="chapters/x/", meta={},
        title="x",
    )  # fmt: skip
    index.add_entry_from_context(page)
    text = " ".join(entry["title"] + " " + entry["text"] for entry in index.entries)
    assert "Shazeer (2019) shares one key head." in text and "a list of the prose" in text
    assert "References" in text  # the heading stays, so a search for it lands on the list
    assert "Fast Transformer decoding" not in text


def test_each_paragraph_of_a_few_words_is_sampled():
    samples = paragraph_samples(PAGE)
    assert samples == ["Attention is a weighted average of values, where the weights"]


def write_index(site: Path, docs: list[dict]) -> None:
    (site / "search").mkdir(parents=True, exist_ok=True)
    data = {"config": {}, "docs": docs}
    (site / "search" / "search_index.json").write_text(json.dumps(data), encoding="utf-8")


def test_a_chapter_paragraph_missing_from_the_index_fails(tmp_path: Path):
    text = "<p>Attention is a weighted average of <code>values</code>, where the weights come</p>"
    write_index(tmp_path, [{"location": "chapters/x/#idea", "title": "The idea", "text": text}])
    samples = {"chapters/x/": ["Attention is a weighted average of values, where the weights"]}
    assert "search index:" in check_search_index(tmp_path, samples)
    samples["chapters/x/"].append("A paragraph the index does not hold at all")
    with pytest.raises(PluginError, match="chapters/x/: the search index lacks the paragraph"):
        check_search_index(tmp_path, samples)


def test_an_index_over_its_weight_fails(tmp_path: Path, monkeypatch):
    import random

    random.seed(0)
    noise = "".join(random.choice("abcdefghij ") for _ in range(20_000))
    write_index(tmp_path, [{"location": "api/x/", "title": "x", "text": noise}])
    check_search_index(tmp_path, {})
    monkeypatch.setattr(search_index, "INDEX_BASE_BYTES", 5_000)
    with pytest.raises(PluginError, match="over the 5 kB it may with 0 chapter pages"):
        check_search_index(tmp_path, {})
    # Each chapter page brings its own share of the budget.
    chapters = [{"location": f"chapters/c{i}/", "title": "c", "text": ""} for i in range(3)]
    write_index(tmp_path, [{"location": "api/x/", "title": "x", "text": noise}, *chapters])
    assert "of 12 kB for 3 chapter pages" in check_search_index(tmp_path, {})


def test_the_budget_grows_with_the_chapters():
    assert search_index.max_index_bytes(49) - search_index.max_index_bytes(48) == 2_500
    assert search_index.max_index_bytes(48) == 180_000


def test_api_pages_weigh_less_in_the_search_unless_their_page_says_otherwise():
    from booktools.plugin.search_index import API_SEARCH_BOOST, lower_api_pages

    api, chapter, chosen = {}, {}, {"search": {"boost": 2}}
    lower_api_pages("api/kv_cache.md", api)
    lower_api_pages("chapters/optimizations.md", chapter)
    lower_api_pages("api/index.md", chosen)
    assert api == {"search": {"boost": API_SEARCH_BOOST}} and API_SEARCH_BOOST < 1
    assert chapter == {} and chosen == {"search": {"boost": 2}}


def test_solutions_are_left_out_of_the_index_and_of_the_paragraphs_it_must_hold():
    from booktools.plugin.search_index import exclude_code, paragraph_samples

    page = (
        "<p>Exercise one asks you to compute something rather long here.</p>"
        '<details class="success"><summary>Solution</summary>'
        "<p>The solution is long enough to be a sample of its own.</p></details>"
        '<details class="info"><summary>More</summary>'
        "<p>An aside that the index keeps, long enough to be sampled.</p></details>"
    )
    marked = exclude_code(page, "chapters/x.md")
    assert '<details class="success" data-search-exclude' in marked
    assert '<details class="info">' in marked  # other admonitions stay in the index
    samples = paragraph_samples(page)
    assert not any("solution is long" in sample for sample in samples)
    assert any("An aside" in sample for sample in samples)


def test_what_the_build_writes_on_every_page_and_captions_are_left_out():
    """Issue 42's deep dives took the index to 153 kB of its 150: the boilerplate goes first."""
    kept = "<p>A paragraph of prose that the index keeps, long enough to be sampled.</p>"
    left_out = [
        '<div class="language-python highlight"><span class="filename">attention_book/x.py'
        "</span><pre><code>x = 1</code></pre></div>",
        '<p class="listing-api">API reference: <a href="#">masked_softmax</a> and others</p>',
        '<div class="admonition abstract"><p class="admonition-title">A deep dive of X</p>'
        "<p>It assumes the core of the chapter and reads on its own here.</p></div>",
        '<p><a class="md-button" download="x.ipynb" href="x.ipynb">Download this chapter as a '
        "notebook</a></p>",
        "<p><em>Tested with Python 3.11, PyTorch 2.13.0 and NumPy 2.4.6 (pinned).</em></p>",
        "<blockquote>\n<p><strong>The first run trains.</strong> In a fresh session it trains a "
        "model first.</p></blockquote>",
        "<p><em>What this block printed when the page was built.</em></p>",
        "<p><em><code>flash_memory_growth</code>: peak memory of both versions against n.</em></p>",
    ]
    page = kept + "".join(left_out)
    marked = exclude_code(page, "chapters/x.md")
    assert marked.count(' data-search-exclude="code"') == len(left_out) + 1  # and the <pre>
    assert kept in marked
    assert paragraph_samples(page) == [
        "A paragraph of prose that the index keeps, long enough to be"
    ]
    # An italic paragraph of prose, and a paragraph that opens with code, stay.
    prose = "<p><em>Why</em> the scale matters is the subject of the next section here.</p>"
    code = "<p><code>masked_softmax</code> takes the scores and a mask of the same shape.</p>"
    assert exclude_code(prose + code, "chapters/x.md") == prose + code


def test_the_tex_of_formulas_is_left_out_and_the_paragraph_sampled_without_it():
    page = (
        '<p>The score <span class="arithmatex">\\(s = \\mathbf{q}^\\top \\mathbf{k}\\)</span> '
        "grows with the dimension of the queries and of the keys.</p>"
        '<div class="arithmatex">\\[\\operatorname{softmax}(\\mathbf{S})\\]</div>'
    )
    marked = exclude_code(page, "chapters/x.md")
    assert marked.count(' data-search-exclude="code"') == 2
    assert paragraph_samples(page) == [
        "The score grows with the dimension of the queries and of the"
    ]
