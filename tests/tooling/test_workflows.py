"""The workflows in .github/: pinned actions, zizmor's audits and GitHub's schema (make workflows).

`make workflows` runs zizmor (offline) and check-jsonschema over ``.github/``; these tests show
each of them failing on a broken copy, and check the pins themselves without either tool.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent

#: ``uses: owner/repo@<40 hex digits> # vX.Y.Z``: a commit, and the release it is.
PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s+[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(?:\.\d+)*\s*$")
USES = re.compile(r"^\s*(?:-\s+)?uses:")


def unpinned(text: str) -> list[str]:
    """The ``uses:`` lines of a workflow that do not pin a commit with its release."""
    return [
        line.strip() for line in text.splitlines() if USES.match(line) and not PINNED.match(line)
    ]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_every_action_is_pinned_to_a_commit_with_its_release(workflow: Path):
    assert unpinned(workflow.read_text(encoding="utf-8")) == []


def test_a_tag_is_not_a_pin():
    assert unpinned("      - uses: actions/checkout@v4\n") == ["- uses: actions/checkout@v4"]
    assert unpinned("        uses: actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830\n")
    pinned = "      - uses: actions/cache@0057852bfaa89a56745cba8c7296529d2fc39830 # v4.3.0\n"
    assert unpinned(pinned) == []


def zizmor(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BIN / "zizmor", "--offline", "--persona", "pedantic", "--no-progress", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )


def check_schema(files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )


def broken_copy(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of .github/ with one edit in ci.yml."""
    copy = tmp_path / ".github"
    shutil.copytree(ROOT / ".github", copy)
    ci = copy / "workflows" / "ci.yml"
    text = ci.read_text(encoding="utf-8")
    assert old in text
    ci.write_text(text.replace(old, new, 1), encoding="utf-8")
    return copy


def test_zizmor_passes_the_workflows_and_fails_an_unpinned_action(tmp_path):
    result = zizmor(ROOT / ".github")
    assert result.returncode == 0, result.stdout + result.stderr
    broken = broken_copy(
        tmp_path, "actions/checkout@11d5960a326750d5838078e36cf38b85af677262 # v4.4.0",
        "actions/checkout@v4",
    )  # fmt: skip
    result = zizmor(broken)
    assert result.returncode != 0
    assert "unpinned-uses" in result.stdout + result.stderr


def test_zizmor_fails_a_checkout_that_keeps_its_credentials(tmp_path):
    keep = (
        "        with:\n          persist-credentials: false  # no later step pushes: the token is"
    )
    broken = broken_copy(tmp_path, keep, "        # the token is")
    result = zizmor(broken)
    assert result.returncode != 0
    assert "artipacked" in result.stdout + result.stderr


def test_the_schema_passes_the_workflows_and_fails_a_broken_one(tmp_path):
    result = check_schema(WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = broken_copy(tmp_path, "runs-on: ubuntu-latest", "runs_on: ubuntu-latest")
    result = check_schema([broken / "workflows" / "ci.yml"])
    assert result.returncode != 0
    assert "ci.yml" in result.stdout + result.stderr


def test_the_gate_runs_the_workflow_checks():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    gate = re.search(r"^test:(.*)$", makefile, re.M)[1].split()
    assert "workflows" in gate and "links" in gate
    assert "zizmor --offline" in makefile
    assert "--builtin-schema vendor.github-workflows" in makefile
