# Lookahead Chat: two set-up commands.  `make run` starts the app, `make test` runs the tests.
# Both create .venv, install the project and fetch the embedded default model; a second run
# skips what is done.
#
# TORCH picks the PyTorch build.  The default, torch==2.13.0, is the CPU build on this project's
# CI machines and the CUDA build from PyPI on Linux.  For a CUDA build on Windows, or a CPU-only
# build on Linux, point TORCH_INDEX at the matching PyTorch wheel index (see README).

PYTHON      ?= python3
VENV        ?= .venv
TORCH       ?= torch==2.13.0
TORCH_INDEX ?=
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed

.PHONY: run test bench tune screenshots package-linux package-test setup clean

# fetch-default returns at once when the model is already in the user cache.
setup: $(STAMP)
	$(BIN)/lookahead-chat fetch-default

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

run: setup
	$(BIN)/lookahead-chat

test: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/lookahead-chat bench $(BENCH_ARGS)

tune: setup
	$(BIN)/lookahead-chat tune

clean:
	rm -rf $(VENV) build dist .pytest_cache
