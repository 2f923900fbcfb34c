"""The figures of the FlashAttention chapter's section "What the compiler made of our kernel".

They read the compile report that ``benchmarks/flash_compile.py`` commits as
``benchmarks/results/flash_compile.json`` (through `attention_book.flash.compiled.load_report`)
and put it in the chapter's words and tables (`attention_book.flash.compile_report`); each
takes the directory of the results as its `results_dir` argument (see `attention_book.figures`)
and returns a one-line note when there is no report. The chapter's other figures are in
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
    "flash_compile_excerpt",
    "flash_compile_mix",
    "flash_compile_summary",
    "flash_compile_table",
]


_NO_COMPILE_REPORT = (
    "*No compile report yet: this build found no `benchmarks/results/flash_compile.json`. "
    "Running `python benchmarks/flash_compile.py` writes it (it needs no GPU), and the next "
    "build fills this place.*"
)


def _from_report(results_dir: Path, words) -> str:
    """`words` of the compile report in `results_dir`, or a note that there is none."""
    report = compiled.load_report(results_dir)
    text = "" if report is None else words(report)
    return text or _NO_COMPILE_REPORT


def flash_compile_summary(results_dir: Path) -> str:
    """What the last compile report covered, and each kernel's resources by GPU.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown (`attention_book.flash.compile_report.summary_markdown`), or a note.
    """
    return _from_report(results_dir, compile_report.summary_markdown)


def flash_compile_table(results_dir: Path) -> str:
    """Every listed configuration: registers, spills, shared memory, main-loop instructions.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown: a collapsed table, or a note.
    """
    return _from_report(results_dir, compile_report.table_markdown)


def flash_compile_excerpt(results_dir: Path) -> str:
    """The path of one score through the forward's main loop, in SASS: before, after, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown: three short listings, or a note.
    """
    return _from_report(results_dir, compile_report.excerpt_markdown)


def flash_compile_changes(results_dir: Path) -> str:
    """What each change bought, read off the compile report, one bullet per change.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown bullets, or a note.
    """
    return _from_report(results_dir, compile_report.changes_markdown)


def flash_compile_before_after(results_dir: Path) -> str:
    """The before/after table of the tuning: main loops, spills, shared memory, tutorial.

    Args:
        results_dir: The directory ``benchmarks/flash_compile.py`` writes its report to.

    Returns:
        Markdown: one table, or a note.
    """
    return _from_report(results_dir, compile_report.before_after_markdown)


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
        Markdown: a bar chart (inline SVG) and its caption, or a note.
    """

    def chart(report):
        row = compile_report.showcase(report).get("ours")
        if row is None:
            return ""
        alt = (
            "Horizontal bars: the instructions of one main-loop iteration of the forward "
            "kernel by kind, before the tuning, after it, and in Triton's tutorial"
        )
        return (
            f"{inline_svg(_mix_figure(*compile_report.instruction_groups(report)), alt)}\n\n"
            f"*`flash_compile_mix`: the main loop of the forward kernel, "
            f"{compile_report.tile_name(row['config'])}, head dim {row['head_dim']}, compiled "
            f"for {row['target']}, by kind of instruction (SASS opcodes grouped as in "
            "`OPCODE_GROUPS`).*"
        )

    return _from_report(results_dir, chart)


#: The build-time tables and the figure of this module, in the order of the chapter.
FIGURES = (
    flash_compile_summary,
    flash_compile_table,
    flash_compile_mix,
    flash_compile_excerpt,
    flash_compile_changes,
    flash_compile_before_after,
)
