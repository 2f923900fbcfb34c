# The two commands of the README, and the targets they build on.
#   make serve   set up, then serve the book at http://127.0.0.1:8000 with live reload
#   make test    set up, then run the whole gate (what CI runs)
#   make page PAGE=docs/chapters/x.md   the same gate for one page (see CONTRIBUTING.md)
#   make expected PAGE=docs/chapters/x.md   rewrite the page's expected outputs that changed
#   make notebooks   run every chapter's downloadable notebook (CI runs it after make test)
#   make probes RUN=name      record the probe of a new or bumped run (tests/recorded/probes.json)
#   make crossmachine RECORD=1 RUN=name   record the run's spread over seven variants
#                       (tests/recorded/headlines.json); without RUN, every run; without
#                       RECORD, train under other CPU arithmetic, referee and read them
#   make drift       the unit tests and snippets on the newest releases, no pins (CI: weekly)
# Every target installs what it needs first; nothing relies on what was installed by hand.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done
HOST ?= 127.0.0.1:8000

export MPLBACKEND := Agg
export PYTHONDONTWRITEBYTECODE := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup serve site test page expected notebooks probes lint docs workflows unit snippets build \
	links browser \
	chromium drift crossmachine clean clean-cache

setup: $(STAMP)

# Re-run the install whenever the pins or the package metadata change. KaTeX (the math of the
# pages, rendered at build time) is fetched once from the npm registry and checked against the
# digest pinned in booktools/plugin/katex-lock.json: see booktools/plugin/katex.py.
$(STAMP): requirements.txt pyproject.toml booktools/plugin/katex-lock.json
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable .
	$(BIN)/python -m booktools.plugin.katex install
	@touch $@

serve: setup
	$(BIN)/mkdocs serve --dev-addr $(HOST) --livereload

site: setup
	$(BIN)/mkdocs build --strict

# The build comes before the snippets: on a cold machine it trains the book's experiments in
# parallel worker processes (one chapter each), and the snippets then load them from the cache.
test: setup chromium lint workflows docs unit build snippets links browser

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The rules of the pages (booktools/checks/docs.py): every code block runs or says why not, the
# Python blocks pass ruff, every listing marker is shown, no word of the book's making.
docs: setup
	$(BIN)/python -m booktools.checks.docs

# The workflows: zizmor's audits, offline (every action pinned to a commit, .github/zizmor.yml),
# and GitHub's workflow schema as check-jsonschema ships it (no download).
workflows: setup
	$(BIN)/zizmor --offline --persona pedantic --quiet .github/
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

# The unit tests share the cores (pytest-xdist): 3 min 25 s on one, 2 min 20 s on two.
unit: setup
	$(BIN)/pytest -n auto tests/

# One page: the docs check of it, the structural tests a new page or module can break (the nav,
# the API reference, the module lists, the reading budgets, the import layers, the notation:
# half a minute), its snippets, the strict build, the browser check of it alone.
# A page without a runnable block makes pytest exit with 5 ("no tests ran"): that is not a failure.
STRUCTURE_TESTS := tests/docs/test_api_pages.py tests/package/test_module_lists.py \
	tests/tooling/test_reading.py tests/tooling/test_structure.py tests/package/test_layers.py \
	tests/package/test_package_rules.py tests/docs/test_reviewed_claims.py
page: setup chromium
	@case "$(PAGE)" in docs/*.md|README.md) test -f "$(PAGE)";; *) false;; esac || { \
	  echo "usage: make page PAGE=docs/chapters/<page>.md (got PAGE='$(PAGE)')"; exit 2; }
	$(BIN)/python -m booktools.checks.docs "$(PAGE)"
	$(BIN)/pytest -q -p no:cacheprovider $(STRUCTURE_TESTS)
	@TRITON_INTERPRET=$${TRITON_INTERPRET:-$$($(BIN)/python -c \
	  "import torch; print(0 if torch.cuda.is_available() else 1)")} \
	  $(BIN)/pytest --codeblocks -p no:cacheprovider "$(PAGE)"; status=$$?; \
	  if [ $$status = 5 ]; then echo "$(PAGE): no runnable block (pytest exit 5), nothing to run"; \
	  elif [ $$status != 0 ]; then exit $$status; fi
	$(BIN)/mkdocs build --strict
	@test "$(PAGE)" = README.md || \
	  $(BIN)/python -m booktools.browser.check site --page "$(PAGE)" --screenshots screenshots

# Triton reads TRITON_INTERPRET once, at its first import, and the pages' blocks share one
# process: without a CUDA GPU the whole run uses Triton's interpreter, unless it is set already.
snippets: setup
	TRITON_INTERPRET=$${TRITON_INTERPRET:-$$($(BIN)/python -c \
	  "import torch; print(0 if torch.cuda.is_available() else 1)")} \
	  $(BIN)/pytest --codeblocks docs/ README.md

build: site

# Rewrite the expected output of the blocks of one page that print something else now
# (booktools.checks.snippets --update-expected); read the diff and the prose around it after.
expected: setup
	@test -f "$(PAGE)" || { echo "usage: make expected PAGE=docs/chapters/<page>.md"; exit 2; }
	TRITON_INTERPRET=$${TRITON_INTERPRET:-$$($(BIN)/python -c \
	  "import torch; print(0 if torch.cuda.is_available() else 1)")} \
	  $(BIN)/pytest --codeblocks --update-expected -p no:cacheprovider "$(PAGE)"

# Every chapter's downloadable notebook, run from top to bottom in a fresh kernel in an empty
# directory (cells the page skips without a GPU print why and go on).
notebooks: setup
	env -u TRITON_INTERPRET $(BIN)/python -m booktools.checks.notebooks

# A page that passed keeps its verdict in .cache/browser while every file it loads, its Markdown
# source and the checker are unchanged (booktools.browser.verdicts): a second run checks only the
# pages that changed. `make clean-cache` forgets the verdicts; CI's gate starts without any.
browser: setup chromium
	$(BIN)/python -m booktools.browser.check site --screenshots screenshots --verdicts .cache/browser

# Every link of the built site checked by lychee, over its files: a missing page, image or
# anchor fails. Links to other hosts are not fetched (nothing is downloaded by a test).
links: setup
	$(BIN)/python -m booktools.checks.links site

# The unit tests and the snippets with the newest release of every direct dependency, no pins,
# in .venv-drift: what a reader who skips requirements.txt meets. CI runs it weekly, gating
# nothing (.github/workflows/drift.yml); the reports and the versions go to drift-report/.
DRIFT := .venv-drift
drift:
	@test -x $(DRIFT)/bin/python || $(PYTHON) -m venv $(DRIFT)
	@mkdir -p drift-report
	$(DRIFT)/bin/python -m pip install --quiet --upgrade pip
	sed -E 's/ *[=<>!~;].*//' requirements.txt | grep -v '^#' | grep . > drift-report/unpinned.txt
	$(DRIFT)/bin/python -m pip install --quiet --upgrade -r drift-report/unpinned.txt
	$(DRIFT)/bin/python -m pip install --quiet --no-deps --editable .
	$(DRIFT)/bin/python -m booktools.plugin.katex install
	$(DRIFT)/bin/python -m pip freeze --exclude-editable > drift-report/versions.txt
	@status=0; \
	$(DRIFT)/bin/pytest tests/ -p no:cacheprovider --junitxml=drift-report/unit.xml || status=1; \
	TRITON_INTERPRET=1 $(DRIFT)/bin/pytest --codeblocks docs/ README.md -p no:cacheprovider \
	  --junitxml=drift-report/snippets.xml || status=1; \
	exit $$status

# Record the probe of a new run, or of one whose VERSION was bumped (see CONTRIBUTING.md, "A
# training run"): RUN names it (several: RUN="a b"); without RUN, every run is probed, and only
# new runs and runs at a new VERSION are written: an entry that agrees is never rewritten.
probes: setup
	$(BIN)/python -m attention_book.experiments record-probes tests/recorded/probes.json \
	  $(foreach run,$(RUN),--run $(run))

# Other machines, emulated (booktools/checks/crossmachine.py): every declared run trained under AVX2
# and under the plainest kernels, each into its own store in .cache/crossmachine/, then the
# referee and the verdict tests on each; the table of numbers goes to .cache/crossmachine/table.md.
# RECORD=1 trains seven variants (seed 0 under three arithmetics, four more seeds) and records
# their spread in
# tests/recorded/headlines.json first. RUN=name (several: RUN="a b") trains, records and checks
# those runs only, the variants side by side: a minute-long run's variants take minutes.
# Without RUN, every run: about 10 minutes a variant on two cores. CI: weekly.
crossmachine: setup
	$(BIN)/python -m booktools.checks.crossmachine $(if $(RECORD),--record) \
	  $(foreach run,$(RUN),--run $(run))

# A Chromium for the browser check: Debian's chromium, installed when none is found (root, or
# sudo). A Chrome that is already installed (as on GitHub's runners) is used as it is.
chromium:
	@command -v chromium || command -v chromium-browser || command -v google-chrome || { \
	  echo "Installing Debian's chromium for the browser check"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

clean-cache: setup
	rm -rf .cache
	$(BIN)/python -m attention_book.training clear-cache

clean:
	rm -rf site screenshots .cache .pytest_cache .ruff_cache drift-report
