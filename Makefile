# The README's two commands: `make demo` and `make test`. Both set everything up
# from nothing but python3 (>= 3.9) with venv, in ./.venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Pinned: a plain `torch` would pull a multi-GB CUDA build onto a CPU machine.
TORCH ?= torch==2.13.0
ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test install clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.deps: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q ".[tui,dev]"
	touch $@

# The project itself is reinstalled every time (not editable): tests run against the installed package.
install: $(VENV)/.deps
	$(BIN)/pip install -q --no-deps --force-reinstall ".[tui,dev]"

demo: install
	$(BIN)/ranktop demo $(ARGS)

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

bench: install
	$(BIN)/python benchmarks/probe_overhead.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
