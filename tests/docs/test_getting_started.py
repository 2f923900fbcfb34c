"""Getting started without make: the commands the page shows, run in a new folder.

The page shows the set-up as plain ``python -m venv`` and ``pip`` commands, for Linux and macOS
and for Windows. This test runs the Linux and macOS commands, as written, in a new folder that
holds the repository's package files, with a new virtual environment. It downloads nothing
(``PIP_NO_INDEX``): a ``.pth`` file puts the packages of the environment that ``make setup``
made before the new environment's own, so that pip finds every pin installed, and KaTeX's
tarball comes from the download cache, checked against its digest. So it covers the commands
(the venv, the pins, the editable install, KaTeX), not the downloads, which ``make setup`` does
on a fresh clone with the same commands: the test checks that the Makefile runs them too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from repo import ROOT

from booktools.markdown import fences

PAGE = ROOT / "docs" / "getting-started.md"


def block(first_line: str) -> list[str]:
    """The lines of the page's block that starts with `first_line`."""
    found = [
        list(f.body)
        for f in fences(PAGE.read_text(encoding="utf-8"))
        if f.body[:1] == (first_line,)
    ]
    assert len(found) == 1, f"one block of {PAGE.name} starts with {first_line!r}"
    return found[0]


LINUX = block("python3.11 -m venv .venv")
WINDOWS = block("py -3.11 -m venv .venv")
TESTS = block(".venv/bin/ruff check . && .venv/bin/ruff format --check .")


def test_windows_runs_the_same_commands_with_its_paths():
    translated = [
        line.replace("python3.11 ", "py -3.11 ").replace(".venv/bin/", ".venv\\Scripts\\")
        for line in LINUX
    ]
    assert translated == WINDOWS


def makefile() -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return text.replace("$(BIN)/", ".venv/bin/").replace("pip install --quiet", "pip install")


def test_make_setup_runs_the_same_commands():
    recipe = makefile()
    assert "$(PYTHON) -m venv $(VENV)" in recipe and LINUX[0] == "python3.11 -m venv .venv"
    for line in LINUX[1:]:
        assert line in recipe, line


def test_make_test_runs_the_commands_the_page_lists():
    recipe = makefile()
    for line in TESTS:
        for command in line.split(" && "):
            assert command.split(" --screenshots")[0] in recipe, command


@pytest.mark.skipif(shutil.which("python3.11") is None, reason="needs python3.11 on the PATH")
def test_the_commands_set_up_a_new_folder(tmp_path: Path):
    clone = tmp_path / "attention-book"
    clone.mkdir()
    for name in ("requirements.txt", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    for name in ("attention_book", "booktools"):
        shutil.copytree(ROOT / name, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)

    def run(line: str) -> str:
        result = subprocess.run(
            line, shell=True, cwd=clone, env=env, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    run(LINUX[0])
    new_site = run(
        ".venv/bin/python -c \"import sysconfig; print(sysconfig.get_paths()['purelib'])\""
    )
    made = sysconfig.get_paths()["purelib"]  # the environment that make setup made
    (Path(new_site.strip()) / "000-make-setup.pth").write_text(
        f"import sys; sys.path.insert(0, {made!r})\n", encoding="utf-8"
    )
    for line in LINUX[1:]:
        run(line)
    where = run(
        '.venv/bin/python -c "import attention_book; print(attention_book.__file__)" && '
        ".venv/bin/python -m booktools.plugin.katex where"
    ).split()
    assert where[0] == str(clone / "attention_book" / "__init__.py")  # the new folder's package
    assert where[1].startswith(str(clone / ".venv"))  # KaTeX in the new environment
    assert Path(sys.prefix) != clone / ".venv"
