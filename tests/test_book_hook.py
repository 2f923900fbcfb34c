"""The mkdocs hook (docs/hooks/book.py): notebooks from chapters, figure discovery."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

from attention_book.figures import figure_functions, find_figure

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("book_hook", ROOT / "docs" / "hooks" / "book.py")
book = importlib.util.module_from_spec(spec)
spec.loader.exec_module(book)

CHAPTER = """# A chapter

Some prose with $x^2$ and a figure ![w](../figures/home_attention_weights.svg).
See [the next chapter](bahdanau.md#the-experiment) and [the API](../api/masking.md).

```python title="attention_book/plotting.py"
--8<-- "attention_book/plotting.py:show_heatmaps"
```

```python
print(1 + 1)
```

<!--pytest-codeblocks:expected-output-->
```text
2
```

??? success "Solution"

    <!--pytest.mark.skip(reason="an example")-->
    ```python
    print("solution")
    ```
"""


def test_chapter_notebook_turns_runnable_blocks_into_code_cells():
    notebook = book.chapter_notebook(CHAPTER, "chapters/a/", "https://example.org/")
    nbformat.validate(notebook)
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert code == ["print(1 + 1)", 'print("solution")']
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "def show_heatmaps(" in markdown  # the included source is shown as a listing
    assert "https://example.org/figures/home_attention_weights.svg" in markdown
    assert "(https://example.org/chapters/bahdanau/#the-experiment)" in markdown
    assert "(https://example.org/api/masking/)" in markdown
    assert "pytest" not in markdown  # test marks and expected output are not for readers
    assert "\n2\n" not in markdown


def test_chapter_notebook_is_stable():
    first = nbformat.writes(book.chapter_notebook(CHAPTER, "a/", ""))
    assert first == nbformat.writes(book.chapter_notebook(CHAPTER, "a/", ""))


def test_figure_links_are_found_only_in_image_links():
    text = "![a](../figures/one.svg) and `figures/NAME.svg` and [b](figures/two.svg)"
    assert book.FIGURE_LINK.findall(text) == ["one", "two"]


def test_package_hash_changes_with_the_source(tmp_path, monkeypatch):
    (tmp_path / "attention_book").mkdir()
    source = tmp_path / "attention_book" / "m.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(book, "ROOT", tmp_path)
    monkeypatch.setattr(book, "PACKAGE", tmp_path / "attention_book")
    before = book.package_hash()
    assert book.package_hash() == before
    source.write_text("x = 2\n")
    changed = book.package_hash()
    assert changed != before
    # A committed benchmark result (e.g. a GPU run) changes the figures that read it.
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "run.json").write_text("{}")
    assert book.package_hash() != changed


def referenced(pattern) -> set[str]:
    """Names a page references with the hook's own patterns."""
    names = set()
    for page in (ROOT / "docs").rglob("*.md"):
        names.update(pattern.findall(page.read_text(encoding="utf-8")))
    return names


@pytest.mark.parametrize(
    "name", sorted(referenced(book.FIGURE_LINK) | referenced(book.BUILD_FRAGMENT))
)
def test_every_figure_a_page_shows_has_a_function(name):
    assert callable(find_figure(name))


def test_every_listed_figure_is_shown_by_a_page():
    shown = referenced(book.FIGURE_LINK) | referenced(book.BUILD_FRAGMENT)
    assert sorted(set(figure_functions()) - shown) == []


def test_render_passes_the_results_directory(tmp_path):
    # The package does not know where the repository keeps benchmark results; the hook does.
    book.render(["flash_memory_rss"], tmp_path)
    table = (tmp_path / "flash_memory_rss.md").read_text(encoding="utf-8")
    assert "Run of `benchmarks/flash_memory.py`" in table
