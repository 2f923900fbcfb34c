"""Every module of the package has its place in the API reference, and every API page its place
in the navigation and in the reference's table.

The API pages are one ``::: module`` line (or a few) each: what they document is generated
from the docstrings. This test keeps the list of pages honest: a new module without a page, a
page missing from the nav of ``mkdocs.yml`` or from the table of ``docs/api/index.md``, fails.
The figure modules (drawing code for the site) and ``__main__`` modules are not documented one
by one: ``attention_book.figures`` explains them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"


def package_modules() -> list[str]:
    """Every module to document (the package's own __init__ is the reference's index)."""
    names = []
    for path in sorted((ROOT / "attention_book").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or (parts[1:2] == ("figures",) and parts[-1] != "__init__"):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return [name for name in names if name != "attention_book"]


def documented_modules(api: Path = API) -> set[str]:
    found = set()
    for page in api.glob("*.md"):
        found |= set(re.findall(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M))
    return found


def test_every_module_is_documented_on_an_api_page():
    missing = sorted(set(package_modules()) - documented_modules())
    assert not missing, f"add an API page (docs/api/<module>.md with '::: module') for {missing}"


def test_every_api_page_is_in_the_nav_and_in_the_table():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    table = (API / "index.md").read_text(encoding="utf-8")
    for page in sorted(API.glob("*.md")):
        assert f"api/{page.name}" in nav, f"{page.name} is not in the nav of mkdocs.yml"
        if page.name != "index.md":
            assert f"]({page.name})" in table, f"{page.name} is not in docs/api/index.md's table"


def test_the_checks_see_a_module_without_a_page(tmp_path):
    assert "attention_book.store" in package_modules()
    assert "attention_book.figures" in package_modules()
    assert "attention_book.figures.vit" not in package_modules()
    (tmp_path / "store.md").write_text("# store\n\n::: attention_book.store\n")
    assert documented_modules(tmp_path) == {"attention_book.store"}
    assert "attention_book.timing" in set(package_modules()) - documented_modules(tmp_path)
