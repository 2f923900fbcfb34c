"""Names that moved to another module, still importable from the module they left (PEP 562).

A module that gives a concept of its own a new module keeps every public name working:

```python
__getattr__ = moved_names(__name__, {"attention_book.windows": ("window_partition",)})
```

The name is looked up in its new module on first use, so the module it left does not import
the new one (which often imports it: no cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["moved_names"]


def moved_names(module: str, moved: Mapping[str, Sequence[str]]) -> Callable[[str], Any]:
    """A module's ``__getattr__`` that finds the names that moved to other modules.

    Args:
        module: The module's ``__name__``, named in the error for any other name.
        moved: ``{new module: the names that moved there}``.

    Returns:
        The function to assign to the module's ``__getattr__``; for a name that did not
        move, it raises ``AttributeError`` as a module without one would.

    Raises:
        ValueError: If a name is listed under two modules.
    """
    where: dict[str, str] = {}
    for target, names in moved.items():
        for name in names:
            if name in where:
                raise ValueError(f"{name!r} is listed under {where[name]!r} and {target!r}")
            where[name] = target

    def find(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return find
