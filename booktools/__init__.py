"""The Attention Book's build tooling: what turns the chapters into a site, and checks it.

It lives in the repository, beside the package it builds the book from, and is not shipped in
the ``attention_book`` wheel. One concept per module:

- `booktools.markdown`: the one Markdown reader (every tool finds code fences through it);
- `booktools.listings`: listings of the package's source, docstrings cut to their summary;
- `booktools.figures`: figures and build fragments drawn at build time, cached per figure;
- `booktools.notes`: the "first run trains" note before a block that trains;
- `booktools.notebooks`: one downloadable notebook per chapter;
- `booktools.katex`: every formula rendered by KaTeX when the site is built;
- `booktools.live`: the book's trained models run live in the page (``{{ live:NAME }}``), with
  `booktools.live_export` (their weights, vocabularies and PyTorch's reference, exported from
  the result store by `booktools.live_translator` and `booktools.live_gpt`) and
  `booktools.live_check` (the page's numbers against PyTorch's, in the browser check);
- `booktools.state`: what one build keeps between mkdocs events;
- `booktools.hook`: the mkdocs events (``docs/hooks/book.py`` only imports them);
- `booktools.snippets`: the pytest plugin that runs every code block of the pages;
- `booktools.browser_check`: the site checked in headless Chromium
  (``python -m booktools.browser_check site``), with `booktools.browser_page` (what it checks
  on one page), `booktools.browser_scripts` (what it runs in the page) and `booktools.browsing`
  (the local server and Chromium);
- `booktools.attr_lists`: the built pages checked for attribute lists left as text;
- `booktools.referee`: the trained results' headline numbers against their recorded spread;
- `booktools.crossmachine`: the declared runs trained under other CPU arithmetic and seeds,
  each variant refereed and its verdict tests run (``make crossmachine``);
- `booktools.run_notebooks`: every chapter's notebook run from top to bottom
  (``python -m booktools.run_notebooks``).
"""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
