"""Serving a built site locally and driving Debian's Chromium over it, for the browser check.

`serve` serves the site on a free local port as a static host does (text compressed with gzip,
as GitHub Pages serves it); `launch` starts the system's Chromium, headless, through
Playwright (no browser download); `browsing` does both and hands out fresh browser contexts
at the desktop width, with the clipboard allowed. `site_pages` lists a built site's pages.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    # WebGPU on the CPU (SwiftShader), for the FlashAttention widget's kernels (live/flash.js).
    "--enable-unsafe-webgpu",
    "--enable-unsafe-swiftshader",
]


#: The desktop width every page is loaded at; the phone pass: a page must read at this width
#: without scrolling sideways.
DESKTOP = {"width": 1280, "height": 900}


PHONE = {"width": 390, "height": 844}

#: The files the local server compresses with gzip, as GitHub Pages does.
COMPRESSED = (".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".ipynb")


def find_chromium() -> str:
    """Path of the system Chromium."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("chromium is not installed: run `make chromium` (Debian's chromium package)")


def launch(playwright):
    """A headless Chromium (the system's), driven by `playwright`."""
    return playwright.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)


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

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and path.is_file() and path.suffix in COMPRESSED):
            return super().do_GET()
        body = gzip.compress(path.read_bytes(), mtime=0)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None


@contextmanager
def browsing(site_dir: Path, browser=None) -> Iterator[tuple[Callable, str]]:
    """Serve the site and hand out fresh browser contexts (light, 1280 px, clipboard allowed).

    Args:
        site_dir: The built site.
        browser: A Playwright browser to use (tests share one), or None to launch one.

    Yields:
        ``(new_context, base_url)``.
    """
    with serve(site_dir) as base_url, playwright_unless(browser) as playwright:
        own = launch(playwright) if browser is None else None

        def new_context():
            context = (browser or own).new_context(color_scheme="light", viewport=DESKTOP)
            context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
            return context

        try:
            yield new_context, base_url
        finally:
            if own is not None:
                own.close()


@contextmanager
def playwright_unless(browser) -> Iterator:
    """Playwright, started here unless a browser is given (then None)."""
    if browser is not None:
        yield None
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        yield playwright
