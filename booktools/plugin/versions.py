"""The line under each chapter's title that says which versions its code was tested with.

The versions are the pins of ``requirements.txt``, which ``make test`` installs before it runs
every block of the chapter: PyTorch and NumPy for every chapter (the package is built on them),
and each other pinned package that the chapter's runnable blocks import themselves (matplotlib,
Triton, ...). Python's version is that of the build, which ``make test`` runs in the same
environment as the snippets. The plugin writes the line (`versions_line`); no page types it, so a
new pin changes every chapter at once.
"""

from __future__ import annotations

import functools
import re
import sys
from importlib.metadata import packages_distributions

from booktools import ROOT
from booktools.markdown import imported_packages, runnable_blocks

#: The pinned packages every chapter's code runs on.
CORE = ("torch", "numpy")

#: How the line names a package (its distribution's name otherwise).
NAMES = {"torch": "PyTorch", "numpy": "NumPy", "triton": "Triton", "sacrebleu": "sacreBLEU"}

#: A pin of requirements.txt: ``name==version``.
PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>[^\s;#]+)")


def pins(requirements: str) -> dict[str, str]:
    """The exact pins of a requirements file, by normalized distribution name.

    Args:
        requirements: The file's text.

    Returns:
        ``{name: version}``, names lower-cased with ``_`` and ``.`` as ``-``.
    """
    found = {}
    for line in requirements.splitlines():
        if match := PIN.match(line):
            found[normalized(match["name"])] = match["version"]
    return found


def normalized(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(markdown: str) -> set[str]:
    """The distributions whose modules the runnable blocks of a page import.

    Args:
        markdown: The page's Markdown.

    Returns:
        Normalized distribution names (those of installed packages only).
    """
    modules = set().union(*map(imported_packages, runnable_blocks(markdown)))
    owners = _owners()
    return {normalized(dist) for module in modules for dist in owners.get(module, ())}


@functools.cache
def _owners() -> dict[str, list[str]]:
    """`packages_distributions` of this environment, read once (it scans every installed one)."""
    return packages_distributions()


def versions_line(markdown: str, requirements: str | None = None) -> str:
    """The sentence that says which versions a chapter was tested with.

    Args:
        markdown: The chapter's Markdown (its runnable blocks' imports are read).
        requirements: The text of ``requirements.txt`` (the repository's by default).

    Returns:
        One Markdown paragraph, e.g. "*Tested with Python 3.11, PyTorch 2.13.0 and NumPy 2.4.6
        (the versions pinned in requirements.txt).*"
    """
    if requirements is None:
        requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    pinned = pins(requirements)
    others = sorted(imported_distributions(markdown) & pinned.keys() - set(CORE))
    names = [name for name in CORE if name in pinned] + others
    parts = [f"Python {sys.version_info.major}.{sys.version_info.minor}"]
    parts += [f"{NAMES.get(name, name)} {pinned[name]}" for name in names]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]
    return f"*Tested with {listed} (the versions pinned in `requirements.txt`).*"


def main() -> None:
    """Print each chapter's line (``python -m booktools.plugin.versions``)."""
    for page in sorted((ROOT / "docs" / "chapters").glob("*.md")):
        print(f"{page.name}: {versions_line(page.read_text(encoding='utf-8'))}")


if __name__ == "__main__":
    sys.exit(main())
