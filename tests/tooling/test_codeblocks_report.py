"""The snippet runner's failure reports (booktools.checks.snippets) point at the page line.

Each test writes a small page into a temporary folder beside a copy of the repository's
conftest (which loads the runner), runs ``pytest --codeblocks`` on it in a fresh process, and
reads the report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT


def run_page(tmp_path: Path, page: str) -> str:
    """Run the blocks of `page` as `make test` does; return pytest's report."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "page.md").write_text(page, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--codeblocks", "page.md", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # where booktools is
        capture_output=True,
        text=True,
    )
    return result.stdout + result.stderr


ASSERT_PAGE = """# A page

```python
x = 3
print("computed x")
assert x == 4
```
"""


def test_a_failing_assert_shows_the_assertion_its_values_and_the_page_line(tmp_path):
    report = run_page(tmp_path, ASSERT_PAGE)
    assert "AssertionError at page.md:6" in report
    assert "    assert x == 4" in report
    assert "assert 3 == 4" in report  # pytest's assertion rewriting: the values compared
    assert "printed before the failure:\ncomputed x" in report


def test_an_exception_names_its_type_message_and_line(tmp_path):
    page = "# A page\n\nSome prose.\n\n```python\nimport math\n\nmath.sqrt(-1)\n```\n"
    report = run_page(tmp_path, page)
    assert "ValueError at page.md:8" in report
    assert "math.sqrt(-1)" in report
    assert "math domain error" in report
    assert "printed before the failure" not in report  # it printed nothing


def test_an_error_in_a_continued_block_points_at_the_continuation(tmp_path):
    page = """# A page

```python
def lookup():
    return {}["missing"]
```

<!--pytest-codeblocks:cont-->
```python
print("before the call")
lookup()
```
"""
    report = run_page(tmp_path, page)
    assert "KeyError at page.md:5" in report  # inside lookup, in the first fence
    assert 'return {}["missing"]' in report
    assert "before the call" in report


def test_an_error_in_the_package_says_where_it_was_raised(tmp_path):
    page = """# A page

```python
import torch

from attention_book.masking import masked_softmax

masked_softmax(torch.ones(2, 3), torch.tensor([1, 2, 3]))
```
"""
    report = run_page(tmp_path, page)
    assert "ValueError at page.md:8" in report
    assert "raised in " in report and "attention_book" in report


def test_an_expected_output_mismatch_is_a_unified_diff(tmp_path):
    page = """# A page

```python
for i in range(3):
    print(i)
```

<!--pytest-codeblocks:expected-output-->
```text
0
one
2
```
"""
    report = run_page(tmp_path, page)
    assert "the output differs from the expected output of the block at page.md:3" in report
    assert "--- expected output (page line 10)" in report
    assert "+++ printed by the block" in report
    assert "-one\n+1\n" in report


@pytest.mark.parametrize(
    "page",
    [
        "# ok\n\n```python\nprint(1)\n```\n\n<!--pytest-codeblocks:expected-output-->\n"
        "```text\n1\n```\n",
        '# ok\n\n<!--pytest.mark.skip(reason="not here")-->\n```python\nraise SystemExit\n```\n',
        "# ok\n\n```bash\necho hi\n```\n",
    ],
)
def test_passing_and_skipped_blocks_still_pass(tmp_path, page):
    report = run_page(tmp_path, page)
    assert " failed" not in report and ("1 passed" in report or "1 skipped" in report)


def test_each_block_starts_from_a_fresh_session(tmp_path):
    # A reader copies one block into a fresh Python session: a block that needs what an
    # earlier block of the page set (here an environment variable) fails, as it would there.
    page = """# A page

```python
import os

os.environ["BOOK_TEST_SETTING"] = "set by the first block"
```

```python
import os

print(os.environ["BOOK_TEST_SETTING"])
```
"""
    report = run_page(tmp_path, page)
    assert "KeyError at page.md:12" in report
    assert "1 failed, 1 passed" in report


def test_a_page_that_imports_no_heavy_package_does_not_load_one(tmp_path):
    # The runner imports torch and the package once before the blocks fork, but only for a run
    # whose blocks import one of them: a page of plain Python starts in about a second.
    light = "# A page\n\n```python\nimport sys\n\nassert 'torch' not in sys.modules\n```\n"
    assert "1 passed" in run_page(tmp_path, light)
    heavy = light + "\n```python\nimport numpy\n```\n"
    report = run_page(tmp_path, heavy.replace("assert 'torch' not in", "assert 'torch' in"))
    assert "2 passed" in report, report


def test_a_shown_output_wider_than_a_code_block_is_reported(tmp_path):
    from booktools.checks.snippets import marked_printed, wide_line_report

    page = tmp_path / "page.md"
    text = "Text.\n\n```python\nprint(1)\n```\n<!--book:printed-->\n\n```python\nx = 1\n```\n"
    page.write_text(text)
    assert marked_printed(page, 4)  # the block whose code ends on line 4
    assert not marked_printed(page, 9)
    assert wide_line_report("short\n" + "y" * 100, "page.md:3") is None
    report = wide_line_report("short\n" + "y" * 120, "page.md:3")
    assert report.startswith("the block at page.md:3 printed a line of 120 characters, over")


def test_update_expected_rewrites_the_output_that_differs_and_nothing_else(tmp_path):
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    page = tmp_path / "page.md"
    indented = "    "
    page.write_text(
        "Intro.\n\n```python\nprint('a')\nprint('b')\n```\n\n"
        "<!--pytest-codeblocks:expected-output-->\n```text\nold\n```\n\n"
        "Kept.\n\n```python\nprint('same')\n```\n\n"
        "<!--pytest-codeblocks:expected-output-->\n```text\nsame\n```\n\n"
        f"1. A list item:\n\n{indented}```python\n{indented}print('x')\n{indented}print('')\n"
        f"{indented}print('y')\n{indented}```\n\n"
        f"{indented}<!--pytest-codeblocks:expected-output-->\n{indented}```text\n"
        f"{indented}one\n{indented}two\n{indented}three\n{indented}four\n{indented}```\n",
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--codeblocks"]

    def run(*options: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}  # where booktools is
        return subprocess.run(
            [*command, *options, "page.md"], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    assert run().returncode == 1  # two blocks differ
    updated = run("--update-expected")
    assert updated.returncode == 0, updated.stdout[-2000:]
    assert "rewrote the expected output of" in updated.stdout
    assert "page.md at lines 9, 33" in updated.stdout
    text = page.read_text(encoding="utf-8")
    assert "```text\na\nb\n```\n\nKept." in text
    assert "```text\nsame\n```" in text
    assert f"{indented}```text\n{indented}x\n{indented}\n{indented}y\n{indented}```\n" in text
    passed = run()
    assert passed.returncode == 0, passed.stdout[-2000:]
