# dpo-bench. `make help` lists the targets.
HW       ?= cpu
FILTER   ?=
RUN      ?=
FLAVOR   ?= cpu
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
LOCK     := docker/$(FLAVOR)/requirements.lock
STAMP    := $(VENV)/.installed-$(FLAVOR)

BENCH_ARGS := --hw $(HW) $(if $(FILTER),--filter '$(FILTER)') $(if $(RUN),--run-id $(RUN)) $(if $(FORCE),--force)

.PHONY: help setup bench list matrix test test-unit test-integration lint perf compare publish clean

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'
	@echo "  variables: HW=$(HW) FILTER='glob,glob' RUN=<run-id> FORCE=1"

setup: $(STAMP) ## create .venv from the lock file (idempotent)

$(STAMP): $(LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@# DeepSpeed JIT-builds its CPU shared-memory comm op on first use (~1 min): build it once here, not inside a timed cell.
	$(if $(filter cpu,$(FLAVOR)),$(PY) -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()")
	@touch $@

bench: setup ## run the matrix for HW (default cpu), print the table, write results/HW/
	$(PY) -m bench run $(BENCH_ARGS)

list: setup ## list every cell and the not-applicable reasons, run nothing
	$(PY) -m bench list --hw $(HW) $(if $(FILTER),--filter '$(FILTER)')

matrix: setup ## regenerate results/HW/MATRIX.md from the latest complete run
	$(PY) -m bench matrix --hw $(HW)

test: setup ## unit + integration tests (really trains a subset of cells)
	$(PY) -m pytest tests

test-unit: setup ## fast tests only
	$(PY) -m pytest tests/unit

lint: setup ## ruff
	$(PY) -m ruff check bench tests
	$(PY) -m ruff format --check bench tests

perf: setup ## per-cell fixed cost and full-matrix wall time benchmark
	$(PY) -m bench.perf

clean: ## remove build outputs (keeps results/)
	rm -rf build .pytest_cache .ruff_cache
