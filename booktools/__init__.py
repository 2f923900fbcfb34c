"""The Attention Book's build tooling: what turns the chapters into a site, and checks it.

It lives in the repository beside the package it builds the book from, and is installed with it
(``pip install -e .``) so that MkDocs finds the book's plugin by its entry point. By concern:

- `booktools.markdown`: the one Markdown reader (every tool finds code fences through it);
- `booktools.build`: the MkDocs plugin (`booktools.build.plugin`) and what it does: figures,
  listings, notebooks, KaTeX, reading times, the search index, the referee;
- `booktools.live`: the trained models that pages run in the browser, exported and checked;
- `booktools.browser`: the built site checked in headless Chromium;
- `booktools.checks`: the snippet runner (a pytest plugin), the link check, the notebook runner
  and the cross-machine spread (``make crossmachine``).
"""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
