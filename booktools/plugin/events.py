"""The Attention Book's MkDocs plugin: build-time figures and math, chapter notebooks.

`BookPlugin` is installed with the repository (the entry point ``book`` of ``mkdocs.plugins``
in ``pyproject.toml``) and named in ``mkdocs.yml``'s ``plugins:``, after ``search``. Its events,
in build order:

1. ``on_config``: a new `BuildState` for this build, kept in the configuration that every
   later event receives (each rebuild of ``mkdocs serve`` starts clean); reads the book's
   structure from the nav, the pages' front matter and the package, and puts a page per module
   in the nav's API reference (`booktools.plugin.structure`).
2. ``on_files``: draws every figure and build fragment the pages use (`booktools.plugin.figures`),
   runs the blocks marked ``<!--book:printed-->`` whose output the cache lacks
   (`booktools.plugin.printed`), exports the trained models that pages run live in the browser
   (`booktools.live.widgets`), adds KaTeX's style sheet and fonts (`booktools.plugin.katex`),
   one notebook per chapter (`booktools.plugin.notebooks`) and the generated API pages
   (`booktools.plugin.structure`).
3. ``on_page_markdown``: writes under each marked block what it printed, puts in the lists
   the book's structure makes (``{{ book:NAME }}``: the
   chapter map, the learning path, the plan of the book, the API index:
   `booktools.plugin.structure`), expands the listings of package source
   (`booktools.plugin.listings`), puts a
   note of what it trains before each block that may train (`booktools.plugin.notes`), inserts the
   build fragments and the live widgets, shows each figure in light and dark, links each
   chapter's notebook, says which versions its code was tested with (`booktools.plugin.versions`),
   and puts a deep dive's note under its title (`booktools.plugin.reading`).
4. ``on_page_content``: marks what the search index leaves out (code blocks, the API pages'
   parameter tables: `booktools.plugin.search_index`) and keeps the first words of each paragraph of
   each chapter, which the index must hold.
5. ``on_post_page``: fails the build on an attribute list left as text in a page
   (`booktools.plugin.attr_lists`), measures each chapter page against the core budget and shows
   its reading time (`booktools.plugin.reading`), renders every formula of the page with KaTeX
   (`booktools.plugin.katex`: after the search plugin indexed the page, so the index keeps the
   TeX; a formula KaTeX cannot render fails the build, naming the page and the formula), and strips
   the CDN script tags that nbconvert adds to notebook pages.
6. ``on_post_build``: logs every chapter page's length, holds the core route to its reading
   time (`booktools.plugin.reading`), checks the search index's weight and
   content (`booktools.plugin.search_index`), then runs the referee
   (`booktools.plugin.referee`): the headline numbers of every trained result in the store
   against those recorded for it.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import BasePlugin, get_plugin_logger
from mkdocs.structure.files import Files

from booktools.live.widgets import add_live_models, insert_live
from booktools.plugin.attr_lists import check_attribute_lists
from booktools.plugin.figures import (
    add_figures,
    declarations,
    insert_fragments,
    light_and_dark_figures,
)
from booktools.plugin.katex import add_katex, render_math
from booktools.plugin.listings import expand_listings
from booktools.plugin.notebooks import CHAPTERS, add_notebooks, notebook_uri
from booktools.plugin.notes import first_run_notes
from booktools.plugin.printed import insert_printed, print_blocks
from booktools.plugin.reading import (
    check_core_route,
    deep_dive_note,
    length_report,
    measure_page,
)
from booktools.plugin.referee import referee
from booktools.plugin.search_index import (
    check_search_index,
    exclude_code,
    lower_api_pages,
    paragraph_samples,
)
from booktools.plugin.state import BuildState
from booktools.plugin.structure import (
    add_api_pages,
    expand_api_nav,
    insert_structure,
    read_book,
)
from booktools.plugin.versions import versions_line

log = get_plugin_logger(__name__)

#: The key of the configuration under which a build keeps its `BuildState`.
STATE = "booktools_state"

CDN_SCRIPT = re.compile(r'<script[^>]*\bsrc="https?://[^"]*"[^>]*>\s*</script>', re.S)
MODULE_IMPORT = re.compile(
    r"<script type=\"module\">(?:(?!</script>).)*?https?://(?:(?!</script>).)*</script>", re.S
)


def build_state(config) -> BuildState:
    """The state of the build that `config` belongs to.

    Args:
        config: The mkdocs configuration, as every event receives it.

    Returns:
        The state `on_config` made for this build.

    Raises:
        PluginError: If ``on_config`` did not run (the plugin is not loaded by mkdocs).
    """
    try:
        return config[STATE]
    except KeyError:
        raise PluginError("the book's build state is missing: on_config did not run") from None


class BookPlugin(BasePlugin):
    """The book's MkDocs plugin, ``book`` in ``mkdocs.yml``'s ``plugins:`` (after ``search``).

    Registered by the repository's ``pyproject.toml`` as the entry point ``book`` of the group
    ``mkdocs.plugins``; ``make setup`` installs it with the package (``pip install -e .``).
    """

    def on_config(self, config):
        """Start a build: a new `BuildState`, the book's structure, the API reference's nav.

        Args:
            config: The mkdocs configuration.

        Returns:
            The same configuration, with the build's state, and in the nav's API reference a
            page per module of the package.
        """
        book = None
        if config.get("config_file_path"):  # a configuration read from mkdocs.yml
            root = Path(config["config_file_path"]).parent
            book = read_book(config["nav"], root, Path(config["docs_dir"]))
            config["nav"] = expand_api_nav(config["nav"], book.api)
        config[STATE] = BuildState(book=book)
        declarations.cache_clear()  # what the figures declare, read again for each build
        return config

    def on_files(self, files: Files, config) -> Files:
        """Add API pages, figures, the live models, KaTeX's files and notebooks to the site.

        Args:
            files: The site's files.
            config: The mkdocs configuration.

        Returns:
            The files, with those added.
        """
        state = build_state(config)
        add_figures(files, config, state)
        pages = [(f"docs/{f.src_uri}", f.content_string) for f in files.documentation_pages()]
        state.printed = print_blocks(pages)
        add_live_models(files, config, state)
        add_katex(files, config)
        add_notebooks(files, config, state)
        # Last: the notebooks read each chapter's file on disk, and a generated API page has none
        # (it holds docstrings only, no figure, widget or notebook; the figures and the widgets
        # read every page's content, generated or not).
        add_api_pages(files, config, state.book)
        return files

    def on_page_markdown(self, markdown: str, page, config, files: Files) -> str:
        """Insert lists, listings and fragments; on chapters, the notebook's link and versions.

        Args:
            markdown: The page's Markdown.
            page: The mkdocs page.
            config: The mkdocs configuration.
            files: The site's files.

        Returns:
            The Markdown that mkdocs renders.
        """
        state = build_state(config)
        source = f"docs/{page.file.src_uri}"
        markdown = insert_printed(markdown, source, state.printed)
        written = markdown  # the page's own blocks, before listings are added
        lower_api_pages(page.file.src_uri, page.meta)
        markdown = insert_structure(markdown, page.file.src_uri, state.book)
        markdown = expand_listings(markdown, source)
        markdown = first_run_notes(markdown)
        markdown = insert_fragments(markdown, source, state)
        markdown = insert_live(markdown, source, page.url, state)
        markdown = light_and_dark_figures(markdown, state, page.url)
        if page.file.src_uri.startswith(CHAPTERS):
            name = Path(notebook_uri(page.file)).name
            what = "page" if page.meta.get("deep_dive") else "chapter"
            link = (
                f"[:material-download: Download this {what} as a notebook]"
                f'(../{notebook_uri(page.file)}){{ .md-button download="{name}" }}'
            )
            lines = markdown.split("\n")
            title = next((k for k, line in enumerate(lines) if line.startswith("# ")), -1)
            lines.insert(title + 1, f"\n{link}\n\n{versions_line(written)}\n")
            markdown = "\n".join(lines)
            markdown = deep_dive_note(
                markdown, page.meta, page.file.src_uri, Path(config["docs_dir"])
            )
        return markdown

    def on_page_content(self, html: str, page, config, files: Files) -> str:
        """Mark what the search index leaves out; keep the chapters' paragraphs it must hold.

        Args:
            html: The page's content, before the search plugin reads it.
            page: The mkdocs page.
            config: The mkdocs configuration.
            files: The site's files.

        Returns:
            The content, code blocks (and tables of API pages) marked ``data-search-exclude``.
        """
        if page.file.src_uri.startswith(CHAPTERS):
            build_state(config).search_samples[page.url] = paragraph_samples(html)
        return exclude_code(html, page.file.src_uri)

    def on_post_page(self, output: str, page, config) -> str:
        """Render the page's math, check the page, remove the scripts nbconvert loads from CDNs.

        Every formula becomes KaTeX's HTML and MathML (`render_math`); the site must load nothing
        from outside; and no ``{: ... }`` attribute list may be left as text
        (`check_attribute_lists`).

        Args:
            output: The page's HTML.
            page: The mkdocs page.
            config: The mkdocs configuration.

        Returns:
            The HTML, without those scripts on notebook pages.

        Raises:
            PluginError: If the page shows an attribute-list marker as text, or is a core chapter
                page over the budget of `booktools.plugin.reading`, naming the page.
            KatexError: If KaTeX cannot render a formula, naming the page and the formula.
        """
        check_attribute_lists(output, page.file.src_uri)
        if page.file.src_uri.startswith(CHAPTERS) and page.file.src_uri.endswith(".md"):
            # Measured with each formula as its TeX, before KaTeX adds its HTML and MathML.
            lengths = build_state(config).page_lengths
            output = measure_page(output, page.file.src_uri, page.meta, lengths)
        output = render_math(output, page.file.src_uri)
        if page.file.src_uri.endswith((".py", ".ipynb")):
            output = CDN_SCRIPT.sub("", output)
            output = MODULE_IMPORT.sub("", output)
        return output

    def on_post_build(self, config) -> None:
        """Checks of the built book as a whole, after every page is written.

        The search index (its weight, and every chapter's paragraphs in it), then the referee.

        First it logs the length and reading time of every chapter page, longest first.

        Args:
            config: The mkdocs configuration.
        """
        state = build_state(config)
        lengths = state.page_lengths
        if lengths:
            log.info("chapter pages, characters of text:\n%s", length_report(lengths))
        if lengths and state.book is not None:
            routes = {entry.page: state.book.meta.get(entry.page, {}).get("route", "")
                      for entry in state.book.core_chapters()}  # fmt: skip
            if all(page in lengths for page in routes):  # a build of every chapter
                log.info(check_core_route(lengths, routes))
        samples = build_state(config).search_samples
        log.info(check_search_index(Path(config.site_dir), samples))
        referee()
