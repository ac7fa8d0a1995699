# The README's two commands: `make demo` and `make test`. Both set everything up
# from nothing but python3 (>= 3.9) with venv, in ./.venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Pinned: a plain `torch` would pull a multi-GB CUDA build onto a CPU machine.
TORCH ?= torch==2.13.0
ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test install clean bench slurm prometheus

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.deps: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q ".[tui,dev]"
	touch $@

# The real frameworks of the slow tests (pyproject's `frameworks` extra: Megatron-Core, DeepSpeed), where those run.
$(VENV)/.frameworks: $(VENV)/.deps
	$(BIN)/pip install -q ".[frameworks]"
	touch $@

# The project itself is reinstalled every time (not editable): tests run against the installed package.
# setuptools builds in ./build and never deletes from it: a module moved or removed would live on there.
install: $(VENV)/.deps
	rm -rf build
	$(BIN)/pip install -q --no-deps --force-reinstall ".[tui,dev]"

demo: install
	$(BIN)/ranktop demo $(ARGS)

# The slow tests (real multi-rank jobs under torchrun, SLURM jobs, the wheel in a bare venv, live
# recordings) run where CI is set (.ci/run runs with CI=true) or with `make test SLOW=1`; a plain
# `make test` runs the rest in a few minutes.
ifeq ($(CI)$(SLOW),)
TEST_MARK := -m "not slow"
else
FRAMEWORKS := $(VENV)/.frameworks
endif

test: $(FRAMEWORKS) install slurm prometheus
	$(BIN)/pytest $(TEST_MARK) $(PYTEST_ARGS)

# The SLURM tests start a private one-node cluster (tests/slurm_cluster.py) from Debian's
# packages: installed here when missing and we are root (about 15 s); otherwise they skip
# and say how to install them.
slurm:
	@if ! command -v slurmctld >/dev/null && ! test -x /usr/sbin/slurmctld; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing slurm-wlm and munge for the SLURM tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null \
	      || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null) \
	      || echo "could not install slurm-wlm and munge: the SLURM tests will skip"; \
	  else echo "slurm-wlm and munge are not installed (needs root: apt-get install slurm-wlm munge): the SLURM tests will skip"; fi; \
	fi

# The Prometheus tests (tests/test_prometheus_server.py) run a real Prometheus server and promtool from
# Debian's package: installed here when missing and we are root; otherwise they skip and say how to install it.
prometheus:
	@if ! command -v prometheus >/dev/null && ! test -x /usr/bin/prometheus; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing prometheus for the Prometheus tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null \
	      || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null) \
	      || echo "could not install prometheus: the Prometheus tests will skip"; \
	  else echo "prometheus is not installed (needs root: apt-get install prometheus): the Prometheus tests will skip"; fi; \
	fi

bench: install
	$(BIN)/python benchmarks/probe_overhead.py $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
