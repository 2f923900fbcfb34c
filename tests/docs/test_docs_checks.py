"""The docs check (`booktools.checks.docs`): each rule of the pages can fail, and lets through
what the book allows. The gate runs the check itself on every page (``make test``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from booktools.checks.docs import (
    fence_problems,
    lint_problems,
    main,
    unincluded_sections,
    word_problems,
)

BAD_FENCES = [
    "```py\nprint(1)\n```",
    "```python3\nprint(1)\n```",
    "```pycon\n>>> 1\n```",
    '```python hl_lines="1"\nprint(1)\n```',
    "```{.python}\nprint(1)\n```",
    '```python title="attention_book/plotting.py"\nprint("not an include")\n```',
    '```python title="attention_book/plotting.py"\n--8<-- "attention_book/plotting.py:nope"\n```',
    "<!--pytest.mark.skip-->\n```python\nprint(1)\n```",
    "<!--pytest-codeblocks:skip-->\n```python\nprint(1)\n```",
    '??? success "Solution"\n\n    ```py\n    print(1)\n    ```',
    "```python\nprint(1)\n```\n\n```text\n1\n```",  # output that nothing compares
]

GOOD_FENCES = [
    "```python\nprint(1)\n```",
    "```bash\necho hi\n```",
    "```python\nprint(1)\n```\n\n<!--pytest-codeblocks:expected-output-->\n```text\n1\n```",
    '```python title="attention_book/plotting.py"\n'
    '--8<-- "attention_book/plotting.py:show_heatmaps"\n```',
    '<!--pytest.mark.skip(reason="starts a server")-->\n```bash\nmake serve\n```',
    '??? success "Solution"\n\n    ```python\n    print(1)\n    ```',
    "```python\nprint(1)\n```\n\nIt prints a table like this one:\n\n```text\n| a |\n```",
]


@pytest.mark.parametrize("text", BAD_FENCES)
def test_the_fence_rule_flags_blocks_that_would_not_run(text: str):
    assert fence_problems(text), text


@pytest.mark.parametrize("text", GOOD_FENCES)
def test_the_fence_rule_accepts_the_allowed_fences(text: str):
    assert fence_problems(text) == []


def test_the_block_linter_can_fail_and_names_the_blocks_line(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```python\nimport os\nfor i in range(3):\n    pass\n```\n")
    found = lint_problems([page])
    assert len(found) == 2 and all(problem.startswith(f"{page}:3: ") for problem in found)
    assert "F401" in found[0] and "B007" in found[1]
    page.write_text("```python\nimport os\n\nprint(os.sep)\n```\n")
    assert lint_problems([page]) == []


def test_the_marker_rule_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        '```python title="attention_book/masking.py"\n'
        '--8<-- "attention_book/masking.py:masked_softmax"\n```\n'
    )
    missing = unincluded_sections([page])
    assert "attention_book/masking.py:causal_mask" in missing
    assert "attention_book/masking.py:masked_softmax" not in missing


FLAGGED = [
    "The seed's own example, with two layers.",
    "the d2l signatures the seed follows",
    "### The seed's mask, and why it breaks",
    "Seed: the code we started from.",
]
ALLOWED = [
    "Same data, the same seed, and the same number of steps.",
    "after training with seed 0, and with `seed=1`",
    "for every seed, seed by seed:",
    "one line per model and seed; error bars from the lowest to the highest seed",
    "three seeds each, a random-seed sweep, and `torch.manual_seed(0)`",
    "Train it again with any such seed, or a new seed, or your seed.",
    "```python\nmodel = build()  # the seed's layout\n```",
]


@pytest.mark.parametrize("text", FLAGGED)
def test_the_word_rule_flags_the_source_document_called_the_seed(text: str):
    (problem,) = word_problems(text)
    assert problem.startswith("line 1: ") and problem.endswith(text)


@pytest.mark.parametrize("text", ALLOWED)
def test_the_word_rule_allows_random_seeds_and_code(text: str):
    assert word_problems(text) == []


def test_the_word_rule_counts_lines_after_a_fence():
    text = "Intro.\n\n```python\nx = 1\ny = 2\n```\n\nThe seed's code.\n"
    assert [problem.split(":")[0] for problem in word_problems(text)] == ["line 8"]


def test_the_command_fails_on_a_bad_page_and_names_it(tmp_path: Path, capsys):
    page = tmp_path / "page.md"
    page.write_text("```py\nprint(1)\n```\n\nThe seed's code.\n")
    assert main([str(page)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all(line.startswith(f"{page}:line ") for line in errors)
    page.write_text("```python\nprint(1)\n```\n")
    assert main([str(page)]) == 0


INTERPRETER_BLOCKS = {
    "import torch\nfrom attention_book.flash import flash_attention\nq = torch.randn(1, 1, 4, 8)\n"
    'flash_attention(q, q, q, backend="triton")\n': 1,  # what the page held: fails alone
    'import os\nos.environ.setdefault("TRITON_INTERPRET", "1")\nimport triton\n': 0,
    "import torch\nprint(torch.ones(2))\n": 0,  # no Triton
}


@pytest.mark.parametrize(("body", "problems"), INTERPRETER_BLOCKS.items())
def test_the_interpreter_rule_wants_triton_blocks_to_set_the_variable(body: str, problems: int):
    from booktools.checks.docs import interpreter_problems

    assert len(interpreter_problems(f"```python\n{body}```\n")) == problems
    gpu_only = (
        '<!--pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="GPU")-->'
    )
    assert interpreter_problems(f"{gpu_only}\n```python\n{body}```\n") == []


def test_the_keyword_rule_wants_the_books_classes_built_with_named_arguments():
    """Issue 42: `TransformerEncoder(200, 24, 48, 8, 2, 0.5)` read as six bare numbers."""
    from booktools.checks.docs import MAX_POSITIONAL, package_classes, positional_problems

    assert MAX_POSITIONAL == 2
    assert package_classes()["TransformerEncoder"][:6] == (
        "vocab_size", "num_hiddens", "ffn_num_hiddens", "num_heads", "num_blks", "dropout",
    )  # fmt: skip
    bare = "```python\nencoder = TransformerEncoder(200, 24, 48, 8, 2, 0.5)\n```\n"
    assert positional_problems(bare) == [
        "line 2: TransformerEncoder(...) gets 6 arguments by position; name those after the "
        "first 2: ffn_num_hiddens=48, num_heads=8, num_blks=2, dropout=0.5"
    ]
    named = (
        "```python\nencoder = TransformerEncoder(\n"
        "    200, 24, ffn_num_hiddens=48, num_heads=8, num_blks=2, dropout=0.5\n)\n```\n"
    )
    assert positional_problems(named) == []
    # Only the book's classes, only runnable blocks: PyTorch's and output are left alone.
    assert positional_problems("```python\nx = torch.zeros(2, 3, 4)\n```\n") == []
    assert positional_problems("```text\nTransformerEncoder(200, 24, 48, 8, 2, 0.5)\n```\n") == []


def test_a_page_may_show_d2ls_positional_call_when_it_says_so():
    from booktools.checks.docs import D2L_CALL, positional_problems

    call = "vit = ViT(96, 16, 512, 2048, 8, 2, 0.1, 0.1)"
    assert len(positional_problems(f"```python\n{call}\n```\n")) == 1
    assert positional_problems(f"```python\n{call}  {D2L_CALL}\n```\n") == []


def test_the_listing_rule_holds_a_core_pages_unfolded_listings_to_the_budget():
    """Issue 42: the scoring page showed DotProductAttention in 78 lines."""
    from booktools.checks.docs import LISTING_BUDGET, listing_problems, unfolded_listings

    assert LISTING_BUDGET == 30
    fence = '```python title="attention_book/flash/reference.py"\n{}\n```\n'
    long = fence.format('--8<-- "attention_book/flash/reference.py:tiled_backward"')
    short = fence.format('--8<-- "attention_book/flash/reference.py:tiled_query_block"')
    page = "docs/chapters/x.md"
    ((line, count, path),) = unfolded_listings(long, page)
    assert (line, path) == (1, "attention_book/flash/reference.py") and count > LISTING_BUDGET
    assert listing_problems(long, page) == [
        f"line 1: a listing of {count} lines of attention_book/flash/reference.py (a core page "
        "shows at most 30 unfolded): show the idea, and fold the rest or move it to a helper"
    ]
    assert listing_problems(short, page) == []
    folded = '??? info "The backward pass"\n\n' + "".join(
        f"    {line}\n" for line in long.splitlines()
    )
    assert unfolded_listings(folded, page) == [] and listing_problems(folded, page) == []
    opened = folded.replace("??? info", "???+ info")  # an admonition shown open is not folded
    assert len(listing_problems(opened, page)) == 1
    deep_dive = "---\ndeep_dive: x.md\nassumes: the core\n---\n\n" + long
    assert listing_problems(deep_dive, page) == []


def test_an_expected_output_wider_than_a_code_block_fails_in_the_docs_check():
    from booktools.checks.docs import width_problems

    wide = "x" * 101
    page = f"```python\nprint('{wide}')\n```\n\n<!--pytest-codeblocks:expected-output-->\n"
    page += f"```text\nshort\n{wide}\n```\n"
    (problem,) = width_problems(page)
    assert problem.startswith("line 8: a line of expected output of 101 characters, over the 100")
    assert width_problems(page.replace(wide, "x" * 100)) == []
