"""Render figures by name: ``python -m attention_book.figures NAME ... --out-dir DIR``.

Each figure's result is written to ``DIR/NAME.svg`` and ``DIR/NAME.dark.svg`` (a matplotlib
figure, drawn for a light page and recoloured for a dark one by `recolor_for_dark`), to
``DIR/NAME.md`` (a Markdown fragment) or to ``DIR/NAME.json`` (values a page's prose cites).
A `Frames` result is written as ``NAME.frame-K.svg`` and ``NAME.frame-K.dark.svg`` for every
frame K, ``NAME.svg`` and ``NAME.dark.svg`` for the start
frame, and ``NAME.frames.json`` (the control's name, the labels, the start frame). Figures that
show committed benchmark results need ``--results-dir RESULTS`` (the site build passes
``benchmarks/results``). The site build runs this in fresh interpreters, one per chapter module
when several chapters have figures to draw, so that an edited package is always the one that
draws and the cores are all used.

``--threads N`` sets PyTorch's number of threads before anything is drawn (the site build
divides the cores between its workers). ``--list`` prints every figure's name, the module that
lists it and ``results`` for a figure that shows benchmark results (``-`` otherwise), one per
line, and draws nothing: the preview of one figure is
``python -m attention_book.figures NAME --out-dir /tmp/preview``. ``--declarations`` prints, as
JSON, every figure's module and whether it shows benchmark results (``figures``), each module's
`declaration` (``modules``), whether each run those declare is in the store (``stored``: None
where its key needs another run's result) and a digest of what each stored one holds
(``digests``): what the site build keys and schedules by.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Render the named figures into a directory, or list the figures.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit status: 0 on success, 2 for a name that is not a figure.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="figure function names")
    parser.add_argument("--out-dir", type=Path, help="where to write NAME.svg or NAME.md")
    parser.add_argument(
        "--results-dir",
        type=Path,
        help="directory of the committed benchmark results (for the figures that show them)",
    )
    parser.add_argument("--threads", type=int, help="PyTorch threads for this process")
    parser.add_argument(
        "--list", action="store_true", help="print 'NAME MODULE results|-' per figure"
    )
    parser.add_argument(
        "--declarations", action="store_true", help="print what every figure is drawn from"
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        import torch

        torch.set_num_threads(max(1, args.threads))

    from matplotlib.figure import Figure

    from attention_book.figures import (
        RENDER_VERSION,
        Frames,
        declaration,
        draw,
        figure_functions,
        needs_results,
        recolor_for_dark,
        save_svg,
    )

    functions = figure_functions()
    if args.list:
        for name, function in functions.items():
            print(name, function.__module__, "results" if needs_results(function) else "-")
        return 0
    if args.declarations:
        import hashlib

        from attention_book.store import cache_path, is_cached

        modules = sorted({function.__module__ for function in functions.values()})
        found = {
            "render_version": RENDER_VERSION,
            "figures": {
                name: [function.__module__, needs_results(function)]
                for name, function in functions.items()
            },
            "modules": {module: declaration(module) for module in modules},
        }
        keys = {}
        for entry in found["modules"].values():
            for runs in entry["computations"].values():
                keys.update(runs["runs"])
        found["stored"] = {
            run: None if key.get("key", True) is None else is_cached(run, key)
            for run, key in sorted(keys.items())
        }
        # What each stored run holds: a run trained again under the same key (another machine,
        # another thread count) holds other numbers, and the figures that show it change.
        found["digests"] = {
            run: hashlib.sha256(cache_path(run, keys[run]).read_bytes()).hexdigest()[:16]
            for run, stored in found["stored"].items()
            if stored
        }
        print(json.dumps(found, sort_keys=True))
        return 0
    if not args.names or args.out_dir is None:
        parser.error("give figure names and --out-dir (or --list)")
    unknown = [name for name in args.names if name not in functions]
    if unknown:
        print(f"not figures: {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        start = time.perf_counter()
        result = draw(name, args.results_dir)
        if isinstance(result, Frames):
            for number, figure in enumerate(result.figures):
                save_svg(figure, args.out_dir / f"{name}.frame-{number}.svg")
                if number == result.start:
                    save_svg(figure, args.out_dir / f"{name}.svg")
                save_svg(recolor_for_dark(figure), args.out_dir / f"{name}.frame-{number}.dark.svg")
                if number == result.start:
                    save_svg(figure, args.out_dir / f"{name}.dark.svg")
            about = {"control": result.control, "labels": result.labels, "start": result.start}
            (args.out_dir / f"{name}.frames.json").write_text(json.dumps(about), encoding="utf-8")
        elif isinstance(result, Figure):
            save_svg(result, args.out_dir / f"{name}.svg")
            save_svg(recolor_for_dark(result), args.out_dir / f"{name}.dark.svg")
        elif isinstance(result, dict):  # values that the page's prose cites
            text = json.dumps(result, indent=1, sort_keys=True, ensure_ascii=False)
            (args.out_dir / f"{name}.json").write_text(text, encoding="utf-8")
        else:
            (args.out_dir / f"{name}.md").write_text(result, encoding="utf-8")
        print(f"rendered {name} in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
