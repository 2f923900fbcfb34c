"""Shared test configuration.

Property-based tests explore new random examples on every local run, but in CI (``CI=true``,
as `.ci/run` sets it) they replay a fixed sequence, so a landing never depends on luck.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")
