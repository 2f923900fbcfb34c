"""Tiny sites for the tests of the browser check: pages, a pixel, copy buttons, live widgets.

`tests/tooling/test_browser_check.py`, `tests/tooling/test_browser_verdicts.py` and the tests of
the FlashAttention and playground widgets build their sites from these in a temporary folder and
run the real checker over them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from repo import ROOT

from booktools.plugin import katex

# KaTeX's style sheet and fonts, as the site serves them (booktools.plugin.katex), and a formula
# rendered by the book's own renderer.
KATEX_CSS = "<link rel='stylesheet' href='/katex/katex.min.css'>"


def rendered(tex: str) -> str:
    """A formula as the build writes it."""
    return f'<span class="arithmatex">{katex.renderer().render(tex, False)}</span>'


PIXEL = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
    b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00"
    b"\x00\x00IEND\xaeB`\x82"
)


def write_page(site: Path, path: str, body: str) -> None:
    page = site / path / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    head = f"<link rel='icon' href='data:,'>{KATEX_CSS}"
    page.write_text(
        f"<!doctype html><html lang='en'><head><title>A page</title>{head}</head>"
        f"<body>{body}</body></html>"
    )


# A stand-in for Material's copy button: it copies the text of its block's code.
def code_block(code: str) -> str:
    button = (
        "<button data-md-type='copy' title='Copy' aria-label='Copy' onclick=\"navigator.clipboard"
        ".writeText(this.parentElement.querySelector('code').textContent)\"></button>"
    )
    return f"<div class='language-python highlight'><pre>{button}<code>{code}</code></pre></div>"


PAGE_SOURCE = """# A chapter

```python
print(1)
```

```python title="attention_book/x.py"
a listing is not run
```

??? example "A solution"

    ```python
    print(2)
    ```
"""


# The live widgets (booktools.live.widgets): the page's JavaScript against PyTorch, on tiny models.
LIVE_JS = ROOT / "docs" / "assets" / "javascripts"
#: Deliberate mistakes in the page's code, each a single edit of layers.js, and what must say so.
BROKEN = {
    # The causal mask aligned top-left: one new query (a cached step) sees only the first key.
    "wrong mask": (
        'alignment === "bottom-right" ? num_keys - num_queries : 0',
        "0",
    ),
    # The scores not divided by sqrt(d).
    "missing scale": ("dot(q, keys[j]) / Math.sqrt(d)", "dot(q, keys[j])"),
}


def live_site(site: Path, models: dict[str, Path], broken: str | None = None) -> str:
    """A page with both live widgets, their models and code (broken as named); its URL path."""
    from booktools.live.widgets import widget_html

    javascripts = site / "assets" / "javascripts"
    shutil.rmtree(javascripts, ignore_errors=True)
    shutil.copytree(LIVE_JS / "live", javascripts / "live")
    shutil.copy(LIVE_JS / "book.js", javascripts / "book.js")
    if broken is not None:
        layers = javascripts / "live" / "layers.js"
        old, new = BROKEN[broken]
        assert layers.read_text().count(old) == 1, f"layers.js no longer holds {old!r}"
        layers.write_text(layers.read_text().replace(old, new))
    widgets = []
    for name, folder in models.items():
        shutil.copytree(folder, site / "live" / name, dirs_exist_ok=True)
        case = json.loads((folder / "reference.json").read_text())["cases"][0]
        example = case.get("sentence", case.get("prompt"))
        facts = {"folder": name, "download_bytes": 1000, "example": example}
        widgets.append(widget_html(name, "../", facts))
    script = "<script src='/assets/javascripts/book.js'></script>"
    write_page(site, "live", "<main>" + "".join(widgets) + "</main>" + script)
    return "/live/"


def kernel_site(site: Path, name: str, exported: Path, broken: tuple[str, str, str] | None = None):
    """A page with one widget that runs no trained model (``flash`` or ``train``), its code and
    its exported files; `broken` is one edit of its code, ``(file, old text, new text)``.

    Returns:
        The page's URL path.
    """
    from booktools.live.widgets import widget_html

    shutil.copytree(katex.installed(), site / "katex")
    javascripts = site / "assets" / "javascripts"
    shutil.copytree(LIVE_JS / "live", javascripts / "live")
    shutil.copy(LIVE_JS / "book.js", javascripts / "book.js")
    if broken is not None:
        file, old, new = broken
        code = javascripts / "live" / file
        assert code.read_text().count(old) == 1, f"{file} no longer holds {old!r}"
        code.write_text(code.read_text().replace(old, new))
    shutil.copytree(exported, site / "live" / name)
    widget = widget_html(name, "../", {"folder": name, "download_bytes": 20_000, "example": ""})
    script = "<script src='/assets/javascripts/book.js'></script>"
    write_page(site, name, f"<main>{widget}</main>{script}")
    return f"/{name}/"
