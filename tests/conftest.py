"""Shared test configuration.

Property-based tests explore new random examples on every local run, but in CI (``CI=true``,
as `.ci/run` sets it) they replay a fixed sequence, so a landing never depends on luck.

Triton reads ``TRITON_INTERPRET`` once, when it is first imported, and PyTorch imports Triton on
some paths of its own. Without a CUDA GPU the Triton kernels can only run under Triton's CPU
interpreter, so the variable is set here, before any test module can import Triton; on a
machine with a GPU it is left alone and the tests run the compiled kernels. (Importing torch
does not import Triton.)
"""

import os

import torch
from hypothesis import settings

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")
