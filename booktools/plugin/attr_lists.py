"""A check of the built pages: no attribute list of Markdown may be left as text.

Python-Markdown's ``attr_list`` extension reads ``{: .class }`` (or ``{: #id }``,
``{: key="value" }``) at the end of a block and turns it into attributes of that block. When
the marker is not where the extension looks for it (a line of prose follows it without a blank
line, say), it stays in the page as text, and the reader sees ``{: .listing-api }`` under a
listing. The build fails on any such marker left in a page's HTML, naming the page; code is
not looked at (a format string such as ``"{:.2f}"`` in a listing is code, not a marker).
"""

from __future__ import annotations

import html
import re

from mkdocs.exceptions import PluginError

#: Elements whose content is not prose: code, scripts, styles and comments.
NOT_PROSE = re.compile(
    r"<(pre|code|script|style|textarea)\b[^>]*>.*?</\1\s*>|<!--.*?-->", re.S | re.I
)
TAG = re.compile(r"<[^>]+>")
#: What is left of an attribute list: ``{:`` followed by anything up to the closing brace.
MARKER = re.compile(r"\{:[^{}\n]*\}?")


def stray_attribute_lists(page_html: str) -> list[str]:
    """The attribute-list markers left as text in a page's HTML, each with its context.

    Args:
        page_html: The HTML of one built page.

    Returns:
        One excerpt per marker (the marker and up to 40 characters of text before it), in the
        order of the page; empty when there is none.
    """
    text = html.unescape(TAG.sub(" ", NOT_PROSE.sub(" ", page_html)))
    text = " ".join(text.split())
    found = []
    for match in MARKER.finditer(text):
        before = text[max(0, match.start() - 40) : match.start()]
        found.append(f"...{before}{match.group(0)}")
    return found


def check_attribute_lists(page_html: str, page: str) -> None:
    """Fail the build if a page shows an attribute-list marker as text.

    Args:
        page_html: The HTML of one built page.
        page: The page's source, named in the error (``chapters/x.md``).

    Raises:
        PluginError: If a marker is left, naming the page and quoting each marker.
    """
    stray = stray_attribute_lists(page_html)
    if stray:
        quoted = "; ".join(repr(s) for s in stray)
        raise PluginError(
            f"docs/{page}: {len(stray)} attribute list(s) left as text in the built page "
            f"(a '{{: ... }}' marker must end its block: put a blank line after it): {quoted}"
        )
