"""The line under each chapter's title: the versions its code was tested with."""

from __future__ import annotations

import sys

from repo import ROOT

from booktools.plugin.versions import pins, versions_line

REQUIREMENTS = """# pins
torch==2.13.0
numpy==2.4.6
matplotlib==3.11.2
scikit_learn==1.9.1  # a comment
triton>=3  # not a pin
"""

PAGE = """# A chapter

```python
import matplotlib.pyplot as plt
from sklearn.linear_model import Ridge
```

```python title="attention_book/x.py"
import triton
```
"""


def test_pins_are_read_with_normalized_names():
    assert pins(REQUIREMENTS) == {
        "torch": "2.13.0",
        "numpy": "2.4.6",
        "matplotlib": "3.11.2",
        "scikit-learn": "1.9.1",
    }


def test_the_line_names_the_core_and_what_the_blocks_import():
    python = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    assert versions_line(PAGE, REQUIREMENTS) == (
        f"*Tested with {python}, PyTorch 2.13.0, NumPy 2.4.6, matplotlib 3.11.2 and "
        "scikit-learn 1.9.1 (the versions pinned in `requirements.txt`).*"
    )
    assert "matplotlib" not in versions_line("# A chapter\n", REQUIREMENTS)


def test_the_line_follows_the_repository_pins():
    line = versions_line("# A chapter\n")
    pinned = pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    assert f"PyTorch {pinned['torch']}" in line
