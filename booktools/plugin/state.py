"""What one build of the site keeps between mkdocs events.

``on_files`` draws the figures and build fragments; ``on_page_markdown`` then puts them in the
pages. What the first learns and the second needs travels in a `BuildState`, made anew at the
start of every build (``on_config``, so each rebuild of ``mkdocs serve`` starts clean) and
handed explicitly to the functions that read it: no module keeps state between builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mkdocs.exceptions import PluginError

if TYPE_CHECKING:
    from booktools.plugin.structure import Book


class MissingFragmentError(PluginError):
    """A page inserts a build fragment (``{{ build:NAME }}``) that the build did not draw."""


@dataclass
class BuildState:
    """The results of one build that its later events read.

    Attributes:
        fragments: Each build fragment's Markdown, by figure name (``{{ build:NAME }}``), and
            each value of a figure that returns values, by ``NAME.KEY``.
        frames: Each figure drawn as `Frames` (one drawing per value of a control): its
            ``control``, its ``labels`` and its ``start`` frame, by figure name.
        page_lengths: Each chapter page's characters of text (`booktools.plugin.reading`), by its
            path under ``docs/``.
        search_samples: The first words of each paragraph of each chapter, by its URL, which
            the search index must hold (`booktools.plugin.search_index`).
        live: Each live widget's facts (`booktools.live.widgets.widget_facts`): its exported model's
            folder, sizes and reference cases, by widget name (``{{ live:NAME }}``).
        printed: What each block marked ``<!--book:printed-->`` printed in this build, by its
            codes (`booktools.plugin.printed`).
        book: The book's structure (`booktools.plugin.structure.Book`), read from the nav, the
            pages' front matter and the package; None where no build read it.
    """

    fragments: dict[str, str] = field(default_factory=dict)
    frames: dict[str, dict] = field(default_factory=dict)
    page_lengths: dict[str, int] = field(default_factory=dict)
    search_samples: dict[str, list[str]] = field(default_factory=dict)
    live: dict[str, dict] = field(default_factory=dict)
    printed: dict[str, str] = field(default_factory=dict)
    book: Book | None = None

    def fragment(self, name: str, page: str) -> str:
        """The Markdown of a build fragment.

        Args:
            name: The fragment's name (a figure function's).
            page: The page that inserts it, named in the error.

        Returns:
            The fragment's Markdown.

        Raises:
            MissingFragmentError: If the build drew no fragment of that name, naming the page
                and the fragment.
        """
        if name not in self.fragments:
            values = sorted(key for key in self.fragments if key.startswith(f"{name}."))
            hint = f" (it holds values: {', '.join(values)})" if values else ""
            raise MissingFragmentError(f"{page}: unknown build fragment {name!r}{hint}")
        return self.fragments[name]
