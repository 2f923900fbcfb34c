"""Where the tests find the repository: one ``ROOT`` for every folder of ``tests/``.

``tests/conftest.py`` puts this folder on ``sys.path`` (pytest inserts the folder of each
``conftest.py``), so any test imports it: ``from repo import ROOT``.
"""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[1]
