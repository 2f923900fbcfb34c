"""The checks of the gate that are not the build itself.

- `booktools.checks.snippets`: the pytest plugin that runs every code block of the pages
  (``pytest --codeblocks``; loaded by the repository's ``conftest.py``);
- `booktools.checks.docs`: the rules of the pages (fences, ruff on blocks, listing markers,
  words, Triton's interpreter), ``python -m booktools.checks.docs`` (``make docs``);
- `booktools.checks.links`: every link of the built site (``python -m booktools.checks.links``);
- `booktools.checks.notebooks`: every chapter's notebook run from top to bottom
  (``python -m booktools.checks.notebooks``);
- `booktools.checks.crossmachine`: the declared runs trained under other CPU arithmetic and
  random seeds, each variant refereed and its verdict tests run (``make crossmachine``).
"""
