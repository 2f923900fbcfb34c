"""The one Markdown reader of the build (booktools.markdown), and that no other module has one.

Every tool that looks at a page's code blocks (the plugin's listings, notes and notebooks, the
snippet runner, the browser check, the docs policy test) reads them through
`booktools.markdown`. The last tests scan the repository's Python files and fail if another
module compiles a regex that matches a code fence, and show that scan failing on a broken copy.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from repo import ROOT

from booktools.markdown import Skip, fences, imported_packages, pieces, rewrite, runnable_blocks

PAGE = """# A page

Some prose.

```python
print(1)
```

<!--pytest-codeblocks:expected-output-->
```text
1
```

<!--pytest.mark.skip(reason="starts a server")-->

```bash
make serve
```

??? success "Solution"

    <!--pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU")-->
    ```python
    x = 1
        indented = True
    ```

<!--pytest-codeblocks:cont-->
```python
print(x)
```

````markdown
```python
not a block of its own
```
````

```python title="attention_book/masking.py"
--8<-- "attention_book/masking.py:masked_softmax"
```
"""


def test_every_fence_is_found_with_its_lines_and_info():
    found = fences(PAGE)
    assert [fence.info for fence in found] == [
        "python", "text", "bash", "python", "python", "markdown",
        'python title="attention_book/masking.py"',
    ]  # fmt: skip
    first = found[0]
    assert (first.line, first.end, first.body) == (5, 7, ("print(1)",))
    assert found[5].ticks == "````" and found[5].body[0] == "```python"  # a longer run nests


def test_marks_output_and_continuation_belong_to_the_fence_after_them():
    code, output, serve, solution, continued, _, listing = fences(PAGE)
    assert code.has_output and output.is_output and not output.runnable
    assert code.runnable and not output.has_output
    assert serve.skip == Skip("starts a server")  # a blank line between mark and fence
    assert solution.skip == Skip("needs a GPU", 'not __import__("torch").cuda.is_available()')
    assert continued.continues and not solution.continues
    assert listing.listing == "attention_book/masking.py" and not listing.runnable
    assert output.follows == "python"  # no prose between them
    assert serve.follows == "text"  # only a mark and blank lines between the two
    assert fences("```\na\n```\n\nprose\n\n```\nb\n```")[1].follows is None


def test_a_fence_in_an_admonition_is_dedented_by_its_indentation():
    solution = fences(PAGE)[3]
    assert solution.indent == "    "
    assert solution.body == ("x = 1", "    indented = True")  # its own indentation stays
    assert "x = 1\n    indented = True" in runnable_blocks(PAGE)


def test_runnable_blocks_are_the_bare_python_fences_that_are_not_output():
    assert runnable_blocks(PAGE) == ["print(1)", "x = 1\n    indented = True", "print(x)"]


def test_an_unclosed_fence_runs_to_the_end_of_the_page():
    (fence,) = fences("text\n```python\nprint(1)\nprint(2)")
    assert not fence.closed and fence.body == ("print(1)", "print(2)") and fence.end == 4


def test_inline_code_at_the_start_of_a_line_is_no_fence():
    assert fences("```inline``` code\n\nprose") == []


def test_pieces_give_back_the_page_and_rewrite_changes_only_the_fences_asked():
    assert "\n".join(p if isinstance(p, str) else "<fence>" for p in pieces("a\n```\nb\n```\nc"))
    assert rewrite(PAGE, lambda fence, lines: None) == PAGE
    shouted = rewrite(PAGE, lambda f, lines: [line.upper() for line in lines] if f.info == "bash"
                      else None)  # fmt: skip
    assert (
        "MAKE SERVE" in shouted
        and shouted.replace("MAKE SERVE", "make serve").replace("```BASH", "```bash") == PAGE
    )


# --- one reader: no other module uses a fence regex ------------------------------------------

#: Where the repository's Python lives (not .venv, site or caches).
SOURCES = ("attention_book", "booktools", "tests", "benchmarks", "docs")


#: The functions of ``re`` that take a pattern first.
PATTERN_FUNCTIONS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub",
                     "subn", "split"}  # fmt: skip


def fence_regexes(root: Path) -> list[str]:
    """Each call of ``re`` in the repository's Python whose pattern can match a code fence.

    Every function of ``re`` that takes a pattern counts (`PATTERN_FUNCTIONS`), not only
    ``re.compile``: ``re.findall(r"^```python...", page)`` reads fences as much as a compiled
    pattern does.

    A pattern is tried on the fence lines the book uses (three backticks or tildes, with or
    without an info string and indentation, and a whole block); one whose match holds the
    fence's backticks or tildes is a fence regex.
    """
    samples = ["```", "```python", '    ```python title="x.py"', "~~~", "````text",
               "```python\nx = 1\n```"]  # fmt: skip
    found = []
    files = [root / "conftest.py", *(p for d in SOURCES for p in sorted((root / d).rglob("*.py")))]
    for path in files:
        if not path.is_file() or path == root / "booktools" / "markdown.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in PATTERN_FUNCTIONS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                continue
            try:
                pattern = re.compile(node.args[0].value, re.M | re.S)
            except re.error:
                continue
            # It matches fence characters themselves (a pattern like \s* matches any text).
            matches = [pattern.search(sample) for sample in samples]
            if any(m and ("```" in m[0] or "~~~" in m[0]) for m in matches):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.args[0].value}")
    return found


def test_no_module_but_the_reader_uses_a_fence_regex():
    assert fence_regexes(ROOT) == [], "read fences with booktools.markdown instead"


def test_the_scan_finds_a_fence_regex_in_a_broken_copy(tmp_path):
    (tmp_path / "booktools").mkdir()
    (tmp_path / "booktools" / "markdown.py").write_text('import re\nF = re.compile(r"^`{3,}")\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'import re\nFENCE = re.compile(r"^(?P<ticks>`{3,})(?P<info>.*)$")\n'
        'WORD = re.compile(r"\\bword\\b")\n'
        'blocks = re.findall(r"^```python\\n(.*?)^```", "", re.M)\n'
    )
    assert fence_regexes(tmp_path) == [
        "tests/test_x.py:2: ^(?P<ticks>`{3,})(?P<info>.*)$",
        "tests/test_x.py:4: ^```python\\n(.*?)^```",
    ]


@pytest.mark.parametrize("module", ["booktools.checks.snippets", "booktools.plugin.notebooks",
                                    "booktools.plugin.notes", "booktools.plugin.listings",
                                    "booktools.browser.page"])  # fmt: skip
def test_the_tools_read_fences_through_the_reader(module):
    import importlib

    source = Path(importlib.import_module(module).__file__).read_text(encoding="utf-8")
    assert "from booktools.markdown import" in source


@pytest.mark.parametrize(
    ("code", "packages"),
    [
        ("import torch.nn as nn\nfrom attention_book import m", {"torch", "attention_book"}),
        ("def f():\n    import numpy\n", {"numpy"}),
        ("from . import x\nimport os, matplotlib.pyplot as plt", {"os", "matplotlib"}),
        ("this is not Python", set()),
    ],
)  # fmt: skip
def test_imported_packages_are_the_top_level_names_a_block_imports(code, packages):
    assert imported_packages(code) == packages
