"""Docs policy: no code block in the book may silently escape execution.

pytest-codeblocks runs a fence only when its info string is exactly ``python``, ``sh`` or
``bash``. Every other fence in docs/ and README.md must be one of:

- an include of package source (``python title="attention_book/..."`` whose body is only
  ``--8<--`` lines naming existing sections), which tests/ covers;
- the expected output of the block above it (after ``<!--pytest-codeblocks:expected-output-->``);
- plain ``text``, but not right after a runnable block: output shown there would never be
  compared with what the block prints (stale numbers), so it needs the expected-output marker.

A skipped block must say why: ``<!--pytest.mark.skip(reason="...")-->``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from booktools.markdown import fences

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

SNIPPET = re.compile(r'^--8<-- "(?P<path>attention_book/[^":]+\.py)(?::(?P<section>[\w-]+))?"$')
EXECUTED = {"python", "sh", "bash"}


def section_exists(path: str, section: str | None) -> bool:
    source = ROOT / path
    if not source.exists():
        return False
    text = source.read_text(encoding="utf-8")
    return section is None or (
        f"--8<-- [start:{section}]" in text and f"--8<-- [end:{section}]" in text
    )


def problems(text: str) -> list[str]:
    """What breaks the policy in one Markdown text, as 'line N: why' messages."""
    found = []
    for fence in fences(text):
        where = f"line {fence.line}: ```{fence.info}"
        if any(m.startswith("pytest-codeblocks:expected-output") for m in fence.marks):
            continue
        for mark in fence.marks:
            if mark.startswith("pytest-codeblocks:skip") or (
                mark.startswith("pytest.mark.skip") and not re.search(r"reason\s*=\s*\S", mark)
            ):
                found.append(f"{where}: a skipped block must state its reason: {mark}")
        if fence.info == "text" and fence.follows in EXECUTED:
            found.append(
                f"{where}: output right after a runnable block is never checked; mark it "
                "<!--pytest-codeblocks:expected-output--> (or put prose between the two)"
            )
            continue
        if fence.info in EXECUTED or fence.info == "text":
            continue
        title = re.fullmatch(r'python title="(?P<path>attention_book/[^"]+\.py)"', fence.info)
        if title:
            includes = [SNIPPET.match(line.strip()) for line in fence.body if line.strip()]
            if not includes or not all(includes):
                found.append(f"{where}: a titled fence may only include package source")
            for include in filter(None, includes):
                if include["path"] != title["path"]:
                    found.append(f"{where}: title names another file than {include['path']}")
                if not section_exists(include["path"], include["section"]):
                    found.append(f"{where}: no section {include['section']!r} in {include['path']}")
            continue
        found.append(
            f"{where}: pytest-codeblocks would silently not run this block; use a bare "
            "```python, ```bash or ```sh fence, or a titled include of package source"
        )
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fence_runs_or_says_why_not(page: Path):
    assert problems(page.read_text(encoding="utf-8")) == []


# The checker itself must be able to fail.

BAD_FENCES = [
    "```py\nprint(1)\n```",
    "```python3\nprint(1)\n```",
    "```pycon\n>>> 1\n```",
    '```python hl_lines="1"\nprint(1)\n```',
    "```{.python}\nprint(1)\n```",
    '```python title="attention_book/plotting.py"\nprint("not an include")\n```',
    '```python title="attention_book/plotting.py"\n--8<-- "attention_book/plotting.py:nope"\n```',
    "<!--pytest.mark.skip-->\n```python\nprint(1)\n```",
    "<!--pytest-codeblocks:skip-->\n```python\nprint(1)\n```",
    '??? success "Solution"\n\n    ```py\n    print(1)\n    ```',
    "```python\nprint(1)\n```\n\n```text\n1\n```",  # output that nothing compares
]

GOOD_FENCES = [
    "```python\nprint(1)\n```",
    "```bash\necho hi\n```",
    "```python\nprint(1)\n```\n\n<!--pytest-codeblocks:expected-output-->\n```text\n1\n```",
    '```python title="attention_book/plotting.py"\n'
    '--8<-- "attention_book/plotting.py:show_heatmaps"\n```',
    '<!--pytest.mark.skip(reason="starts a server")-->\n```bash\nmake serve\n```',
    '??? success "Solution"\n\n    ```python\n    print(1)\n    ```',
    "```python\nprint(1)\n```\n\nIt prints a table like this one:\n\n```text\n| a |\n```",
]


@pytest.mark.parametrize("text", BAD_FENCES)
def test_policy_flags_fences_that_would_not_run(text: str):
    assert problems(text), text


@pytest.mark.parametrize("text", GOOD_FENCES)
def test_policy_accepts_the_allowed_fences(text: str):
    assert problems(text) == []


# Every runnable Python block is linted like the package (ruff can't format Markdown here: it
# would break the include lines, see pyproject.toml). Continued blocks are linted joined.

LINT_RULES = ["--select", "E,F,W,B,UP", "--ignore", "E501"]


def lint_problems(page: Path) -> list[str]:
    from pytest_codeblocks.main import extract_from_file

    found = []
    for block in extract_from_file(page):
        if block.syntax != "python":
            continue
        name = f"block_at_line_{block.lineno}.py"
        command = [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format"]
        result = subprocess.run(
            [*command, "concise", *LINT_RULES, "--stdin-filename", name, "-"],
            input=block.code,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            found.append(result.stdout.strip())
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_passes_ruff(page: Path):
    assert lint_problems(page) == []


def test_the_block_linter_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("```python\nimport os\nfor i in range(3):\n    pass\n```\n")
    (problem,) = lint_problems(page)
    assert "F401" in problem and "B007" in problem


# Every section marker of the package is included by some page: a marker no page shows is a
# listing the book forgot, or a marker to remove.

MARKER_START = re.compile(r"--8<-- \[start:(?P<section>[\w-]+)\]")


def unincluded_sections(pages: list[Path]) -> list[str]:
    """Sections of package files (``path:section``) that no page includes."""
    included = set()
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            match = SNIPPET.match(line.strip())
            if match and match["section"]:
                included.add(f"{match['path']}:{match['section']}")
    found = []
    for path in sorted((ROOT / "attention_book").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        for marker in MARKER_START.finditer(path.read_text(encoding="utf-8")):
            if f"{name}:{marker['section']}" not in included:
                found.append(f"{name}:{marker['section']}")
    return found


def test_every_section_marker_is_included_by_a_page():
    assert unincluded_sections(PAGES) == []


def test_the_marker_check_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        '```python title="attention_book/masking.py"\n'
        '--8<-- "attention_book/masking.py:masked_softmax"\n```\n'
    )
    missing = unincluded_sections([page])
    assert "attention_book/masking.py:causal_mask" in missing
    assert "attention_book/masking.py:masked_softmax" not in missing
