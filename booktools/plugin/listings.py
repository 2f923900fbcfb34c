"""Listings of the package's source in the chapters: the code a reader needs, linked to its API.

A chapter shows the package's code with a titled fence whose body names sections of a file::

    ```python title="attention_book/multihead.py"
    --8<-- "attention_book/multihead.py:MultiHeadAttention"
    ```

The plugin expands those lines itself, before pymdownx.snippets would, so that the listing reads
like the idea it shows (as in the Annotated Transformer): each docstring is cut to its summary
line, the Args/Returns/Shapes/Raises sections stay in the source and on the API page, and the
section markers of nested sections are dropped. Under the listing, a line links each shown
class or function to its entry in the API reference (a mkdocs-autorefs link, which the strict
build checks). The notebook of a chapter shows the same shortened listings.
"""

from __future__ import annotations

import ast
import re
import textwrap
from functools import cache

from mkdocs.exceptions import PluginError

from booktools import ROOT
from booktools.markdown import Fence, rewrite
from booktools.plugin import structure

#: An include line of pymdownx.snippets: ``--8<-- "path"`` or ``--8<-- "path:section"``.
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$')
MARKER = re.compile(r"^\s*#\s*--8<--\s*\[(?:start|end):[\w-]+\]\s*$")


def section_source(path: str, section: str | None, page: str = "a page") -> str:
    """The text of a ``--8<--`` section of a file of the repository, as pymdownx.snippets cuts it.

    Args:
        path: The file, relative to the repository (``attention_book/x.py``).
        section: The section name, or None for the whole file.
        page: The page that includes it, named in errors.

    Returns:
        The section's lines, dedented, without the marker lines of nested sections.

    Raises:
        PluginError: If the file or the section does not exist, naming the page.
    """
    file = ROOT / path
    include = f'--8<-- "{path}{":" + section if section else ""}"'
    if not file.is_file():
        raise PluginError(f"{page}: {include}: no file {path}")
    text = file.read_text(encoding="utf-8")
    if section:
        start, end = f"--8<-- [start:{section}]", f"--8<-- [end:{section}]"
        if start not in text or end not in text.split(start, 1)[1]:
            raise PluginError(
                f"{page}: {include}: no section {section!r} in {path} "
                f"(it needs the lines '# {start}' and '# {end}')"
            )
        text = text.split(start, 1)[1].split("\n", 1)[1].split(end, 1)[0]
        text = text.rsplit("\n", 1)[0]
    lines = [line for line in text.splitlines() if not MARKER.match(line)]
    return textwrap.dedent("\n".join(lines)).strip("\n")


def shorten_docstrings(source: str) -> str:
    """Cut every docstring of `source` to its summary line.

    Functions, classes and methods keep a one-line ``\"\"\"Summary.\"\"\"``; the rest of each
    docstring (Args, Returns, Shapes, Raises, examples) is left to the API page. Source that
    does not parse on its own is returned unchanged.

    Args:
        source: Python source code.

    Returns:
        The same code with short docstrings.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines()
    replacements = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first = node.body[0] if node.body else None
        if not (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            continue
        summary = (ast.get_docstring(node) or "").strip().split("\n\n")[0]
        summary = " ".join(summary.split())
        indent = re.match(r"\s*", lines[first.lineno - 1])[0]
        short = f'{indent}"""{summary}"""' if summary else None
        replacements.append((first.lineno - 1, first.end_lineno, short))
    for start, end, short in sorted(replacements, reverse=True):
        lines[start:end] = [short] if short else []
    return "\n".join(lines)


@cache
def documented_modules() -> frozenset[str]:
    """The modules the API reference documents (`booktools.plugin.structure`)."""
    return structure.documented_modules(ROOT, ROOT / "docs")


def exported_names(path: str) -> set[str] | None:
    """The names in a module's ``__all__``, or None if it has none."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return None


def api_identifiers(path: str, source: str) -> list[str]:
    """The API-reference identifiers of the public classes and functions a listing shows.

    Args:
        path: The listed file (``attention_book/x.py``).
        source: The listing's source.

    Returns:
        ``module.Name`` for each top-level class or function of `source` that the API
        reference documents, in order; empty if the module has no API entry.
    """
    module = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    if module not in documented_modules():
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    exported = exported_names(path)
    names = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
        and (exported is None or node.name in exported)
    ]
    return [f"{module}.{name}" for name in names]


def listing(path: str, includes: list[str] | tuple[str, ...], page: str) -> tuple[str, list[str]]:
    """The shortened source of a titled fence's include lines, and the API identifiers shown.

    Args:
        path: The file named by the fence's title.
        includes: The fence's body lines (``--8<--`` include lines).
        page: The page, named in errors.

    Returns:
        (source, identifiers).

    Raises:
        PluginError: If an include line names a missing file or section.
    """
    parts, identifiers = [], []
    for line in includes:
        match = SNIPPET.match(line.strip())
        if not match:
            continue
        source = section_source(match["path"], match["section"], page)
        parts.append(shorten_docstrings(source))
        identifiers += api_identifiers(match["path"], source)
    return "\n\n\n".join(parts), identifiers


def expand_listings(markdown: str, page: str) -> str:
    """Replace the include lines of every titled fence by the shortened source, with API links.

    Args:
        markdown: A page's Markdown.
        page: The page's path, named in errors (``docs/chapters/x.md``).

    Returns:
        The Markdown with listings expanded and an API line under each listing, followed by a
        blank line.
    """

    def expand(fence: Fence, lines: list[str]) -> list[str] | None:
        if fence.listing is None:
            return None
        source, identifiers = listing(fence.listing, fence.body, page)
        indent = fence.indent
        out = [lines[0], *(f"{indent}{line}" if line else "" for line in source.split("\n"))]
        out.append(lines[-1] if fence.closed else f"{indent}{fence.ticks}")
        if identifiers:
            links = " · ".join(f"[`{name.rsplit('.', 1)[1]}`][{name}]" for name in identifiers)
            # The blank line after the marker ends its paragraph even when the page's prose
            # follows the closing fence at once; without it, attr_list leaves the marker as text.
            out += ["", f"{indent}API reference: {links}", f"{indent}{{: .listing-api }}", ""]
        return out

    return rewrite(markdown, expand)
