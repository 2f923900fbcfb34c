"""The build tooling of the site (booktools): notebooks, figures, listings, notes, the plugin."""

from pathlib import Path

import nbformat
import pytest
from mkdocs.exceptions import PluginError
from repo import ROOT

from attention_book.figures import figure_functions, find_figure
from booktools.plugin import figures, listings
from booktools.plugin.notebooks import chapter_notebook
from booktools.plugin.notes import first_run_notes
from booktools.plugin.state import BuildState, MissingFragmentError

CHAPTER = """# A chapter

Some prose with $x^2$ and a figure ![w](../figures/home_attention_weights.svg).
See [the next chapter](bahdanau.md#the-experiment) and [the API](../api/masking.md).

```python title="attention_book/plotting.py"
--8<-- "attention_book/plotting.py:show_heatmaps"
```

```python
print(1 + 1)
```

<!--pytest-codeblocks:expected-output-->
```text
2
```

??? success "Solution"

    <!--pytest.mark.skip(reason="an example")-->
    ```python
    print("solution")
    ```
"""


def test_chapter_notebook_turns_runnable_blocks_into_code_cells():
    notebook = chapter_notebook(CHAPTER, "chapters/a/", "https://example.org/")
    nbformat.validate(notebook)
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert code == ["print(1 + 1)"]  # the skipped block is a listing with its reason
    assert 'print("solution")' in "\n".join(c.source for c in notebook.cells)
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "def show_heatmaps(" in markdown  # the included source is shown as a listing
    assert "https://example.org/figures/home_attention_weights.svg" in markdown
    assert "(https://example.org/chapters/bahdanau/#the-experiment)" in markdown
    assert "(https://example.org/api/masking/)" in markdown
    assert "*Not run here: an example.*" in markdown
    assert "pytest" not in markdown  # test marks and expected output are not for readers
    assert "\n2\n" not in markdown


def test_chapter_notebook_is_stable():
    first = nbformat.writes(chapter_notebook(CHAPTER, "a/", ""))
    assert first == nbformat.writes(chapter_notebook(CHAPTER, "a/", ""))


def test_figure_links_are_found_only_in_image_links():
    text = "![a](../figures/one.svg) and `figures/NAME.svg` and [b](figures/two.svg)"
    assert figures.FIGURE_LINK.findall(text) == ["one", "two"]


# Run in a copy of the package: the figure keys before and after each edit, in order.
KEYS_SCRIPT = """
import json, sys
from pathlib import Path
from booktools.plugin import figures
results = Path.cwd() / "benchmarks" / "results"  # the copy's
modules, edits = json.loads(sys.argv[1]), json.loads(sys.argv[2])
changed = []
after = {m: figures.figure_key(m, shown, results) for m, shown in modules}
for step in edits:
    before = after
    for path, old, new in step:
        text = Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
        assert old in text, (path, old)
        Path(path).write_text(text.replace(old, new, 1) if old else text + new, encoding="utf-8")
    if any(path.endswith(".py") for path, _, _ in step):  # what the package declares
        figures.declarations.cache_clear()
    after = {m: figures.figure_key(m, shown, results) for m, shown in modules}
    changed.append(sorted(m.rsplit(".", 1)[1] for m in before if before[m] != after[m]))
print(json.dumps(changed))
"""

KEYED = [
    ["attention_book.figures.multihead", False],
    ["attention_book.figures.self_attention", False],
    ["attention_book.figures.bahdanau", False],
    ["attention_book.figures.flash", True],
]


def test_a_figure_key_changes_with_the_code_it_runs_and_never_with_its_prose(tmp_path):
    import importlib
    import json
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "attention_book", tmp_path / "attention_book")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "tests" / "recorded").mkdir(parents=True)
    (tmp_path / "tests" / "recorded" / "headlines.json").write_text("{}")
    comment = "\n# an edit\n"
    version = importlib.import_module("attention_book.experiments.multihead").VERSION
    edits = [  # each step: the files it edits, then the keys are read again
        [  # prose only: comments, and a docstring of a module most figures reach
            ["attention_book/masking.py", "", comment],
            ["attention_book/masking.py", "Softmax over the last axis", "Softmax on the last axis"],
            ["attention_book/experiments/multihead.py", "", comment],
            ["attention_book/figures/bahdanau.py", "", comment],
        ],
        # The code of one chapter's experiment, then of one chapter's drawing.
        [["attention_book/experiments/multihead.py", "", "\n_EDITED = 1\n"]],
        [["attention_book/figures/bahdanau.py", "", "\n_EDITED = 1\n"]],
        # The version of a run the figures show: its key in the store changes.
        [["attention_book/experiments/multihead.py", f"\nVERSION = {version}\n",
          f"\nVERSION = {version + 1}\n"]],
        # A refactor of a module that every figure below reaches: each is drawn again.
        [["attention_book/masking.py", "row_has_key", "has_visible_key"]],
        [["attention_book/figures/__init__.py", "RENDER_VERSION = 1", "RENDER_VERSION = 2"]],
        [["benchmarks/results/run.json", "", "{}"]],  # a committed benchmark result
        [["tests/recorded/headlines.json", "", " "]],  # the recorded spreads
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", KEYS_SCRIPT, json.dumps(KEYED), json.dumps(edits)],
        cwd=tmp_path,
        # The copy of the package first, then the repository for booktools.
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = [set(changed) for changed in json.loads(result.stdout)]
    prose, experiment, figure, bumped, masking, svg, results, spreads = found
    assert prose == set()  # nothing is drawn again
    assert experiment == {"multihead"}
    assert figure == {"bahdanau"}
    assert bumped == {"multihead"}
    assert masking == {"multihead", "self_attention", "bahdanau", "flash"}
    assert svg == {"multihead", "self_attention", "bahdanau", "flash"}
    assert results == {"flash"}  # only the figures that show benchmark results
    assert spreads == {"multihead", "bahdanau"}  # only those whose sentences read the spreads


def test_a_cold_build_trains_the_declared_runs_the_missing_figures_need_first(monkeypatch):
    calls = []
    declared = {
        "modules": {
            "attention_book.figures.a": {"runs": ["run-a", "run-shared"]},
            "attention_book.figures.b": {"runs": ["run-shared"]},
            "attention_book.figures.c": {"runs": ["run-c"]},
        },
        "stored": {"run-a": False, "run-shared": None, "run-c": False},
    }
    monkeypatch.setattr(figures, "declarations", lambda: declared)

    def run(command, **kwargs):
        calls.append(command)
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(figures.subprocess, "run", run)
    modules = {"fig_a": "attention_book.figures.a", "fig_b": "attention_book.figures.b"}
    figures.train_missing(["fig_a", "fig_b"], modules)
    (command,) = calls
    assert command[1:4] == ["-m", "attention_book.experiments", "train"]
    trained = [command[i + 1] for i, part in enumerate(command) if part == "--run"]
    assert trained == ["run-a", "run-shared"]  # not run-c: no figure about to be drawn needs it
    declared["stored"] = {"run-a": True, "run-shared": True, "run-c": False}
    figures.train_missing(["fig_a", "fig_b"], modules)
    assert len(calls) == 1  # everything stored: nothing to train


def referenced(pattern) -> set[str]:
    """Names a page references with the tooling's own patterns."""
    names = set()
    for page in (ROOT / "docs").rglob("*.md"):
        for match in pattern.finditer(page.read_text(encoding="utf-8")):
            names.add(match[1])  # the figure's name (not the key of one of its values)
    return names


@pytest.mark.parametrize(
    "name", sorted(referenced(figures.FIGURE_LINK) | referenced(figures.BUILD_FRAGMENT))
)
def test_every_figure_a_page_shows_has_a_function(name):
    assert callable(find_figure(name))


def test_every_listed_figure_is_shown_by_a_page():
    shown = referenced(figures.FIGURE_LINK) | referenced(figures.BUILD_FRAGMENT)
    assert sorted(set(figure_functions()) - shown) == []


def test_render_passes_the_results_directory(tmp_path):
    # The package does not know where the repository keeps benchmark results; the plugin does.
    figures.render(["flash_memory_rss"], tmp_path)
    table = (tmp_path / "flash_memory_rss.md").read_text(encoding="utf-8")
    assert "Run of `benchmarks/flash_memory.py`" in table


def test_render_draws_chapters_in_parallel_workers(tmp_path, monkeypatch):
    # Two chapter modules, two workers: each chapter's figures are drawn by one of them.
    monkeypatch.setenv("BOOK_JOBS", "2")
    names = ["home_attention_weights", "cues_qkv_diagram", "cues_pooling_weights"]
    modules = {name: find_figure(name).__module__ for name in names}
    figures.render(names, tmp_path, modules)
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == sorted(f"{n}{variant}" for n in names for variant in (".svg", ".dark.svg"))


def test_render_reports_which_chapter_failed(tmp_path):
    with pytest.raises(PluginError, match=r"attention_book.figures.home: exit status 2"):
        figures.render(
            ["no_such_figure"], tmp_path, {"no_such_figure": "attention_book.figures.home"}
        )


def test_an_include_of_a_missing_section_names_the_page():
    include = '--8<-- "attention_book/plotting.py:nope"'
    page = f'```python title="attention_book/plotting.py"\n{include}\n```\n'
    with pytest.raises(PluginError, match=r"docs/chapters/x.md: .*no section 'nope' in"):
        chapter_notebook(page, "chapters/x/", "", "docs/chapters/x.md")
    missing = page.replace("plotting.py:nope", "nothing.py:nope")
    with pytest.raises(PluginError, match=r"docs/chapters/x.md: .*no file"):
        chapter_notebook(missing, "chapters/x/", "", "docs/chapters/x.md")


def build_files(tmp_path: Path, pages: dict[str, str]):
    """A mkdocs Files collection of Markdown pages written under tmp_path/docs."""
    from mkdocs.structure.files import File, Files

    docs = tmp_path / "docs"
    files = []
    for uri, text in pages.items():
        (docs / uri).parent.mkdir(parents=True, exist_ok=True)
        (docs / uri).write_text(text, encoding="utf-8")
        files.append(File(uri, str(docs), str(tmp_path / "site"), use_directory_urls=True))
    return Files(files)


def test_an_unknown_figure_names_the_page_that_shows_it(tmp_path, monkeypatch):
    files = build_files(tmp_path, {"chapters/x.md": "# X\n\n![a](../figures/not_a_figure.svg)\n"})
    monkeypatch.setattr(figures, "CACHE", tmp_path / "cache")
    index = {"home_attention_weights": ("attention_book.figures.home", False)}
    monkeypatch.setattr(figures, "figure_index", lambda: index)
    with pytest.raises(PluginError, match=r"docs/chapters/x.md: unknown figure 'not_a_f"):
        figures.add_figures(files, {}, BuildState())


def test_a_fragment_shown_as_an_image_says_how_to_insert_it(tmp_path, monkeypatch):
    files = build_files(tmp_path, {"chapters/x.md": "# X\n\n![a](../figures/table.svg)\n"})
    monkeypatch.setattr(figures, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(
        figures, "figure_index", lambda: {"table": ("attention_book.figures.home", False)}
    )

    def render(names, out_dir, modules):
        (out_dir / "table.md").write_text("| a |")

    monkeypatch.setattr(figures, "render", render)
    with pytest.raises(PluginError, match=r"docs/chapters/x.md: .*returned Markdown.*build:"):
        figures.add_figures(files, {}, BuildState())


def test_listings_keep_only_the_summary_line_of_each_docstring():
    source = '''class A:
    """One line.

    Args:
        x: Something.
    """

    def f(self, x):
        """Do it, in two
        lines of summary.

        Returns:
            x.
        """
        return x  # keep comments
'''
    assert listings.shorten_docstrings(source) == (
        'class A:\n    """One line."""\n\n    def f(self, x):\n'
        '        """Do it, in two lines of summary."""\n        return x  # keep comments'
    )
    assert listings.shorten_docstrings("def broken(:\n") == "def broken(:\n"


def test_listings_link_what_they_show_to_the_api_reference():
    page = (
        "Text.\n\n"
        '??? note "Folded"\n\n'
        '    ```python title="attention_book/multihead.py"\n'
        '    --8<-- "attention_book/multihead.py:split_heads"\n'
        '    --8<-- "attention_book/multihead.py:merge_heads"\n'
        "    ```\n\nMore text.\n"
    )
    expanded = listings.expand_listings(page, "docs/chapters/x.md")
    assert "--8<--" not in expanded
    assert "\n    def split_heads(" in expanded and "\n    def merge_heads(" in expanded
    assert "Args:" not in expanded and "Shapes:" not in expanded  # left to the API page
    assert (
        "    API reference: [`split_heads`][attention_book.multihead.split_heads] · "
        "[`merge_heads`][attention_book.multihead.merge_heads]\n    {: .listing-api }"
    ) in expanded
    assert expanded.endswith("More text.\n")


def test_the_api_line_ends_its_block_when_prose_follows_the_listing_at_once():
    """The transformer chapter had a line of prose right after a listing's closing fence: the
    marker then sat inside a paragraph, and the page showed '{: .listing-api }' as text."""
    import markdown

    from booktools.plugin.attr_lists import stray_attribute_lists

    page = (
        '```python title="attention_book/masking.py"\n'
        '--8<-- "attention_book/masking.py:causal_mask"\n'
        "```\n"
        "Change one target token and only the later outputs change.\n"
    )
    expanded = listings.expand_listings(page, "docs/chapters/x.md")
    lines = expanded.split("\n")
    marker = lines.index("{: .listing-api }")
    assert lines[marker - 1].startswith("API reference: ")
    assert lines[marker + 1] == ""  # the marker ends its paragraph
    assert lines[marker + 2] == "Change one target token and only the later outputs change."
    rendered = markdown.markdown(expanded, extensions=["attr_list", "pymdownx.superfences"])
    assert stray_attribute_lists(rendered) == []
    assert '<p class="listing-api">API reference:' in rendered


def test_a_marker_left_as_text_in_a_built_page_fails_the_build_naming_the_page():
    from booktools.plugin.attr_lists import check_attribute_lists, stray_attribute_lists

    left = "<p>API reference: <code>causal_mask</code>\n{: .listing-api }\nChange one token</p>"
    assert stray_attribute_lists(left) == ["...API reference: {: .listing-api }"]
    with pytest.raises(
        PluginError, match=r"docs/chapters/transformer.md: 1 attribute list.*listing-api"
    ):
        check_attribute_lists(left, "chapters/transformer.md")
    assert stray_attribute_lists("<p>Open {:</p>") == ["...Open {:"]
    # Code is not prose: a format string in a listing, or an attribute list shown as an example.
    code = '<pre><code>print(f"{x:.2f}", "{:.2f}".format(x))</code></pre>'
    code += "<p>Use <code>{: .x }</code>.</p>"
    assert stray_attribute_lists(code) == []
    check_attribute_lists('<p class="listing-api">API reference: x</p>', "chapters/x.md")


def test_a_listing_of_a_private_helper_has_no_api_line():
    source = "def _helper():\n    return 1\n"
    assert listings.api_identifiers("attention_book/multihead.py", source) == []
    assert listings.api_identifiers("attention_book/not_documented.py", "def f(): ...") == []


def test_a_fragment_of_several_lines_keeps_the_indentation_of_its_line():
    state = BuildState(fragments={"table": "| a |\n| --- |\n| 1 |"})
    page = '??? success "Solution"\n\n    {{ build:table }}\n\nAfter.'
    assert figures.insert_fragments(page, "docs/x.md", state) == (
        '??? success "Solution"\n\n    | a |\n    | --- |\n    | 1 |\n\nAfter.'
    )
    with pytest.raises(PluginError, match=r"docs/x.md: unknown build fragment 'nope'"):
        figures.insert_fragments("{{ build:nope }}", "docs/x.md", state)


def test_a_missing_fragment_fails_the_same_way_on_the_page_and_in_the_notebook():
    page = "# A chapter\n\nThe numbers: {{ build:nope }}\n"
    errors = []
    for insert in (
        lambda: figures.insert_fragments(page, "docs/chapters/x.md", BuildState()),
        lambda: chapter_notebook(page, "chapters/x/", "", "docs/chapters/x.md", BuildState()),
    ):
        with pytest.raises(MissingFragmentError) as error:
            insert()
        errors.append(str(error.value))
    assert errors[0] == errors[1] == "docs/chapters/x.md: unknown build fragment 'nope'"


def test_the_plugin_keeps_its_state_in_the_configuration_of_each_build():
    from booktools.plugin.events import BookPlugin, build_state

    plugin = BookPlugin()
    config = plugin.on_config({})
    state = build_state(config)
    assert isinstance(state, BuildState) and state.fragments == {} and state.frames == {}
    assert build_state(plugin.on_config({})) is not state  # each build starts clean
    with pytest.raises(PluginError, match="build state is missing"):
        build_state({})


def test_mkdocs_finds_the_plugin_by_its_entry_point_after_search():
    from importlib.metadata import entry_points

    import yaml

    from booktools.plugin.events import BookPlugin

    assert entry_points(group="mkdocs.plugins")["book"].load() is BookPlugin
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    names = [next(iter(p)) if isinstance(p, dict) else p for p in config["plugins"]]
    assert names[-1] == "book" and names.index("search") < names.index("book")
    assert "hooks" not in config  # nothing loaded by file path


TRAINING_PAGE = """# A page

```python
from attention_book.experiments.vit import vit_experiment

result = vit_experiment()
```

```python
print("nothing to train")
```

```python title="attention_book/experiments/vit.py"
result = vit_experiment()
```

??? example "A solution"

    ```python
    from attention_book.experiments.transformer_studies import transformer_length_experiment

    transformer_length_experiment()
    ```
"""


def test_a_block_that_trains_says_what_it_trains_and_for_how_long(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path))
    (tmp_path / "compute-seconds.json").write_text(json.dumps({
        "vit-vit": {"seconds": 65.4, "cpus": 2, "date": "2026-12-01"},
        "vit-cnn": {"seconds": 40.0, "cpus": 2, "date": "2026-12-01"},
        "transformer-length": {"seconds": 250.0, "cpus": 2, "date": "2026-12-01"},
    }))  # fmt: skip
    lines = first_run_notes(TRAINING_PAGE).split("\n")
    notes = [number for number, line in enumerate(lines) if "The first run trains." in line]
    assert len(notes) == 2  # not the block that trains nothing, nor the listing
    first, second = (lines[number] for number in notes)
    assert lines[notes[0] + 2] == "```python"  # right before the block it is about
    assert "the `vit-…` runs it uses (40 s to 1 min 5 s each on the machine" in first
    assert second.startswith("    > ")  # indented like its block, inside the solution
    assert "`transformer-length` (4 min 10 s on the machine" in second
    notebook = chapter_notebook(TRAINING_PAGE, "chapters/x/", "https://example.org/")
    assert sum("The first run trains." in cell.source for cell in notebook.cells) == 2


def test_a_value_of_the_build_is_written_into_a_sentence(tmp_path, monkeypatch):
    files = build_files(tmp_path, {"chapters/x.md": "It took {{ build:facts.seconds }} s."})
    monkeypatch.setattr(figures, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(
        figures, "figure_index", lambda: {"facts": ("attention_book.figures.home", False)}
    )

    def render(names, out_dir, modules):
        (out_dir / "facts.json").write_text('{"seconds": "12.5", "runs": "3"}')

    monkeypatch.setattr(figures, "render", render)
    state = BuildState()
    figures.add_figures(files, {}, state)
    page = "It took {{ build:facts.seconds }} s over {{ build:facts.runs }} runs."
    assert figures.insert_fragments(page, "docs/chapters/x.md", state) == (
        "It took 12.5 s over 3 runs."
    )
    with pytest.raises(MissingFragmentError, match=r"unknown build fragment 'facts.nope'"):
        figures.insert_fragments("{{ build:facts.nope }}", "docs/chapters/x.md", state)
    with pytest.raises(MissingFragmentError, match=r"'facts' \(it holds values: facts.runs"):
        figures.insert_fragments("{{ build:facts }}", "docs/chapters/x.md", state)


def test_a_figure_key_follows_what_the_store_holds_for_its_runs(monkeypatch, tmp_path):
    # The same declared key, trained again (another machine, another thread count): other
    # numbers in the store, so the figures that show them are drawn again.
    module = "attention_book.figures.multihead"
    declared = {
        "render_version": 1,
        "modules": {module: {"computations": {}, "runs": ["run-a"]}},
        "digests": {"run-a": "0123456789abcdef"},
    }
    monkeypatch.setattr(figures, "declarations", lambda: declared)
    before = figures.figure_key(module, False, tmp_path)
    assert figures.figure_key(module, False, tmp_path) == before
    declared["digests"] = {"run-a": "fedcba9876543210"}
    assert figures.figure_key(module, False, tmp_path) != before
