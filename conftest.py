"""The repository's pytest configuration: the book's snippet runner, `booktools.checks.snippets`.

``pytest --codeblocks docs/ README.md`` (``make snippets``) runs every code block of the pages
with it; ``pytest tests/`` loads it too, and it changes nothing there.
"""

pytest_plugins = ["booktools.checks.snippets"]
