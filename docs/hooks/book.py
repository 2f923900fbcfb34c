"""The mkdocs hook of the book: the events of `booktools.hook`, the repository's build tooling.

mkdocs loads a hook by its file path, so the repository's root goes on ``sys.path`` first.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from booktools.hook import (
    on_config,
    on_files,
    on_page_content,
    on_page_markdown,
    on_post_build,
    on_post_page,
)

__all__ = [
    "on_config",
    "on_files",
    "on_page_content",
    "on_page_markdown",
    "on_post_build",
    "on_post_page",
]
