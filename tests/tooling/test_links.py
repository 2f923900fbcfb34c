"""The link check of the built site (booktools.checks.links, make links): lychee, offline."""

from __future__ import annotations

from pathlib import Path

from booktools.checks.links import check_links, main


def page(site: Path, path: str, body: str) -> None:
    target = site / path / "index.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        f"<!doctype html><html lang='en'><head><title>{path}</title>"
        f"<link rel='stylesheet' href='/style.css'></head><body>{body}</body></html>",
        encoding="utf-8",
    )


def tiny_site(site: Path) -> Path:
    """A healthy site: pages, an anchor, an image, a style sheet, a link to another host."""
    (site / "style.css").write_text("body { color: black; }", encoding="utf-8")
    (site / "figure.svg").write_text(
        "<svg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/>", encoding="utf-8"
    )
    page(
        site,
        ".",
        "<a href='chapters/one/#the-idea'>one</a> <img src='figure.svg' alt='a figure'>"
        "<a href='https://example.invalid/never-fetched'>elsewhere</a>",
    )
    page(site, "chapters/one", "<h2 id='the-idea'>The idea</h2><a href='../../'>home</a>")
    return site


def test_a_healthy_site_passes_without_fetching_other_hosts(tmp_path: Path):
    status, report = check_links(tiny_site(tmp_path))
    assert status == 0, report
    assert "example.invalid" not in report  # not fetched (it could not resolve)


def test_a_dead_link_a_missing_image_and_a_missing_anchor_fail(tmp_path: Path, capsys):
    site = tiny_site(tmp_path)
    page(
        site,
        "chapters/two",
        "<a href='../three/'>gone</a> <img src='../../missing.svg' alt='gone'>"
        "<a href='../one/#no-such-section'>nowhere</a>",
    )
    page(site, ".", "<a href='chapters/one/#the-idea'>one</a> <a href='chapters/two/'>two</a>")
    status, report = check_links(site)
    assert status == 2, report  # lychee's status for broken links
    assert "chapters/three" in report  # a missing page
    assert "missing.svg" in report  # a missing image
    assert "#no-such-section" in report and "Cannot find fragment" in report  # an anchor
    assert "Errors" in report and "3 Errors" in report
    assert main([str(site)]) == 1
    assert "lychee exited with 2" in capsys.readouterr().out
