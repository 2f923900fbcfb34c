"""Render figures by name: ``python -m attention_book.figures NAME ... --out-dir DIR``.

Each figure's result is written to ``DIR/NAME.svg`` (a matplotlib figure) or ``DIR/NAME.md``
(a Markdown fragment). Figures that show committed benchmark results need
``--results-dir RESULTS`` (the site build passes ``benchmarks/results``). The site build runs
this in a fresh interpreter so that an edited package is always the one that draws.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from matplotlib.figure import Figure

from attention_book.figures import draw, save_svg


def main(argv: list[str] | None = None) -> int:
    """Render the named figures into a directory.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit status: 0 on success.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="+", help="figure function names")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument(
        "--results-dir",
        type=Path,
        help="directory of the committed benchmark results (for the figures that show them)",
    )
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        start = time.perf_counter()
        result = draw(name, args.results_dir)
        if isinstance(result, Figure):
            save_svg(result, args.out_dir / f"{name}.svg")
        else:
            (args.out_dir / f"{name}.md").write_text(result, encoding="utf-8")
        print(f"rendered {name} in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
