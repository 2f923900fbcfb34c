"""Manage the results cache: ``python -m attention_book.training {clear-cache,cache-dir}``.

``clear-cache`` deletes every cached result (the Makefile's ``clean-cache`` runs it);
``cache-dir`` prints where results are kept.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from attention_book.store import cache_dir, clear_cache


def main(argv: Sequence[str] | None = None) -> int:
    """Run one cache command.

    Args:
        argv: Arguments (default: `sys.argv[1:]`).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m attention_book.training", description="Manage the results cache."
    )
    parser.add_argument("command", choices=["clear-cache", "cache-dir"])
    args = parser.parse_args(argv)
    if args.command == "cache-dir":
        print(cache_dir())
    else:
        print(f"removed {clear_cache()} cached result(s) from {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
