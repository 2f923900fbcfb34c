"""Math rendered at build time by KaTeX (booktools.plugin.katex): every formula, the pinned one."""

from __future__ import annotations

import json
import tarfile
from functools import cache
from pathlib import Path

import markdown
import pytest
from mkdocs.utils import yaml_load
from repo import ROOT

from booktools.plugin import katex

PAGES = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md"))


@cache
def markdown_extensions() -> tuple[list[str], dict]:
    """The Markdown extensions of mkdocs.yml, with their configurations."""
    config = yaml_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    names, configs = [], {}
    for entry in config["markdown_extensions"]:
        name, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        names.append(name)
        configs[name] = options or {}
    return names, configs


def page_formulas(page: str) -> list[tuple[str, bool]]:
    """Every formula of a page, as Python-Markdown with the site's extensions finds it."""
    names, configs = markdown_extensions()
    converter = markdown.Markdown(extensions=names, extension_configs=configs)
    text = converter.convert((ROOT / page).read_text(encoding="utf-8"))
    return [katex.formula_tex(match["tex"]) for match in katex.FORMULA.finditer(text)]


@pytest.mark.parametrize("page", PAGES)
def test_every_formula_of_the_book_renders(page: str, monkeypatch):
    monkeypatch.chdir(ROOT)  # pymdownx.snippets reads the package's source from "."
    for tex, display in page_formulas(page):
        try:
            katex.renderer().render(tex, display)
        except katex.KatexError as error:
            pytest.fail(f"{page}: KaTeX cannot render the formula {tex!r}: {error}")


def test_the_book_has_math_to_render(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert len(page_formulas("docs/chapters/self-attention.md")) > 20


def test_a_bad_formula_fails_naming_the_page_and_the_formula():
    page = (
        '<p>Fine: <span class="arithmatex">\\(x^2\\)</span>, '
        'not: <span class="arithmatex">\\(\\softmaks(x)\\)</span></p>'
    )
    with pytest.raises(katex.KatexError) as error:
        katex.render_math(page, "chapters/broken.md")
    message = str(error.value)
    assert "chapters/broken.md" in message
    assert "'\\\\softmaks(x)'" in message  # the formula, as TeX
    assert "Undefined control sequence: \\softmaks" in message  # KaTeX's reason


def test_lenient_tex_is_an_error_too():
    # KaTeX's strict mode: what it would render only by guessing (Unicode text in math mode).
    with pytest.raises(katex.KatexError):
        katex.renderer().render("x é y", False)


def test_a_formula_becomes_html_and_mathml_and_keeps_its_element():
    page = (
        '<span class="arithmatex">\\(a &lt; b\\)</span>'
        '<div class="arithmatex">\\[\n\\sum_i \\alpha_i\n\\]</div>'
    )
    html = katex.render_math(page, "chapters/x.md")
    inline, display = html.split("<div")
    assert inline.startswith('<span class="arithmatex"><span class="katex">')
    assert "<math" in inline and '<annotation encoding="application/x-tex">a &lt; b' in inline
    assert 'class="katex-display"' in display and "\\sum_i \\alpha_i" in display
    assert "\\(" not in html and "\\[" not in html


def test_a_page_without_math_is_left_as_it_is():
    assert katex.render_math("<p>$5 and \\(</p>", "x.md", render=None) == "<p>$5 and \\(</p>"


def test_arithmatex_delimiters_are_removed():
    assert katex.formula_tex("\\(a &amp; b\\)") == ("a & b", False)
    assert katex.formula_tex("\\[\nx\n\\]") == ("x", True)
    assert katex.formula_tex("\\begin{align}x\\end{align}") == ("\\begin{align}x\\end{align}", True)


def test_the_renderer_is_the_pinned_release():
    lock = json.loads(katex.LOCK_FILE.read_text(encoding="utf-8"))
    assert katex.renderer().version == lock["version"]
    assert lock["tarball"].endswith(f"/katex-{lock['version']}.tgz")
    assert lock["integrity"].startswith("sha512-")


def test_the_site_serves_the_style_sheet_and_fonts_of_that_release(tmp_path):
    from types import SimpleNamespace

    from mkdocs.structure.files import Files

    plugins = SimpleNamespace(_current_plugin=None)
    config = SimpleNamespace(site_dir=str(tmp_path), use_directory_urls=True, plugins=plugins)
    files = Files([])
    katex.add_katex(files, config)
    uris = {file.src_uri for file in files}
    assert f"{katex.SITE_FOLDER}/katex.min.css" in uris
    assert f"{katex.SITE_FOLDER}/fonts/KaTeX_Main-Regular.woff2" in uris
    assert f"{katex.SITE_FOLDER}/LICENSE" in uris
    assert not any(uri.endswith(".js") for uri in uris)  # pages run no math script
    css = (katex.installed() / "katex.min.css").read_text(encoding="utf-8")
    assert "KaTeX_Main" in css and "fonts/KaTeX_Main-Regular.woff2" in css


def test_mathjax_is_gone():
    for name in ("mkdocs.yml", "requirements.txt", "booktools/plugin/events.py"):
        assert "mathjax" not in (ROOT / name).read_text(encoding="utf-8").lower(), name


def fake_tarball(path: Path) -> bytes:
    """A tarball shaped like KaTeX's, with a file outside what is kept."""
    source = path / "package"
    (source / "dist" / "fonts").mkdir(parents=True)
    (source / "dist" / "katex.min.js").write_text("var katex = {};")
    (source / "dist" / "katex.min.css").write_text(".katex{}")
    (source / "dist" / "fonts" / "KaTeX_Main-Regular.woff2").write_bytes(b"font")
    (source / "LICENSE").write_text("MIT")
    (source / "cli.js").write_text("not kept")
    tarball = path / "katex.tgz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(source, arcname="package")
    return tarball.read_bytes()


def test_install_refuses_a_tarball_whose_digest_is_not_the_pinned_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = fake_tarball(tmp_path)
    with pytest.raises(ValueError, match="not the pinned"):
        katex.install(tmp_path / "env", fetch=lambda url: data, quiet=True)
    assert not (tmp_path / "cache" / "attention-book").exists()  # nothing kept
    with pytest.raises(katex.KatexError, match="make setup"):
        katex.installed(tmp_path / "env")


def test_install_unpacks_only_what_the_site_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = fake_tarball(tmp_path)
    pinned = katex.Lock("0.0.0", "https://example.invalid/katex.tgz", katex.integrity(data))
    monkeypatch.setattr(katex, "lock", lambda: pinned)
    fetched = []
    target = katex.install(
        tmp_path / "env", fetch=lambda url: fetched.append(url) or data, quiet=True
    )
    assert fetched == [pinned.tarball]
    kept = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert kept == [
        ".integrity",
        "LICENSE",
        "fonts/KaTeX_Main-Regular.woff2",
        "katex.min.css",
        "katex.min.js",
    ]
    assert katex.installed(tmp_path / "env") == target
    # A second environment takes the tarball from the download cache: nothing is fetched.
    katex.install(tmp_path / "other", fetch=lambda url: pytest.fail("fetched again"), quiet=True)


def test_a_formula_outside_the_content_fails_the_page_and_words_pass():
    from booktools.plugin.katex import raw_math_outside_content

    heading = '<nav><a href="#why">Why divide by \\(\\sqrt{d}\\)</a></nav>'
    content = '<article><h3 id="why">Why divide by <span class="arithmatex">\\(d\\)</span></h3>'
    page = f"<html>{heading}{content}</article></html>"
    assert raw_math_outside_content(page) == ["\\(\\sqrt{d}\\)"]
    with pytest.raises(katex.KatexError, match=r"outside the page's content.*√d"):
        katex.render_math(page, "chapters/x.md", render=lambda tex, display: tex)
    words = page.replace("\\(\\sqrt{d}\\)", "√d")
    assert raw_math_outside_content(words) == []
    assert "\\(" not in katex.render_math(words, "chapters/x.md", render=lambda t, d: "<b>m</b>")
