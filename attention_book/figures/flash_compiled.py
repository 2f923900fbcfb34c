"""The figures of the FlashAttention deep dive "What the compiler made of our kernel".

That page is ``docs/chapters/flash-attention-compiled.md``.

They read the compile report that ``benchmarks/flash_compile.py`` commits as
``benchmarks/results/flash_compile.json`` (through `attention_book.flash.compiled.load_report`)
and return its tables, or the values that the chapter's own sentences cite
(`attention_book.flash.compile_report`); each takes the directory of the results as its
`results_dir` argument (see `attention_book.figures`), and fails with a clear error when there
is no report. The chapter's other figures are in
`attention_book.figures.flash`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attention_book.figures import inline_svg
from attention_book.flash import compile_report, compiled
from attention_book.plotting import BOOK_STYLE, new_figure

__all__ = [
    "FIGURES",
    "flash_compile_before_after",
    "flash_compile_changes",
    "flash_compile_facts",
    "flash_compile_mix",
    "flash_compile_resources",
    "flash_compile_score_paths",
    "flash_compile_table",
]


def _report(results_dir: Path) -> dict:
    """The compile report in `results_dir`.

    Raises:
        ValueError: If there is none (``python benchmarks/flash_compile.py`` writes it; it
            needs no GPU).
    """
    report = compiled.load_report(results_dir)
    if report is None:
        raise ValueError(
            f"no compile report in {results_dir}: run `python benchmarks/flash_compile.py` "
            "(it needs no GPU) to write benchmarks/results/flash_compile.json"
        )
    return report


def flash_compile_facts(results_dir: Path) -> dict[str, str]:
    """What the last compile report covered: its date, versions, counts, launch and showcase.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Values for the chapter's prose (`attention_book.flash.compile_report.compile_facts`).
    """
    return compile_report.compile_facts(_report(results_dir))


def flash_compile_resources(results_dir: Path) -> str:
    """Each kernel's registers, spills, shared memory and matrix multiply, by GPU.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return compile_report.resources_markdown(_report(results_dir))


def flash_compile_table(results_dir: Path) -> str:
    """Every listed configuration: registers, spills, shared memory, main-loop instructions.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return compile_report.table_markdown(_report(results_dir))


def flash_compile_score_paths(results_dir: Path) -> dict[str, str]:
    """The path of one score through the forward's main loop, in SASS: before, after, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        ``{"before": ..., "after": ..., "tutorial": ...}``, each a short ``text`` listing.
    """
    paths = compile_report.score_paths(_report(results_dir))
    keys = {"baseline": "before", "ours": "after", "tutorial": "tutorial"}
    return {keys[name]: "\n".join(["```text", *path, "```"]) for name, path in paths.items()}


def flash_compile_changes(results_dir: Path) -> dict[str, str]:
    """What each change bought, read off the compile report.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Values for the chapter's prose (`attention_book.flash.compile_report.change_numbers`).
    """
    return compile_report.change_numbers(_report(results_dir))


def flash_compile_before_after(results_dir: Path) -> str:
    """The before/after table of the tuning: main loops, spills, shared memory, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        A Markdown table.
    """
    return compile_report.before_after_markdown(_report(results_dir))


def _mix_figure(kinds: list[str], mixes: dict[str, dict[str, int]]) -> Figure:
    """Horizontal bars: instructions of one iteration by kind, one bar per implementation."""
    labels = {"baseline": "before", "ours": "after", "tutorial": "Triton's tutorial"}
    colors = {"baseline": "#bbbbbb", "ours": "tab:blue", "tutorial": "tab:orange"}
    names = [name for name in labels if name in mixes]
    fig = new_figure((7.6, 0.42 * len(kinds) + 1.2))
    with plt.rc_context({**BOOK_STYLE, "axes.grid": False}):
        ax = fig.add_subplot()
        height = 0.8 / len(names)
        for k, name in enumerate(names):
            ys = [i + (k - (len(names) - 1) / 2) * height for i in range(len(kinds))]
            counts = [mixes[name][kind] for kind in kinds]
            label = f"{labels[name]} ({sum(mixes[name].values())} in all)"
            ax.barh(ys, counts, height=height, color=colors[name], label=label)
            for y, count in zip(ys, counts, strict=True):
                ax.text(count + 1, y, str(count), va="center", fontsize=6.5)
        ax.set_yticks(range(len(kinds)), kinds, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("instructions per warp in one iteration", fontsize=8)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
    return fig


def flash_compile_mix(results_dir: Path) -> str:
    """One iteration of the forward's main loop by kind of instruction: before, after, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown: the bar chart (inline SVG, drawn for light and dark pages).
    """
    report = _report(results_dir)
    alt = (
        "Horizontal bars: the instructions of one main-loop iteration of the forward kernel by "
        "kind, before the tuning, after it, and in Triton's tutorial"
    )
    return inline_svg(_mix_figure(*compile_report.instruction_groups(report)), alt)


#: The build-time tables and the figure of this module, in the order of the chapter.
#: Bump when what this module's figures show changes: the build keys them by it
#: (`attention_book.figures.declaration`), not by their source.
VERSION = 1

FIGURES = (
    flash_compile_facts,
    flash_compile_resources,
    flash_compile_table,
    flash_compile_mix,
    flash_compile_score_paths,
    flash_compile_changes,
    flash_compile_before_after,
)
