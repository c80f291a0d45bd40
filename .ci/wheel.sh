#!/usr/bin/env bash
# The package as a pip user gets it (README, "Use it from pip"). The wheel is built from HEAD (a worktree of the
# commit: the stamped sha is the commit's, nothing uncommitted is in it), installed in a fresh venv outside the
# checkout with only its base dependencies from the index (no torch), and run from an empty folder: --version, advise
# (timed), predict, list, and matrix, compare and publish over a copy of two committed runs (publish with a
# one-point decision grid through --scenarios). Then `run`: the same wheel in a second venv that sees the training
# stack of the checkout's .venv (make setup) through a .pth file, one cell written to ./results of the current folder.
# Installing the train extra from the index would fetch PyPI's CUDA torch (GBs) and build DeepSpeed: not here.
# Run after `make setup` (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$(date +%s)
work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
export XDG_CACHE_HOME=$work/cache  # the installed package prepares assets in the user's cache: this one goes too
seconds() { python3 -c "import time, sys; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$1"; }
stack=torch,transformers,trl,peft,accelerate,deepspeed,bitsandbytes,datasets

echo "--- build the wheel from HEAD"
sha=$(git rev-parse HEAD)
git worktree add --quiet --detach "$work/src" HEAD
.venv/bin/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$work/dist" "$work/src"
wheel=$(ls "$work/dist"/dpo_bench-*.whl)
echo "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"

echo "--- a fresh venv outside the checkout: the wheel and its base dependencies"
python3 -m venv "$work/base"
t0=$(python3 -c 'import time; print(time.time())')
"$work/base/bin/pip" install --quiet "$wheel"
echo "installed in $(seconds "$t0") s; the venv takes $(du -sm "$work/base" | cut -f1) MiB"
"$work/base/bin/python" - "$stack" <<'PY'
import importlib.util
import sys

present = [name for name in sys.argv[1].split(",") if importlib.util.find_spec(name) is not None]
assert not present, f"the base install brought the training stack: {present}"
PY

echo "--- the commands from an empty folder"
mkdir "$work/here"
cd "$work/here"
bin=$work/base/bin
$bin/dpo-bench --version | tee version.txt
grep -q "(git ${sha:0:12})" version.txt
t0=$(python3 -c 'import time; print(time.time())')
$bin/dpo-bench advise --model qwen2.5-7b --gpu A10:2 >advise.md
echo "advise --model qwen2.5-7b --gpu A10:2: $(seconds "$t0") s (wall, from the installed wheel)"
grep -q '^dpo-bench run --gpu A10:2 --model qwen2.5-7b --filter ' advise.md
$bin/dpo-bench predict --hw 2xA10 >/dev/null
$bin/dpo-bench list | tail -1
mkdir -p results/cpu
cp -r "$root/results/cpu/20261126-021505" "$root/results/cpu/20261127-014330" results/cpu/
$bin/dpo-bench matrix --hw cpu
$bin/dpo-bench compare results/cpu/20261126-021505 results/cpu/20261127-014330 >compare.md
scenarios=$("$bin/python" -c 'from bench.paths import SCENARIOS_DIR; print(SCENARIOS_DIR)')
cp -r "$scenarios" "$work/scenarios"
printf '%s\n' 'workloads: [tiny]' 'models: [qwen2.5-7b]' 'gpus: [A10]' 'counts: [2]' 'max_lengths: [1024]' \
  'batch_sizes: [1]' >"$work/scenarios/decide.yaml"
$bin/dpo-bench --scenarios "$work/scenarios" publish
test -s results/README.md && test -s results/site/index.html && test -s results/site/decide.html

echo "--- run from the installed wheel, with the checkout's training stack"
base_python=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
"$base_python" -m venv "$work/train"
"$work/train/bin/pip" install --quiet --no-deps "$wheel"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$root/.venv/bin/python" >"$(purelib "$work/train/bin/python")/zz-checkout-training-stack.pth"
mkdir "$work/there"
cd "$work/there"
"$work/train/bin/dpo-bench" run --hw cpu --filter one_adapter-none-single --executor local --run-id wheel
"$work/train/bin/python" - "$work/there/results/cpu/wheel" "$sha" <<'PY'
import sys
from pathlib import Path

import bench
from bench.results.env import read_env
from bench.results.store import load_results

run, sha = Path(sys.argv[1]), sys.argv[2]
assert "site-packages" in bench.__file__, bench.__file__
(record,) = load_results(run).records
env = read_env(run)
assert record.status == "ok", (record.status, record.message)
assert env is not None and env.git_sha == sha and env.installed_from.startswith("pip"), env
print(f"one cell ok under {run} ({record.metrics.tokens_per_s:.0f} tok/s), env.json git_sha {sha[:12]}")
PY
echo "--- wheel checks done in $(( $(date +%s) - started )) s"
