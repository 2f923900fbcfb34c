"""The build writes under a marked block what it printed (booktools.plugin.printed, issue 42)."""

from __future__ import annotations

import pytest
from mkdocs.exceptions import PluginError

from booktools.checks.docs import printed_problems
from booktools.markdown import printed_chains
from booktools.plugin import printed
from booktools.plugin.printed import CAPTION, chain_id, insert_printed, print_blocks, run_block

PAGE = """\
# A page

```python
x = 2
print("first")
```

<!--pytest-codeblocks:cont-->
```python
print(x * 21)
```
<!--book:printed-->

??? success "Solution"

    ```python
    print("inside")
    ```
    <!--book:printed-->
"""


def test_a_marked_block_runs_after_the_blocks_it_continues():
    chains = printed_chains(PAGE)
    assert [fence.line for fence, _ in chains] == [9, 16]
    assert chains[0][1] == ['x = 2\nprint("first")', "print(x * 21)"]
    assert chains[1][1] == ['print("inside")']


def test_a_mark_must_follow_a_block():
    with pytest.raises(ValueError, match=r"line 3: <!--book:printed--> must come right after"):
        printed_chains("Some prose.\n\n<!--book:printed-->\n")
    assert printed_problems("Some prose.\n\n<!--book:printed-->\n") == [
        "line 3: <!--book:printed--> must come right after a runnable block's closing fence"
    ]


def test_only_the_marked_blocks_output_is_shown():
    codes = printed_chains(PAGE)[0][1]
    assert run_block(codes) == "42"  # "first", printed by the block it continues, is not shown
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_block(["print(1 / 0)"])


def test_the_output_goes_under_its_block_indented_like_the_mark():
    outputs = {chain_id(codes): f"out {n}" for n, (_, codes) in enumerate(printed_chains(PAGE))}
    page = insert_printed(PAGE, "docs/chapters/a.md", outputs)
    assert "<!--book:printed-->" not in page
    assert "print(x * 21)\n```\n\n```text\nout 0\n```\n\n" + CAPTION in page
    inside = '    print("inside")\n    ```\n\n    ```text\n    out 1\n    ```\n\n    '
    assert inside + CAPTION in page
    with pytest.raises(PluginError, match=r"docs/chapters/a.md: no output was printed"):
        insert_printed(PAGE, "docs/chapters/a.md", {})


def test_outputs_are_cached_under_their_key(tmp_path, monkeypatch):
    monkeypatch.setattr(printed, "CACHE", tmp_path)
    monkeypatch.setattr(printed, "declarations", lambda: {"digests": {"run": "abc"}})
    ran = []
    real = printed.run_block
    monkeypatch.setattr(printed, "run_block", lambda codes, threads: ran.append(1) or real(codes))
    outputs = print_blocks([("docs/chapters/a.md", PAGE)])
    assert sorted(outputs.values()) == ["42", "inside"] and len(ran) == 2
    assert print_blocks([("docs/chapters/a.md", PAGE)]) == outputs and len(ran) == 2
    # Another store (a run trained again) prints again.
    monkeypatch.setattr(printed, "declarations", lambda: {"digests": {"run": "def"}})
    print_blocks([("docs/chapters/a.md", PAGE)])
    assert len(ran) == 4
    failing = "```python\nraise SystemExit('no model')\n```\n<!--book:printed-->\n"
    with pytest.raises(PluginError, match=r"docs/chapters/b.md:1: the block failed"):
        print_blocks([("docs/chapters/b.md", failing)])


def test_the_docs_rule_wants_a_trained_models_output_shown():
    block = (
        "```python\nfrom attention_book.experiments.bahdanau import bahdanau_translate\n"
        "print(bahdanau_translate('go .'))\n```\n"
    )
    assert printed_problems(block)[0].startswith("line 1: this block prints what a trained")
    assert printed_problems(block + "<!--book:printed-->\n") == []
    shown = block + "\n<!--pytest-codeblocks:expected-output-->\n```text\nva !\n```\n"
    assert printed_problems(shown) == []


def test_a_printed_line_too_wide_for_the_page_fails_the_build_naming_the_block():
    from booktools.plugin.printed import PRINTED_WIDTH

    chains = printed_chains(PAGE)
    wide = {chain_id(c): "x" * (PRINTED_WIDTH + 1) for _, c in chains}
    lines = "|".join(str(fence.line) for fence, _ in chains)
    with pytest.raises(PluginError, match=rf"the block of line ({lines}) printed a line of 101"):
        insert_printed(PAGE, "docs/chapters/a.md", wide)
    fits = {chain_id(c): "x" * PRINTED_WIDTH for _, c in printed_chains(PAGE)}
    assert "x" * PRINTED_WIDTH in insert_printed(PAGE, "docs/chapters/a.md", fits)
