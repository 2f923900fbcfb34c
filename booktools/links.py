"""Every link of the built site checked by LinkChecker, over a local server (``make links``).

Usage: ``python -m booktools.links site``. The site is served on a free local port as the
browser check serves it (`booktools.browsing.serve`), and LinkChecker (from PyPI) starts at its
home page and follows every link of the site's own: pages, images, style sheets, scripts, fonts
and downloads. It fails (exit status 1, LinkChecker's report printed) on a page, an image or
another file that is missing (HTTP 404) and on an anchor that the page it points into does not
have (LinkChecker's AnchorCheck). Links to other hosts are not fetched: this check runs offline,
and says only that such a link is well formed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from booktools.browsing import serve

#: LinkChecker's configuration: the site's own links, anchors checked, nothing from outside.
#: The line-number anchors of code listings (``#__codelineno-0-12``, one per line, thousands on
#: the API pages, each a link of a line to itself that pymdownx.highlight writes) are not
#: followed: checking each one parses its page again.
CONFIG = """\
[checking]
threads=4
timeout=30
[filtering]
checkextern=0
ignore=
  #__codelineno-
[AnchorCheck]
[output]
log=text
verbose=0
warnings=1
status=0
[text]
parts=url,parenturl,base,name,info,warning,result
"""


def check_links(site_dir: Path) -> tuple[int, str]:
    """Run LinkChecker over a built site served locally.

    Args:
        site_dir: The built site (``site/``).

    Returns:
        LinkChecker's exit status (0 when every link resolves) and its report.
    """
    linkchecker = Path(sys.executable).with_name("linkchecker")
    with tempfile.TemporaryDirectory() as config_dir, serve(site_dir) as base_url:
        config = Path(config_dir) / "linkcheckerrc"
        config.write_text(CONFIG, encoding="utf-8")
        result = subprocess.run(
            [str(linkchecker), "--config", str(config), "--no-robots", f"{base_url}/"],
            capture_output=True,
            text=True,
            check=False,
        )
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
    print(f"links: LinkChecker exited with {status} in {time.perf_counter() - start:.0f} s")
    return 0 if status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
