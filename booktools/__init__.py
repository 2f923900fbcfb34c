"""The Attention Book's build tooling: what turns the chapters into a site, and checks it.

It lives in the repository beside the package it builds the book from, and is installed with it
(``pip install -e .``) so that MkDocs finds the book's plugin by its entry point. Its modules,
by concern:

- `booktools.markdown`: the one Markdown reader (every tool finds code fences through it);
- `booktools.plugin`: the MkDocs plugin (`booktools.plugin.events`, its events) and what they do:
  `booktools.plugin.state` (what one build keeps between events), `booktools.plugin.structure`
  (the chapter map, the learning path, the plan of the book and the API pages, made from the
  nav), `booktools.plugin.figures` (figures and build fragments, keyed by the code they run:
  `booktools.plugin.code_keys`), `booktools.plugin.listings`
  (the package's source in the chapters), `booktools.plugin.notes` (the "first run trains"
  notes), `booktools.plugin.printed` (what a marked block printed, under it),
  `booktools.plugin.notebooks` (a notebook per chapter), `booktools.plugin.katex` (math),
  `booktools.plugin.versions` (the versions a chapter was tested with),
  `booktools.plugin.reading` (reading times and deep dives), `booktools.plugin.search_index`
  (the search index), `booktools.plugin.attr_lists` (attribute lists left as text) and
  `booktools.plugin.referee` (trained results against their recorded spread);
- `booktools.live`: the trained models that pages run in the browser: `booktools.live.widgets`
  (the widgets and the models they load), `booktools.live.export` (the export, with
  `booktools.live.translator` and `booktools.live.gpt`, one per model),
  `booktools.live.flash` (the WebGPU kernels' cases and PyTorch's outputs),
  `booktools.live.train` (the training playground's reference trainings and study) and
  `booktools.live.check` (the page's numbers against PyTorch's);
- `booktools.browser`: the built site checked in headless Chromium: `booktools.browser.check`
  (the command), `booktools.browser.page` (one page), `booktools.browser.scripts` (the
  JavaScript it runs), `booktools.browser.verdicts` (the verdicts it keeps) and
  `booktools.browser.serve` (the server and Chromium);
- `booktools.checks`: the checks of the gate besides the build: `booktools.checks.docs` (the
  rules of the pages, ``make docs``), `booktools.checks.snippets` (the snippet runner, a pytest
  plugin), `booktools.checks.links` (the link check), `booktools.checks.notebooks` (the
  notebook runner) and `booktools.checks.crossmachine` (the cross-machine spread,
  ``make crossmachine``).

Each subpackage's docstring says more about its modules.
"""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
