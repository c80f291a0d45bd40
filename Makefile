# dpo-bench. `make help` lists the targets.
HW       ?= cpu
FILTER   ?=
RUN      ?=
FLAVOR   ?= cpu
EXECUTOR ?= auto
# make images: OFFLINE_BASE=1 builds the base with debootstrap (no registry); EXTRA_CA_CERTS=auto|<dir or .crt>;
# WHEELS=<dir> whose torch-*.whl is copied into docker/wheelhouse/ (docs/docker.md)
OFFLINE_BASE   ?=
EXTRA_CA_CERTS ?=
WHEELS         ?= /opt/wheels
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# What .venv holds: the cuda lock where the NVIDIA driver lists a GPU (`nvidia-smi -L`), else the cpu lock (CI).
# FLAVOR names an image only (make images).
GPUS     := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
VENV_FLAVOR ?= $(if $(filter-out 0,$(GPUS)),cuda,cpu)
LOCK     := docker/$(VENV_FLAVOR)/requirements.lock
STAMP    := $(VENV)/.installed-$(VENV_FLAVOR)
OTHER_STAMPS = $(filter-out $(STAMP) $(OFFLINE_STAMP),$(wildcard $(VENV)/.installed-*))
# Offline: `make setup WHEELHOUSE=<dir>` installs over this machine's own Python from a wheelhouse that
# `make wheelhouse` collected on a connected one (docker/offline/, docs/hardware.md "A GPU box without internet").
WHEELHOUSE ?=
OFFLINE_STAMP := $(VENV)/.installed-offline
WHEEL_FLAVOR ?= cuda
WHEEL_PYTHON ?= 3.12
WHEEL_CUDA   ?= 130

BENCH_ARGS := --hw $(HW) $(if $(METHOD),--method '$(METHOD)') $(if $(FILTER),--filter '$(FILTER)') $(if $(RUN),--run-id $(RUN)) $(if $(FORCE),--force) $(if $(REPEATS),--repeats $(REPEATS)) $(if $(RUN_PREDICTED_OOM),--run-predicted-oom) $(if $(EXCLUSIVE),--exclusive) $(if $(START),--start $(START))

.PHONY: wheelhouse carry-assets window-carry gpu-window mutants predicted help setup browser slurm bench pipeline images check-cuda-image list matrix test test-long test-unit test-docker lint perf perf-matrix compare compare-ab publish predict validate-estimate clean

help: ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'
	@echo "  variables: HW=$(HW) METHOD=dpo|sft|reward|kto|orpo|simpo|all FILTER='glob,glob' RUN=<run-id> FORCE=1 EXECUTOR=auto|docker|local|slurm SLURM_CONFIG=<file>"
	@echo "  .venv: VENV_FLAVOR=$(VENV_FLAVOR) (cuda where nvidia-smi lists a GPU, else cpu)"

setup: ## create .venv from the lock file: the cuda one where nvidia-smi lists a GPU, else the cpu one (idempotent); WHEELHOUSE=<dir>: offline, over this machine's own torch
ifneq ($(if $(filter wheelhouse,$(MAKECMDGOALS)),,$(WHEELHOUSE)),)
	$(PYTHON) docker/offline/install.py --wheelhouse '$(WHEELHOUSE)' --venv $(VENV) --flavor $(VENV_FLAVOR)
else ifneq ($(wildcard $(OFFLINE_STAMP)),)
	@echo "$(VENV) was installed offline over $$(sed -n 's/.*"base_python": "\(.*\)",/\1/p' $(OFFLINE_STAMP)) (make setup WHEELHOUSE=<dir> again to update it)"
else
	@$(MAKE) --no-print-directory $(STAMP)
endif

wheelhouse: setup ## on a connected machine: the wheels an offline GPU box needs, WHEELHOUSE=<dir> [WHEEL_FLAVOR=cuda] [WHEEL_PYTHON=3.12] [WHEEL_CUDA=130]
	@test -n '$(WHEELHOUSE)' || { echo "error: make wheelhouse needs WHEELHOUSE=<dir>" >&2; exit 2; }
	$(PY) docker/offline/wheelhouse.py --out '$(WHEELHOUSE)' --flavor $(WHEEL_FLAVOR) --python $(WHEEL_PYTHON) --cuda $(WHEEL_CUDA)

carry-assets: setup ## on a connected machine: the window's datasets and tokenizers (no weights), packed for a GPU box [CARRY=<dir>: default build/carried-assets] [WORKLOADS='w1 w2']
	$(PY) -m bench carry-assets $(if $(CARRY),--out '$(CARRY)') $(WORKLOADS)

window-carry: ## on a connected machine: what a lent GPU's window needs carried (the device tool's `carry`): the wheelhouse (Python 3.12, CUDA 13.0) and the window's text assets, with their sizes [WHEELHOUSE=build/wheelhouse] [CARRY=build/carried-assets]
	@$(MAKE) --no-print-directory wheelhouse WHEELHOUSE='$(or $(WHEELHOUSE),build/wheelhouse)'
	@$(MAKE) --no-print-directory carry-assets CARRY='$(or $(CARRY),build/carried-assets)'
	@du -sh '$(or $(WHEELHOUSE),build/wheelhouse)' '$(or $(CARRY),build/carried-assets)'
	@git ls-files -z | xargs -0 stat -c %s | awk '{s += $$1} END {printf "%.1f MiB\tthe tracked tree (the device tool carries 64 MiB in all)\n", s / 1048576}'

gpu-window: setup ## on a lent GPU: its DPO matrix, the other methods, emulated 24 GB cards, the 7B cells, a speed pass, side by side in its slots, everything under OUT as it ends [OUT=<dir>] [BUNDLE=<dir>: also packed into 8 flat files there] [MINUTES=9] [WHEELHOUSE=<dir>: set up offline first] [CARRY=<dir>]
	$(if $(CARRY),BENCH_CARRIED_ASSETS='$(CARRY)') $(PY) -m bench window $(if $(OUT),--out '$(OUT)') $(if $(BUNDLE),--bundle '$(BUNDLE)') $(if $(MINUTES),--minutes $(MINUTES))

$(STAMP): $(LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# the other flavor's torch==2.13.0+cpu satisfies the cuda lock's torch==2.13.0: pip would keep it
	$(if $(OTHER_STAMPS),$(PY) -m pip uninstall --quiet -y torch && rm -f $(OTHER_STAMPS))
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@# DeepSpeed JIT-builds its host ops on first use (1-2 min each): build them once here, not inside a timed cell.
	TORCH_EXTENSIONS_DIR=$(abspath $(VENV))/torch_extensions $(PY) docker/cpu/prebuild_deepspeed_ops.py
	@touch $@

bench: setup ## run the matrix for HW (default cpu), print the table, write results/HW/
	$(PY) -m bench run $(BENCH_ARGS) --executor $(EXECUTOR) $(if $(SLURM_CONFIG),--slurm-config '$(SLURM_CONFIG)')

pipeline: setup ## SFT -> merge -> DPO (PIPELINE=rlhf: reward model -> merge -> GRPO) -> merge -> generate, a process per stage: make pipeline [HW=cpu] [MODEL=<workload>] [PIPELINE=dpo|rlhf|rlhf-rloo]
	$(PY) -m bench pipeline --hw $(HW) $(if $(MODEL),--model '$(MODEL)') $(if $(PIPELINE),--pipeline '$(PIPELINE)')

images: ## build the pinned docker image of FLAVOR (OFFLINE_BASE=1, EXTRA_CA_CERTS=auto|path; docs/docker.md)
	@# Any set-up venv runs the build; FLAVOR names the image, never what goes into .venv.
	@$(if $(wildcard $(VENV)/.installed-*),:,$(MAKE) --no-print-directory setup)
	$(PY) -m bench images --flavor $(FLAVOR) $(if $(OFFLINE_BASE),--offline-base) \
		$(if $(EXTRA_CA_CERTS),--extra-ca-certs '$(EXTRA_CA_CERTS)') --wheels '$(WHEELS)'

check-cuda-image: ## build the cuda image and check it without a GPU; run before changing docker/cuda/ (docs/docker.md)
	OFFLINE_BASE='$(OFFLINE_BASE)' EXTRA_CA_CERTS='$(EXTRA_CA_CERTS)' bash docker/cuda/check.sh

list: setup ## list every cell and the not-applicable reasons, run nothing
	$(PY) -m bench list --hw $(HW) $(if $(METHOD),--method '$(METHOD)') $(if $(FILTER),--filter '$(FILTER)')

matrix: setup ## regenerate results/HW/MATRIX.md from the latest complete run
	$(PY) -m bench matrix --hw $(HW)

test: setup browser slurm ## unit + integration tests (really trains a subset of cells); make test-long, make test-docker: the rest
	$(PY) -m pytest tests -m "not docker and not pipeline_small and not long" --ignore=tests/perf --durations=25

test-long: setup slurm ## end-to-end rehearsals of whole workflows (window, pipeline, fresh clone, GPU slots): ~20 min
	$(PY) -m pytest tests -m "long and not docker and not pipeline_small" --durations=10

browser: ## the published site's browser test needs chromium: installed from Debian when missing (root), else says so
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (Debian package) for the site's browser test"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null; \
	  else echo "error: the site's browser test needs chromium: apt-get install chromium (as root)" >&2; exit 1; fi; }

slurm: ## the Slurm tests need a local cluster (slurmctld + 2 slurmd): installed from Debian and started when missing (root)
	@bash bench/executors/slurm/setup-single-node.sh

test-docker: setup slurm ## cells in containers vs local, docker inside Slurm jobs (needs dockerd and `make images FLAVOR=cpu`)
	$(PY) -m pytest tests -m "docker and not cuda_image" -v -s

test-unit: setup ## fast tests only
	$(PY) -m pytest tests/unit

lint: setup ## ruff
	$(PY) -m ruff check bench tests
	$(PY) -m ruff format --check bench tests

perf: setup ## pytest-benchmark of the suite itself: harness overhead, per-cell fixed cost, estimator speed
	$(PY) -m pytest tests/perf --benchmark-enable --benchmark-autosave

mutants: setup ## mutation testing of the judging modules with their unit tests; prints unexplained survivors (slow: not in make test) [KEEP=1] [ONLY=judge|estimate|run]
	$(PY) -m bench selfbench mutants $(if $(KEEP),--keep) $(if $(ONLY),--only $(ONLY))

perf-matrix: setup ## per-cell fixed cost and where it goes, full-matrix wall time, from the latest run [RUN=<run>] [BASE=<run>: with ratios]
	$(PY) -m bench selfbench perf --hw $(HW) $(if $(RUN),--run '$(RUN)') $(if $(BASE),--base '$(BASE)')

compare: setup ## diff two runs for a PR: make compare BASE=results/cpu/<run> HEAD=results/cpu/<run> [FAIL_ON=status,throughput,memory] [THRESHOLD=5] [OUT=compare.md]
	$(PY) -m bench compare '$(BASE)' '$(HEAD)' $(if $(FAIL_ON),--fail-on $(FAIL_ON)) $(if $(THRESHOLD),--threshold $(THRESHOLD)) $(if $(OUT),--output $(OUT))

compare-ab: setup ## interleaved A/B of two git refs, or of library versions, on this machine: make compare-ab BASE=<ref> [HEAD=<ref>] | BASE_WITH='trl==1.15.0' HEAD_WITH='trl=/path/to/trl' [FILTER=globs] [PAIRS=4]
	$(PY) -m bench compare-ab $(if $(BASE),--base '$(BASE)') $(if $(HEAD),--head '$(HEAD)') $(foreach p,$(BASE_WITH),--base-with '$(p)') $(foreach p,$(HEAD_WITH),--head-with '$(p)') --hw $(HW) $(if $(METHOD),--method '$(METHOD)') $(if $(FILTER),--filter '$(FILTER)') $(if $(PAIRS),--pairs $(PAIRS)) $(if $(FAIL_ON),--fail-on $(FAIL_ON)) $(if $(THRESHOLD),--threshold $(THRESHOLD)) $(if $(OUT),--output $(OUT))

publish: setup ## regenerate results/README.md and the static site results/site/
	$(PY) -m bench publish

predict: setup ## PREDICTED per-device memory and fits/OOM of every cell of every method (METHOD=dpo,sft,...), no GPU needed: make predict HW=2xA10 [WORKLOAD=w] [FILTER=globs] [FORMAT=md|csv|json]
	$(PY) -m bench predict --hw '$(HW)' --method '$(or $(METHOD),all)' $(if $(WORKLOAD),--workload '$(WORKLOAD)') $(if $(FILTER),--filter '$(FILTER)') $(if $(FORMAT),--format $(FORMAT))

predicted: setup ## regenerate results/<HW>/PREDICTED.md + predicted.csv of every GPU profile and docs/estimator-validation.md (tests hold them to the code)
	$(PY) -m bench predict --hw all --write
	$(PY) -m bench validate-estimate --write

validate-estimate: setup ## memory estimator vs every measured cell under results/ (error %, fits/OOM right)
	$(PY) -m bench validate-estimate

clean: ## remove build outputs (keeps results/)
	rm -rf build .pytest_cache .ruff_cache
