"""Content keys of the figures (booktools.plugin.code_keys): code counts, prose does not."""

from __future__ import annotations

import shutil

import pytest
from repo import ROOT

from booktools.plugin.code_keys import code_key, normalized, package_root, reached_modules

SOURCE = '''"""A module."""

import torch


def f(x):
    """Double it."""
    return 2 * x  # twice
'''


def test_docstrings_comments_and_layout_are_not_code():
    prose = SOURCE.replace("Double it.", "Multiply by two.").replace("# twice", "# two times")
    layout = SOURCE.replace("return 2 * x", "return (2\n            * x)") + "\n\n# the end\n"
    assert normalized(prose) == normalized(SOURCE)
    assert normalized(layout) == normalized(SOURCE)


@pytest.mark.parametrize(
    "edit",
    [("2 * x", "3 * x"), ("def f(x)", "def f(y)"), ("import torch", "import numpy")],
)
def test_a_changed_statement_name_or_constant_is_code(edit):
    assert normalized(SOURCE.replace(*edit)) != normalized(SOURCE)


def test_a_module_reaches_what_it_imports_anywhere_and_through_other_modules():
    reached = reached_modules("attention_book.figures.scoring")
    assert "attention_book.experiments.scoring" in reached  # imported by the figure module
    assert "attention_book.masking" in reached  # through attention
    assert "attention_book.validation" in reached  # through masking
    assert "attention_book.gpt" not in reached
    with pytest.raises(ValueError, match=r"'attention_book\.nothing' is not a module"):
        reached_modules("attention_book.nothing")


def test_the_key_follows_the_code_of_every_module_reached(tmp_path):
    shutil.copytree(ROOT / "attention_book", tmp_path / "attention_book")
    module = "attention_book.figures.scoring"
    before = code_key(module, tmp_path)
    assert before == code_key(module, ROOT)
    masking = tmp_path / "attention_book" / "masking.py"
    text = masking.read_text(encoding="utf-8")
    masking.write_text(text.replace('"""Masks for attention', '"""Masks, for attention', 1))
    assert code_key(module, tmp_path) == before  # a docstring
    masking.write_text(text.replace("row_has_key", "has_visible_key"))
    assert code_key(module, tmp_path) != before  # a refactor of a module it reaches
    other = "attention_book.figures.nadaraya_watson"  # reaches no mask
    assert "attention_book.masking" not in reached_modules(other, tmp_path)
    assert code_key(other, tmp_path) == code_key(other, ROOT)


def test_the_package_is_found_where_python_would_import_it():
    assert package_root() == ROOT
