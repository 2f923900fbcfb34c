"""The book's structure, made from the nav: the map, the learning path, the plan, the API pages.

The chapter map and the learning path of the home page, the plan of the book in the
introduction and the API reference (its pages, their nav and their index) list what the book
holds. The nav of ``mkdocs.yml`` is the only hand-kept list of the book's pages. Every other list of
them is made from it when the site is built, with what each page says about itself in its front
matter and what the package says about its modules. A page asks for a list with a marker on a
line of its own, which `insert_structure` replaces:

- ``{{ book:chapter-map }}`` (the home page): every page of the nav in its order, under its
  part, with what the reader builds there;
- ``{{ book:learning-path }}`` (the home page): every chapter's core page, numbered, with what
  to read first and whether it is on the core route;
- ``{{ book:plan }}`` (the introduction): every chapter after the page, with a sentence on it;
- ``{{ book:api-index }}`` (``api/index.md``): a row per API page, with the first line of its
  module's docstring;
- ``{{ book:experiment-modules }}`` (``api/experiments.md``): a section per module of
  `attention_book.experiments` that the page does not document by hand.

What each page says about itself, in its front matter (the Quick tour, a jupytext notebook,
says it under ``jupyter: book:`` in its header)::

    builds: Masked softmax, additive and scaled dot-product attention   # the map's last column
    part: Foundations        # a top-level page: the part the map shows it under
    route: core              # a chapter's core page: core or optional
    read_first: [nadaraya-watson.md]   # a core page: chapters (or words) to read first
    plan: the masked softmax, additive attention and scaled dot-product attention.

``builds`` is asked of every page the map lists (every page of the nav but the home page and
the API pages after the reference's index); ``route`` and ``read_first`` of every chapter's
core page, ``plan`` of every core page the plan lists. A page that lacks one fails the build,
naming the page and the field.

The API reference is a section of the nav that the build fills: ``mkdocs.yml`` names only its
index page (``- API reference: api/index.md``), and `expand_api_nav` puts one page per public
module of `attention_book` after it, in the order in which the package's docstring names its
modules (modules it does not name follow, by name). A module documented by a page of its own in
``docs/api/`` (one with prose, such as ``api/transformer.md``, which also documents the
modules its ``:::`` lines name) keeps it; every other module gets a generated page,
``# attention_book.NAME`` and ``::: attention_book.NAME``, added by `add_api_pages` and never
written into ``docs/``.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.utils.meta import get_data

from booktools.plugin.reading import front_matter

#: The package whose modules the API reference documents.
PACKAGE = "attention_book"

#: The API reference's index page, the one page of the reference that the nav names.
API_INDEX = "api/index.md"

#: A marker of the book's structure, on a line of its own: ``{{ book:NAME }}``.
MARKER = re.compile(r"\{\{ book:(?P<name>[\w-]+) \}\}")

#: A module documented on an API page: ``::: attention_book.x`` at the start of a line.
DOCUMENTED = re.compile(r"^::: ([\w.]+)\s*$", re.M)

ROUTES = ("core", "optional")


class StructureError(PluginError):
    """The nav, a page's front matter or a marker does not give what the structure needs."""


@dataclass(frozen=True)
class NavPage:
    """A page of the nav.

    Attributes:
        page: Its path under ``docs/`` (``chapters/transformer.md``).
        title: Its title in the nav (None for a page listed without one).
        part: The top-level section it is in (None for a top-level page).
        section: The section it is in when that section is inside a part (a chapter with deep
            dives), else None.
        first: Whether it is the first page of its section.
    """

    page: str
    title: str | None
    part: str | None
    section: str | None
    first: bool

    @property
    def name(self) -> str:
        """What the book's lists call it.

        The first page of a chapter's section (the core page) is called by the section's title,
        a page without a title by its section's or its part's, any other by its nav title.
        """
        if self.first and self.section:
            return self.section
        return self.title or self.section or self.part or self.page


@dataclass(frozen=True)
class ApiPage:
    """A page of the API reference.

    Attributes:
        module: The module it is named after (``attention_book.masking``).
        uri: Its path under ``docs/`` (``api/masking.md``).
        summary: The first line of the module's docstring.
        content: The generated Markdown, or None for a page kept in ``docs/api/``.
    """

    module: str
    uri: str
    summary: str
    content: str | None = None

    @property
    def title(self) -> str:
        """Its title in the nav: the module's name inside the package."""
        return self.module.removeprefix(f"{PACKAGE}.")


@dataclass
class Book:
    """The book's structure, read once per build.

    Attributes:
        docs: The docs folder.
        nav: The pages of the nav as written in ``mkdocs.yml``, in order.
        meta: The front matter of each page of the nav, by path.
        api: The API reference's pages, in the order of its nav section.
        experiment_modules: The modules of `attention_book.experiments`, in the order of the
            book (the package's docstring).
    """

    docs: Path
    nav: list[NavPage]
    meta: dict[str, dict] = field(default_factory=dict)
    api: list[ApiPage] = field(default_factory=list)
    experiment_modules: list[str] = field(default_factory=list)

    def entry(self, page: str) -> NavPage | None:
        """The nav's entry of a page, or None if the nav does not list it."""
        return next((entry for entry in self.nav if entry.page == page), None)

    def core_chapters(self) -> list[NavPage]:
        """The chapters' core pages (under ``chapters/``, not a deep dive), in the nav's order."""
        return [
            entry
            for entry in self.nav
            if entry.page.startswith("chapters/")
            and not self.meta.get(entry.page, {}).get("deep_dive")
        ]

    def require(self, page: str, name: str) -> str:
        """A field of a page's front matter that the structure needs.

        Raises:
            StructureError: If the page does not give it, naming the page and the field.
        """
        value = self.meta.get(page, {}).get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise StructureError(
                f"docs/{page}: its front matter must give '{name}' "
                f"(booktools.plugin.structure: {FIELDS[name]})"
            )
        return value


#: What each field of the front matter is for, named in the error when a page lacks it.
FIELDS = {
    "builds": "what the reader builds there, the chapter map's last column",
    "route": "core or optional, the learning path's last column",
    "read_first": "the chapters to read first, the learning path's third column",
    "plan": "a sentence on the chapter, for the plan of the book",
}


# ---------------------------------------------------------------------------------------------
# The nav and the pages' front matter


def nav_pages(nav: list) -> list[NavPage]:
    """The pages of a nav (``mkdocs.yml``'s ``nav``), in order; links to other sites left out.

    Args:
        nav: The nav as the configuration holds it: page paths, ``{title: path}`` and
            ``{title: [items]}`` for sections.

    Returns:
        One `NavPage` per page.
    """
    pages: list[NavPage] = []

    def walk(items: list, part: str | None, section: str | None) -> None:
        for number, item in enumerate(items):
            title, value = next(iter(item.items())) if isinstance(item, dict) else (None, item)
            if isinstance(value, list):
                if part is None:
                    walk(value, title, None)
                else:
                    walk(value, part, title)
            elif isinstance(value, str) and not re.match(r"[a-z]+://", value):
                pages.append(NavPage(value, title, part, section, number == 0))

    walk(nav or [], None, None)
    return pages


def notebook_header(text: str) -> dict:
    """The ``book`` fields of a jupytext notebook's header (``# jupyter: book: ...``).

    Args:
        text: The notebook's ``py:percent`` source.

    Returns:
        The fields; empty if it has none.
    """
    match = re.match(r"# ---\n(?P<body>(?:#.*\n)*?)# ---\n", text)
    if not match:
        return {}
    body = "\n".join(line.removeprefix("#")[1:] for line in match["body"].splitlines())
    header = yaml.safe_load(body) or {}
    return dict((header.get("jupyter") or {}).get("book") or {})


def page_meta(docs: Path, page: str) -> dict:
    """What a page says about itself: its front matter (or a notebook's ``book`` header).

    Args:
        docs: The docs folder.
        page: The page, relative to it.

    Returns:
        Its fields; empty for a page that has none, or that is not in the folder.
    """
    path = docs / page
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    return notebook_header(text) if page.endswith(".py") else front_matter(text)


# ---------------------------------------------------------------------------------------------
# The package's modules


def docstring(path: Path) -> str:
    """The docstring of a module's source file ("" if it has none)."""
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def public_modules(package: Path) -> dict[str, Path]:
    """The modules directly inside a package: its ``.py`` files and its subpackages.

    Args:
        package: The package's folder.

    Returns:
        The file of each (a subpackage's ``__init__.py``), by name, sorted; names that start
        with an underscore (``__main__``, ``__init__``) left out.
    """
    found = {}
    for path in sorted(package.iterdir()):
        if path.name.startswith("_"):
            continue
        if path.suffix == ".py":
            found[path.stem] = path
        elif (path / "__init__.py").is_file():
            found[path.name] = path / "__init__.py"
    return found


def named_order(text: str, names: list[str], prefix: str = "") -> list[str]:
    """`names` in the order a text first names them in backticks, those it does not name last.

    Args:
        text: A docstring (``The modules: `masking`, `attention` ...``).
        names: The names to order.
        prefix: What precedes a name in the text (``attention_book.experiments.``).

    Returns:
        The names: first those the text names, in its order, then the others, sorted.
    """
    order: list[str] = []
    for word in re.findall(r"`+([\w.]+)`+", text):
        name = word.removeprefix(prefix) if word.startswith(prefix) else None
        if name in names and name not in order:
            order.append(name)
    return order + sorted(set(names) - set(order))


def first_line(text: str) -> str:
    """The first line of a docstring, or "" for none."""
    return text.strip().split("\n")[0].strip()


def api_pages(root: Path, docs: Path) -> list[ApiPage]:
    """The API reference's pages, in the order of its nav section.

    One page per public module of `attention_book` (a module or a subpackage), in the order
    the package's docstring names them; a page of ``docs/api/`` is kept, and a module that such
    a page documents (``::: attention_book.x``) gets no page of its own.

    Args:
        root: The repository (the folder of ``mkdocs.yml``), which holds the package.
        docs: The docs folder.

    Returns:
        The pages, those to generate with their content.
    """
    package = root / PACKAGE
    modules = public_modules(package)
    kept = {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted((docs / "api").glob("*.md"))
        if path.name != "index.md"
    }
    elsewhere = {
        module.removeprefix(f"{PACKAGE}.")
        for stem, text in kept.items()
        for module in DOCUMENTED.findall(text)
        if module != f"{PACKAGE}.{stem}"
    }
    pages = []
    for name in named_order(docstring(package / "__init__.py"), list(modules)):
        if name in elsewhere and name not in kept:
            continue
        module = f"{PACKAGE}.{name}"
        summary = first_line(docstring(modules[name]))
        content = None if name in kept else f"# {module}\n\n::: {module}\n"
        pages.append(ApiPage(module, f"api/{name}.md", summary, content))
    for stem in sorted(set(kept) - set(modules)):  # a kept page about no module of the package
        pages.append(ApiPage(f"{PACKAGE}.{stem}", f"api/{stem}.md", ""))
    return pages


def experiment_modules(root: Path) -> list[str]:
    """The modules of `attention_book.experiments`, in the order its docstring names them.

    Args:
        root: The repository.

    Returns:
        Their dotted names.
    """
    package = root / PACKAGE / "experiments"
    if not package.is_dir():
        return []
    prefix = f"{PACKAGE}.experiments."
    names = named_order(docstring(package / "__init__.py"), list(public_modules(package)), prefix)
    return [prefix + name for name in names]


def documented_modules(root: Path, docs: Path) -> frozenset[str]:
    """Every module the API reference documents.

    The ``:::`` lines of its pages, generated or kept, and the experiment modules that
    ``{{ book:experiment-modules }}`` adds.

    Args:
        root: The repository.
        docs: The docs folder.

    Returns:
        The dotted names.
    """
    found = set(experiment_modules(root))
    for page in api_pages(root, docs):
        path = docs / page.uri
        text = page.content if page.content is not None else path.read_text(encoding="utf-8")
        found.update(DOCUMENTED.findall(text))
    return frozenset(found)


# ---------------------------------------------------------------------------------------------
# Reading the book


def read_book(nav: list, root: Path, docs: Path) -> Book:
    """The book's structure: the nav as written, each page's front matter, the API reference.

    Args:
        nav: The nav of ``mkdocs.yml``, before `expand_api_nav`.
        root: The repository (the folder of ``mkdocs.yml``).
        docs: The docs folder.

    Returns:
        The structure.
    """
    pages = nav_pages(nav)
    meta = {entry.page: page_meta(docs, entry.page) for entry in pages}
    return Book(docs, pages, meta, api_pages(root, docs), experiment_modules(root))


class _ConfigLoader(yaml.SafeLoader):
    """A YAML loader for ``mkdocs.yml`` that reads its ``!!python/name:`` tags as None."""


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def load_book(root: Path) -> Book:
    """The structure of the book whose ``mkdocs.yml`` is in `root`, read without mkdocs.

    For the tests and the tools that read the book outside a build: the nav and the docs
    folder come from ``mkdocs.yml`` itself.

    Args:
        root: The repository.

    Returns:
        The structure, as `read_book` makes it in a build.
    """
    text = (root / "mkdocs.yml").read_text(encoding="utf-8")
    config = yaml.load(text, Loader=_ConfigLoader)
    return read_book(config["nav"], root, root / config.get("docs_dir", "docs"))


def expand_api_nav(nav: list, api: list[ApiPage]) -> list:
    """The nav with the API reference's pages after its index page.

    The nav names the reference by its index (``- API reference: api/index.md``); it becomes
    a section: the index first (a section's index page, as Material's ``navigation.indexes``
    shows it), then one page per module, titled with the module's name.

    Args:
        nav: The nav of ``mkdocs.yml``.
        api: The reference's pages (`api_pages`).

    Returns:
        A new nav; the same if it does not name the reference's index at its top level.

    Raises:
        StructureError: If the nav lists API pages by hand: the build makes that list.
    """
    listed = [entry.page for entry in nav_pages(nav) if entry.page.startswith("api/")]
    if listed and listed != [API_INDEX]:
        raise StructureError(
            f"mkdocs.yml's nav lists API pages {listed}: name only the reference's index "
            f"('- API reference: {API_INDEX}'), the build adds a page per module"
        )
    out = []
    for item in nav:
        if isinstance(item, dict) and list(item.values()) == [API_INDEX]:
            (title,) = item
            pages = [{page.title: page.uri} for page in api]
            item = {title: [API_INDEX, *pages]}
        out.append(item)
    return out


def add_api_pages(files: Files, config, book: Book | None) -> None:
    """Add the generated API pages to the site's files (nothing is written into ``docs/``).

    Args:
        files: The site's files.
        config: The mkdocs configuration.
        book: The book's structure (None: no page to add).
    """
    for page in book.api if book else []:
        if page.content is not None and files.get_file_from_path(page.uri) is None:
            files.append(File.generated(config, page.uri, content=page.content))


# ---------------------------------------------------------------------------------------------
# The lists the markers ask for


def link(book: Book, entry: NavPage, page: str) -> str:
    """A Markdown link from `page` to a page of the nav, with the name the lists give it."""
    target = posixpath.relpath(entry.page, posixpath.dirname(page) or ".")
    return f"[{entry.name}]({target})"


def cell(text: object) -> str:
    """A value of the front matter as a table cell: on one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def chapter_map(book: Book, page: str) -> str:
    """The chapter map: every page of the nav, under its part, with what the reader builds.

    The home page and the API pages after the reference's index are left out.

    Args:
        book: The book's structure.
        page: The page the map is on (its links are relative to it).

    Returns:
        A Markdown table: part, chapter, "You will build".
    """
    rows = ["| Part | Chapter | You will build |", "| --- | --- | --- |"]
    shown = group = None
    for entry in book.nav:
        if entry.page == page or (entry.page.startswith("api/") and entry.page != API_INDEX):
            continue
        named = book.meta.get(entry.page, {}).get("part")
        if entry.part is not None:  # a page of a part of the nav
            part, group = entry.part, None
        elif named:  # a top-level page that starts a part of its own ("Foundations")
            part = group = named
        else:  # a top-level page: in the part of the top-level pages before it, or its own
            part = group or entry.name
        builds = cell(book.require(entry.page, "builds"))
        first = f"| {part} |" if part != shown else "| |"
        rows.append(f"{first} {link(book, entry, page)} | {builds} |")
        shown = part
    return "\n".join(rows)


def read_first(book: Book, entry: NavPage, earlier: list[NavPage]) -> str:
    """What to read before a chapter: the names of the chapters its ``read_first`` lists.

    Raises:
        StructureError: If it names a page that is not a chapter the learning path lists
            before it.
    """
    value = book.require(entry.page, "read_first")
    needed = [value] if isinstance(value, str) else list(value)
    names = []
    for item in needed:
        item = str(item)
        if not item.endswith(".md"):
            names.append(item)  # what a reader brings: "Python and a first PyTorch model"
            continue
        target = posixpath.normpath(posixpath.join(posixpath.dirname(entry.page), item))
        before = next((other for other in earlier if other.page == target), None)
        if before is None:
            raise StructureError(
                f"docs/{entry.page}: read_first names {item}, which is not a chapter's core "
                "page before it in the nav"
            )
        names.append(before.name)
    return ", ".join(names)


def learning_path(book: Book, page: str) -> str:
    """The learning path: every chapter's core page, numbered, with what to read first.

    Args:
        book: The book's structure.
        page: The page the path is on.

    Returns:
        A Markdown table: step, chapter, read first, route.

    Raises:
        StructureError: If a chapter's route is neither core nor optional, or it must read a
            chapter that comes after it.
    """
    rows = ["| Step | Chapter | Read first | Route |", "| --- | --- | --- | --- |"]
    chapters = book.core_chapters()
    for number, entry in enumerate(chapters, start=1):
        route = book.require(entry.page, "route")
        if route not in ROUTES:
            raise StructureError(f"docs/{entry.page}: route {route!r} is not one of {ROUTES}")
        first = read_first(book, entry, chapters[: number - 1])
        rows.append(f"| {number} | {link(book, entry, page)} | {cell(first)} | {route} |")
    return "\n".join(rows)


def plan(book: Book, page: str) -> str:
    """The plan of the book: every chapter after `page`, in the nav's order, with its sentence.

    Args:
        book: The book's structure.
        page: The page the plan is on (a chapter: the plan lists those after it).

    Returns:
        A numbered Markdown list.
    """
    chapters = book.core_chapters()
    after = [entry.page for entry in chapters].index(page) + 1 if book.entry(page) else 0
    return "\n".join(
        f"{number}. {link(book, entry, page)}: {cell(book.require(entry.page, 'plan'))}"
        for number, entry in enumerate(chapters[after:], start=1)
    )


def api_index(book: Book, page: str) -> str:
    """The API reference's table: one row per page, with its module's docstring's first line.

    Args:
        book: The book's structure.
        page: The page the table is on.

    Returns:
        A Markdown table: module, what it holds.
    """
    rows = ["| Module | What it holds |", "| --- | --- |"]
    for api in book.api:
        target = posixpath.relpath(api.uri, posixpath.dirname(page) or ".")
        rows.append(f"| [`{api.module}`]({target}) | {cell(api.summary)} |")
    return "\n".join(rows)


def experiment_sections(book: Book, page: str, markdown: str) -> str:
    """A section per module of `attention_book.experiments` that `markdown` does not document.

    Args:
        book: The book's structure.
        page: The page they are on.
        markdown: The page, whose own ``:::`` lines are left out of the sections.

    Returns:
        One mkdocstrings section per module, docstrings only (each chapter shows its
        experiment's source where it explains it).
    """
    own = set(DOCUMENTED.findall(markdown))
    return "\n\n".join(
        f"::: {module}\n    options:\n      show_root_full_path: true\n      show_source: false"
        for module in book.experiment_modules
        if module not in own
    )


def insert_structure(markdown: str, page: str, book: Book | None) -> str:
    """Replace each ``{{ book:NAME }}`` of a page by the list it names.

    Args:
        markdown: The page's Markdown.
        page: The page, relative to ``docs/`` (links are made relative to it).
        book: The book's structure (None: a page with a marker fails).

    Returns:
        The Markdown with the lists in place.

    Raises:
        StructureError: If the page names an unknown list, or a page the list shows lacks a
            field of its front matter, naming the page.
    """
    makers = {
        "chapter-map": lambda: chapter_map(book, page),
        "learning-path": lambda: learning_path(book, page),
        "plan": lambda: plan(book, page),
        "api-index": lambda: api_index(book, page),
        "experiment-modules": lambda: experiment_sections(book, page, markdown),
    }

    def replace(match: re.Match) -> str:
        if book is None:
            raise StructureError(f"docs/{page}: {match[0]} needs the book's structure")
        maker = makers.get(match["name"])
        if maker is None:
            raise StructureError(
                f"docs/{page}: unknown list {match['name']!r} ({{{{ book:NAME }}}} takes one of "
                f"{', '.join(makers)})"
            )
        return maker()

    return MARKER.sub(replace, markdown)


def page_markdown(book: Book, page: str) -> str:
    """A page's Markdown with the book's lists in place, as the build renders it.

    Args:
        book: The book's structure.
        page: The page, relative to the docs folder.

    Returns:
        The Markdown, its front matter left out and its markers replaced.
    """
    text = (book.docs / page).read_text(encoding="utf-8")
    return insert_structure(get_data(text)[0], page, book)
