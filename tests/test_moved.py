"""`moved_names`: a module's ``__getattr__`` for the names that moved to other modules."""

import pytest

from attention_book import vit, windows
from attention_book.moved import moved_names


def test_a_moved_name_is_found_in_its_new_module_and_any_other_name_fails():
    find = moved_names("old.module", {"attention_book.windows": ("window_partition",)})
    assert find("window_partition") is windows.window_partition
    with pytest.raises(AttributeError, match=r"module 'old\.module' has no attribute 'nope'"):
        find("nope")
    # The modules that use it behave as Python's own modules do.
    assert vit.window_merge is windows.window_merge
    assert getattr(vit, "nope", None) is None
    with pytest.raises(ImportError, match="cannot import name 'nope'"):
        exec("from attention_book.vit import nope")


def test_a_name_listed_under_two_modules_is_refused():
    with pytest.raises(ValueError, match="'f' is listed under 'a' and 'b'"):
        moved_names("m", {"a": ("f",), "b": ("f",)})
