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
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(BIN)/lookahead-chat bench $(BENCH_ARGS)

tune: setup
	$(BIN)/lookahead-chat tune

# Renders docs/screenshots/*.png with the real default model under Xvfb (apt-get install xvfb).
screenshots: setup
	xvfb-run -a -s "-screen 0 1400x900x24" env QT_QPA_PLATFORM=xcb $(BIN)/python tests/app/screenshots.py docs/screenshots

clean:
	rm -rf $(VENV) build dist .pytest_cache

# --- installers (packaging/) ------------------------------------------------------------------
# `make package-linux` builds dist/lookahead-chat-VERSION-linux-x86_64-VARIANT.deb and .tar.gz from a
# PyInstaller onedir bundle (dist/VARIANT/lookahead-chat), in its own virtualenv so that dev tools
# stay out of the bundle.  VARIANT=cpu (default) needs torch's CPU build: PKG_TORCH/PKG_TORCH_INDEX
# default to TORCH/TORCH_INDEX, and packaging/check_torch.py stops the build if the variant and the
# installed torch disagree.  VARIANT=cuda with PyPI's torch gives the CUDA build on Linux.
# `make package-test` also installs the .deb (root or sudo), runs the installed app's --self-test and
# a window smoke test, and uninstalls it again (KEEP_INSTALLED=1 keeps it).
VARIANT         ?= cpu
PKG_TORCH       ?= $(TORCH)
PKG_TORCH_INDEX ?= $(TORCH_INDEX)
PKG_VENV        ?= build/pkg-venv-$(VARIANT)
PKG_BIN         := $(PKG_VENV)/bin
PKG_STAMP       := $(PKG_VENV)/.installed
PKG_VERSION     := $(shell sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml)
PKG_BUNDLE      := dist/$(VARIANT)/lookahead-chat
PKG_DEB         := dist/lookahead-chat-$(PKG_VERSION)-linux-x86_64-$(VARIANT).deb

$(PKG_STAMP): pyproject.toml
	$(PYTHON) -m venv $(PKG_VENV)
	$(PKG_BIN)/python -m pip install --quiet --upgrade pip
	$(PKG_BIN)/python -m pip install --quiet "$(PKG_TORCH)" $(if $(PKG_TORCH_INDEX),--index-url $(PKG_TORCH_INDEX))
	$(PKG_BIN)/python -m pip install --quiet -e ".[package]"
	$(PKG_BIN)/python packaging/check_torch.py $(VARIANT)
	touch $@

package-linux: $(PKG_STAMP)
	LOOKAHEAD_VARIANT=$(VARIANT) $(PKG_BIN)/pyinstaller --noconfirm --log-level WARN \
		--distpath dist/$(VARIANT) --workpath build/pyinstaller-$(VARIANT) packaging/lookahead-chat.spec
	packaging/linux/build-deb.sh $(PKG_BUNDLE) dist $(PKG_VERSION) $(VARIANT)

package-test: package-linux
	packaging/linux/test-installed.sh $(PKG_DEB)
