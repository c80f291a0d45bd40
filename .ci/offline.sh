#!/usr/bin/env bash
# The offline install of a GPU box, proved on CPU (docs/hardware.md, "A GPU box without internet"): a wheelhouse
# made from the CPU lock by `make wheelhouse`; a base environment that already holds torch, transformers, accelerate
# and peft (at a box's own versions: transformers 5.17.0 and peft 0.21.0 as on the lent GPU machines, not the lock's);
# `make setup WHEELHOUSE=` over it with every index unreachable; one cell trained. Run after `make setup` (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

echo "--- make wheelhouse (cpu lock, Python $python)"
make --no-print-directory wheelhouse WHEELHOUSE="$work/wheels" WHEEL_FLAVOR=cpu WHEEL_PYTHON="$python"

echo "--- a base environment with the box's own torch, transformers, accelerate and peft"
python3 -m venv "$work/base"
base_packages=$(sed -n '/^\[base\]/,/^\[/p' docker/offline/packages.txt | grep -v '^\[' | sed 's/#.*//' | grep -v '^ *$' \
  | grep -vx 'torch\|transformers\|accelerate\|peft\|huggingface-hub')
# shellcheck disable=SC2086  # one argument per package name
"$work/base/bin/pip" install --quiet torch==2.13.0 transformers==5.17.0 accelerate==1.15.0 peft==0.21.0 \
  huggingface-hub==1.33.0 $base_packages

echo "--- make setup WHEELHOUSE= with no index"
env PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_EXTRA_INDEX_URL= \
  make --no-print-directory setup WHEELHOUSE="$work/wheels" PYTHON="$work/base/bin/python" VENV="$work/venv"

echo "--- one cell"
env PIP_INDEX_URL=http://127.0.0.1:9/simple HF_HUB_OFFLINE=1 \
  "$work/venv/bin/python" -m bench --results "$work/results" run --hw cpu --filter one_adapter-none-single \
  --executor local --run-id offline
"$work/venv/bin/python" - "$work/results/cpu/offline" <<'PY'
import sys
from pathlib import Path

from bench.results.env import read_env
from bench.results.store import load_results

run = Path(sys.argv[1])
(record,) = load_results(run).records
env = read_env(run)
assert record.status == "ok", record.message
assert env.installed_from.startswith("wheelhouse ") and env.packages["transformers"] == "5.17.0", env
assert any(line.startswith("transformers: 5.17.0 on this box") for line in env.lock_differences), env
print(f"offline install: {record.cell_id} {record.status}, {env.installed_from}; {'; '.join(env.lock_differences)}")
PY
