"""Chapter notebooks run from top to bottom on a CPU, as a reader downloads them.

`make notebooks` runs every chapter's notebook (`python -m booktools.checks.notebooks`); this file
checks how skipped blocks become cells, that a notebook is the same file from one build to
the next, and runs the cheapest chapter's notebook end to end.
"""

from __future__ import annotations

import nbformat
from repo import ROOT

from booktools.checks.notebooks import page_notebook, run_notebook
from booktools.plugin.notebooks import chapter_notebook, jupytext_notebook

PAGE = """# A chapter

<!--pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")-->
```python
x = 1
print("on a GPU")
```

<!--pytest.mark.skip(reason="starts a server")-->
```python
serve_forever()
```

```python
print("always")
```
"""


def test_a_block_skipped_without_a_gpu_becomes_a_guarded_cell():
    notebook = chapter_notebook(PAGE, "chapters/a/", "", "docs/chapters/a.md")
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    guarded, always = code
    assert 'if not (not __import__("torch").cuda.is_available()):\n    x = 1\n' in guarded
    assert "print('Skipped: needs a CUDA GPU.')" in guarded
    assert always == 'print("always")'
    text = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "serve_forever()" in text and "*Not run here: starts a server.*" in text


def test_the_guarded_cell_runs_and_says_why_it_skipped(capsys):
    notebook = chapter_notebook(PAGE, "chapters/a/", "", "docs/chapters/a.md")
    guarded = next(cell.source for cell in notebook.cells if cell.cell_type == "code")
    exec(guarded, {})
    import torch

    expected = "on a GPU" if torch.cuda.is_available() else "Skipped: needs a CUDA GPU."
    assert capsys.readouterr().out.strip() == expected


def test_the_cheapest_chapter_notebook_runs_from_top_to_bottom():
    # The attention-cues chapter trains nothing: its notebook runs in seconds on a CPU.
    notebook = page_notebook(ROOT / "docs" / "chapters" / "attention-cues.md")
    assert sum(cell.cell_type == "code" for cell in notebook.cells) >= 5
    run_notebook(notebook, timeout=300)  # raises CellExecutionError on the first failing cell


def test_the_quick_tour_notebook_is_the_same_file_from_one_build_to_the_next():
    """Its cells keep their ids (jupytext draws new random ones each time it converts)."""
    tour = ROOT / "docs" / "quick-tour.py"
    first, second = (nbformat.writes(jupytext_notebook(tour)) for _ in range(2))
    assert first == second
    assert [cell["id"] for cell in jupytext_notebook(tour).cells][:2] == ["cell-0", "cell-1"]
