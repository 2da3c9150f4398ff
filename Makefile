# memtheory: build, test and book targets. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:
.DEFAULT_GOAL := test
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Stamps live inside the venv, so deleting .venv also forgets what was installed in it.
STAMP_DEV := $(VENV)/.stamp-dev
STAMP_BOOK := $(VENV)/.stamp-book
STAMP_BENCH := $(VENV)/.stamp-bench
BOOK_HTML := book/_build/html
# `make test` also builds the book and checks it in a browser; `make test BOOK=0` skips that.
BOOK ?= 1
# pytest runs in this many worker processes (pytest-xdist), one per CPU core by default.
# `--dist loadfile` sends every test of a file to one worker, so a module-scoped fixture (the
# measured zoo, a built wheel) is built once, not once per worker; session-scoped fixtures (the
# browser) are built once per worker. `make test PYTEST_WORKERS=0` runs pytest in one process.
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)
# Each stage prints one line with its wall-clock and CPU seconds; `make test` repeats them all
# at its end (from this file), so the next reader sees where the time goes.
STAGE_TIMES := build/stage-times.txt
TIMED := bash .ci/timed

# Tests marked `slow` (a real library's training step measured, the zoo of measured models, a
# built wheel, a trace of a whole Hugging Face model) run in `make test-slow`, not `make test`,
# so that `make test` stays within 15 minutes on two cores; `.ci/run` runs both.
SLOW := -m slow
QUICK := -m "not slow"
# With the book (BOOK=1), `make test` builds it while the quick tests that do not read it run
# beside it (the build executes its notebooks on one core): the tests marked `built_book` (the
# built HTML, the browser) run after the book is built and checked.
QUICK_BESIDE_BOOK := -m "not slow and not built_book"
AFTER_BOOK := -m "built_book and not slow"
# Where the `built_book` tests live (collecting only these is quicker than all of tests/);
# tests/book/test_built_book_marker.py fails when a marked test lives elsewhere.
AFTER_BOOK_PATHS := tests/book tests/exercises/test_sections.py

.PHONY: help venv test checks-and-quick-tests test-slow stage-times book book-check browser bench clean distclean

help:
	@echo "make venv       create .venv and install memtheory with the dev extra"
	@echo "make test       ruff, mypy, lint-imports (layers), book-check, pytest (tests, doctests, browser test); BOOK=0 skips the book"
	@echo "                pytest runs on PYTEST_WORKERS processes (default: nproc); each stage prints its time"
	@echo "make test-slow  the tests marked slow (real libraries' steps, the measured zoo); .ci/run runs both"
	@echo "make book       install the book extra and build book/ (warnings are errors)"
	@echo "make book-check make book, then check the HTML: no CDN, no unrendered math or roles"
	@echo "make browser    install Debian's chromium for the browser test, if missing"
	@echo "make bench      install the bench extra, run every benchmarks/*.py, then a table of every target and verdict"
	@echo "make clean      remove book/_build and caches; distclean also removes .venv"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

# The torch extra is PyTorch 2.13.0's CPU wheel: the measurement tests and chapter need it.
$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,torch]'
	touch $@

# The book extra is a superset of dev: installing it also satisfies the dev stamp.
$(STAMP_BOOK): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,book,torch]'
	touch $@ $(STAMP_DEV)

# The bench extra (torchinfo, a peer one benchmark times) on top of dev and torch: `make bench`.
$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[dev,torch,bench]'
	touch $@ $(STAMP_DEV)

venv: $(STAMP_DEV)

# pytest exits 5 when it collects no test; nothing here masks that, so `make test` fails.
# With BOOK=1 (the default) the book is built and checked beside the checks and the quick tests
# (`make -j2`: the book's notebooks run on one core), then the tests of the built book run, so
# the browser test sees the fresh HTML and a broken chapter fails `make test`. Everything is
# installed first (the book extra), so the two sides never install into .venv at once.
ifeq ($(BOOK),1)
test: stage-times $(STAMP_BOOK) browser
	$(MAKE) --no-print-directory -j2 book-check checks-and-quick-tests
	$(TIMED) pytest-book $(STAGE_TIMES) \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(AFTER_BOOK) $(AFTER_BOOK_PATHS)
	@echo "time per stage (wall-clock varies with the machine's load; CPU is steadier):"
	@cat $(STAGE_TIMES)
else
test: stage-times venv
	$(MAKE) --no-print-directory checks-and-quick-tests PYTEST_MARKS='$(QUICK)'
	@echo "time per stage (wall-clock varies with the machine's load; CPU is steadier):"
	@cat $(STAGE_TIMES)
endif

# The checks, then the quick tests (those that need no built book unless BOOK=0 said no book).
PYTEST_MARKS ?= $(QUICK_BESIDE_BOOK)
checks-and-quick-tests: venv
	$(TIMED) checks $(STAGE_TIMES) \
	  bash -c '$(BIN)/ruff check . && $(BIN)/mypy memtheory && $(BIN)/lint-imports'
	$(TIMED) pytest $(STAGE_TIMES) \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_MARKS)

# The slow tests alone (no doctests: `make test` ran them). Its stage time is added to the
# file `make test` wrote, so after `.ci/run` the table lists every stage.
test-slow: venv
	@mkdir -p $(dir $(STAGE_TIMES)) && touch $(STAGE_TIMES)
	$(TIMED) pytest-slow $(STAGE_TIMES) \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(SLOW) tests
	@echo "time per stage (wall-clock varies with the machine's load; CPU is steadier):"
	@cat $(STAGE_TIMES)

# Forget the stage times of an earlier `make test`: listed first, it runs before the book.
stage-times:
	@mkdir -p $(dir $(STAGE_TIMES)) && : > $(STAGE_TIMES)

# JUPYTER_PATH puts the venv's python3 kernelspec ahead of any user-level one, so cells run
# in .venv (where memtheory is installed) whatever else is on the machine. IPYTHONDIR gives the
# kernel the book's own IPython configuration (book/_ipython: figures drawn as SVG).
book: $(STAMP_BOOK)
	JUPYTER_PATH="$(CURDIR)/$(VENV)/share/jupyter" IPYTHONDIR="$(CURDIR)/book/_ipython" $(TIMED) book $(STAGE_TIMES) \
	  $(BIN)/jupyter-book build book --all -W --keep-going

# The built site must work offline: MathJax from _static/, no script or stylesheet from a CDN.
# `-W` does not see markup that rendered as text: check_built_html.py fails on a stray $ outside
# MathJax's math, a {cite}/{ref}/{glue} role left as text, a math or docutils error marker, or
# a script included twice (its docstring says what it skips).
book-check: book
	grep -l 'src="_static/mathjax/tex-chtml.js' $(BOOK_HTML)/intro.html
	! grep -rnoE '(src|href)="(https?:)?//[^"]*\.(js|css)([?#][^"]*)?"' --include='*.html' $(BOOK_HTML)
	$(TIMED) book-check $(STAGE_TIMES) $(BIN)/python tests/book/check_built_html.py $(BOOK_HTML)

# The browser test needs Chromium; install Debian's package when it is missing and apt works.
# If it cannot be installed, the test skips with a message saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    >/dev/null 2>&1 || echo "could not install chromium: the browser test will be skipped"; \
	}

# Each benchmark prints its figures with their targets and verdicts and records them in a
# summary file; the last table gathers every target. A benchmark that fails is recorded as such.
bench: $(STAMP_BENCH)
	summary=$$(mktemp); export MEMTHEORY_BENCH_SUMMARY=$$summary; \
	shopt -s nullglob; for script in benchmarks/[!_]*.py; do \
	  echo "== $$script"; $(BIN)/python "$$script" || printf '%s\n' \
	    "{\"benchmark\": \"$$script\", \"what\": \"(all)\", \"value\": \"-\", \"target\": \"-\", \"verdict\": \"failed: exit $$?\"}" \
	    >> "$$summary"; \
	done; \
	echo; $(BIN)/python benchmarks/_verdict.py "$$summary"; rm -f "$$summary"

clean:
	rm -rf book/_build build dist .pytest_cache .ruff_cache .mypy_cache .import_linter_cache .hypothesis *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
