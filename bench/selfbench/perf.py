"""Benchmark of the suite itself: where a cell's fixed cost goes, and the full-matrix wall time.

    python -m bench.selfbench.perf [--hw cpu] [--run RUN_ID] [--repeats 3]

Import costs are measured now, in fresh interpreters; everything else is read from a finished run's records.
"""

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.paths import RESULTS_DIR
from bench.results.runs import run_dirs
from bench.results.schema import ResultRecord, Status
from bench.results.store import load_results

IMPORTS = {
    "interpreter start": "pass",
    "import torch": "import torch",
    "import transformers": "import transformers",
    "from trl import DPOTrainer": "from trl import DPOTrainer",
    "worker imports (trl, peft, datasets, bitsandbytes, deepspeed)": (
        "from trl import DPOTrainer; import peft, datasets, bitsandbytes, deepspeed"
    ),
    "deepspeed launcher process (import deepspeed)": "import deepspeed",
}


def time_import(code: str, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def latest_run(hardware_dir: Path) -> Path:
    runs = run_dirs(hardware_dir)
    if not runs:
        raise SystemExit(f"no run under {hardware_dir}; run `make bench` first")
    return runs[0]


def fixed_cost(record: ResultRecord) -> float:
    """Wall time not spent in training steps: process start, imports, load, launcher, shutdown."""
    m = record.metrics
    return record.wall_s - m.steps * m.step_time_median_s


def report(run_dir: Path, repeats: int) -> str:
    records = list(load_results(run_dir).latest_by_cell().values())
    ran = [r for r in records if r.status != Status.NOT_APPLICABLE and r.wall_s is not None]
    measured = [r for r in ran if r.metrics]
    starts = [dt.datetime.fromisoformat(r.started_at) for r in ran if r.started_at]
    ends = [dt.datetime.fromisoformat(r.finished_at) for r in ran if r.finished_at]
    lines = [f"# dpo-bench perf — run {run_dir.name}", ""]
    if starts and ends:
        span = (max(ends) - min(starts)).total_seconds()
        lines.append(f"Matrix wall time (first cell start to last cell end): {span / 60:.1f} min for {len(ran)} cells")
    lines.append(f"Sum of cell wall times: {sum(r.wall_s for r in ran) / 60:.1f} min")
    lines += [
        "",
        f"## Fixed cost of one process (fresh interpreter, median of {repeats})",
        "",
        "| step | seconds |",
        "|---|---|",
    ]
    lines += [f"| {name} | {time_import(code, repeats):.2f} |" for name, code in IMPORTS.items()]
    lines += [
        "",
        "## Per launcher (medians over cells)",
        "",
        "| launcher x ranks | cells | wall s | fixed s (wall - steps x step) | load s | train s |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[str, list[ResultRecord]] = {}
    for r in measured:
        groups.setdefault(f"{r.launcher} x{r.world_size}", []).append(r)
    for name, group in sorted(groups.items()):
        wall = statistics.median(r.wall_s for r in group)
        fixed = statistics.median(fixed_cost(r) for r in group)
        load = statistics.median(r.metrics.load_s or 0 for r in group)
        train = statistics.median(r.metrics.steps * r.metrics.step_time_median_s for r in group)
        lines.append(f"| {name} | {len(group)} | {wall:.1f} | {fixed:.1f} | {load:.1f} | {train:.1f} |")
    slowest = max(ran, key=lambda r: r.wall_s)
    lines += ["", f"Slowest cell: {slowest.cell_id} {slowest.wall_s:.1f} s ({slowest.status})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.selfbench.perf", description=__doc__)
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--run", default=None, help="run id (default: the latest)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    hardware_dir = RESULTS_DIR / args.hw
    run_dir = hardware_dir / args.run if args.run else latest_run(hardware_dir)
    print(report(run_dir, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
