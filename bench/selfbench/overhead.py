"""Harness overhead: the same cell through the suite (`python -m bench run`) and as a plain TRL script
(bench/selfbench/plain_dpo.py), alternating, and the ratio of their steady-state speed.

    python -m bench.selfbench.overhead [--cell one_adapter-none-single] [--rounds 6] [--hw cpu] [--start auto]

The plain side is the suite's rank without the suite's measurement, and nothing else: each round it trains the cell
from the spec.json the round's suite run wrote (`plain_dpo --spec`: the worker's thread setting and imports, in the
worker's order, then the same model, tokenizer, data and DPOConfig), started as the suite's cells start (`--start`,
decided by bench/run/forking.py: forked from a fork server that imported the libraries with the same preload and
environment, or a fresh interpreter), with the environment the suite's launcher gives the cell (bench/run/launch.py
plan_launch) and its output to a file, as the cell's log. `--plain-start fresh` starts the plain side as a user's
script starts whatever the suite does: against forked cells it measures the fork's own effect as well.

Before issue 42 the plain side differed from the suite's rank in three ways besides the measurement:
it built its own spec (the whole matrix expanded, the assets prepared) before training, so its heap held other
objects in another layout; it started with this process's environment plus three thread variables, not the cell's;
and its output went to a pipe this process read. Over 3 rounds on an Intel box the suite ran 2-10 % faster than it.
After that, forked suite cells still ran ~2 % faster than the plain script in a fresh interpreter (6 rounds, twice),
while fresh suite cells did not: the way the process starts was the last difference.

Each round runs both, the order alternating so drift on a shared machine hits both sides alike. Reports every round,
and for steady tokens/s, median step speed and CPU time per step the median suite/plain ratio, its min-max spread
and the overhead (1 - ratio); the goal is <= 1 %. On a shared 2-core machine one load spike moves a 1.5-second steady
window by tens of percent: read the spread, CPU time per step moves least with neighbours.
"""

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.executors.local import LocalExecutor, cell_env, venv_python
from bench.isolation.fork_server import ForkServer
from bench.matrix.profiles import load_profile
from bench.paths import PROJECT_ROOT
from bench.results.layout import RunFolder
from bench.results.store import load_results
from bench.run.forking import CHOICES, fork_server
from bench.run.launch import SPEC_FILE, plan_launch
from bench.worker.spec import WorkerSpec

GOAL = 0.01

Speed = tuple[float, float, float]
"""(tokens/s, median step time s, median CPU s per step)"""


def suite_speed(cell: str, hw: str, results: Path, start: str) -> tuple[Speed, Path]:
    """The cell's speed through the suite, and the spec.json its run wrote."""
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", hw, "--filter", cell]
    done = subprocess.run(
        [*argv, "--executor", "local", "--start", start],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    runs = sorted((results / hw).iterdir(), key=lambda p: p.stat().st_mtime) if (results / hw).is_dir() else []
    if done.returncode != 0 or not runs:
        raise RuntimeError(f"suite run failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    record = load_results(runs[-1]).latest_by_cell()[cell]
    if record.metrics is None:
        raise RuntimeError(f"suite cell {cell}: {record.status} {record.message}")
    m = record.metrics
    spec = RunFolder(runs[-1]).configs(cell) / SPEC_FILE
    return (m.tokens_per_s, m.step_time_median_s, m.cpu_s_per_step_median or 0.0), spec


def plain_environment(spec_path: Path, python: str) -> dict[str, str]:
    """The environment the suite's launcher gives the cell of `spec_path` (its port aside)."""
    spec = WorkerSpec.read(str(spec_path))
    return cell_env(plan_launch(spec, spec_path.parent, 0, python).env)


@contextlib.contextmanager
def plain_starter(start: str, hw: str, log: Path) -> Iterator[tuple[ForkServer | None, str]]:
    """The fork server the plain side forks from where the suite's cells fork under `start` (started as a run
    starts its own), else None; and the line that says how the plain side starts."""
    executor = LocalExecutor(PROJECT_ROOT)
    with fork_server(start, executor, load_profile(hw), {}, log) as serve:
        line = serve()
        yield executor.fork_server, line


def plain_speed(spec_path: Path, log: Path, server: ForkServer | None) -> Speed:
    python = venv_python(sys.executable)
    argv = [python, "-m", "bench.selfbench.plain_dpo", "--spec", str(spec_path)]
    env = plain_environment(spec_path, python)
    if server is not None:
        argv, env = server.route(argv, python), env | server.env
    with log.open("w") as out:
        done = subprocess.run(argv, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    lines = log.read_text().splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"plain run failed: {''.join(lines[-30:])}")
    result = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
    if server is not None and result.get("fresh_reason"):
        raise RuntimeError(f"the plain side did not fork: {result['fresh_reason']}")
    return float(result["tokens_per_s"]), float(result["step_time_median_s"]), float(result["cpu_s_per_step_median"])


def summarise(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Median, min and max of suite/plain speed ratios; overhead = 1 - median ratio. Pure."""
    ratios = [suite / plain for suite, plain in pairs]
    median = statistics.median(ratios)
    return {"ratio_median": median, "ratio_min": min(ratios), "ratio_max": max(ratios), "overhead": 1 - median}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.selfbench.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="one_adapter-none-single")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--start", choices=CHOICES, default="auto", help="the suite's run --start")
    parser.add_argument(
        "--plain-start", choices=["same", "fresh"], default="same", help="same: as the suite's cells start (default)"
    )
    args = parser.parse_args(argv)
    kinds = {"tokens/s": [], "median step speed": [], "CPU time per step": []}
    plain_start = args.start if args.plain_start == "same" else "fresh"
    with (
        tempfile.TemporaryDirectory(prefix="overhead-") as tmp,
        plain_starter(plain_start, args.hw, Path(tmp) / "fork-server.log") as (server, how),
    ):
        print(f"plain side: {how}", flush=True)
        for index in range(args.rounds):
            log = Path(tmp) / f"plain-{index}.log"
            if index % 2 == 0:
                suite, spec = suite_speed(args.cell, args.hw, Path(tmp), args.start)
                plain = plain_speed(spec, log, server)
            else:
                # the spec of the previous round's suite run: the same cell, assets and settings
                plain = plain_speed(spec, log, server)
                suite, spec = suite_speed(args.cell, args.hw, Path(tmp), args.start)
            kinds["tokens/s"].append((suite[0], plain[0]))
            kinds["median step speed"].append((1 / suite[1], 1 / plain[1]))
            if suite[2] and plain[2]:
                kinds["CPU time per step"].append((1 / suite[2], 1 / plain[2]))
            print(
                f"round {index + 1}: suite {suite[0]:,.0f} tok/s (median step {suite[1] * 1000:.1f} ms, CPU "
                f"{suite[2] * 1000:.1f} ms), plain {plain[0]:,.0f} tok/s ({plain[1] * 1000:.1f} ms, CPU "
                f"{plain[2] * 1000:.1f} ms); tokens/s ratio {suite[0] / plain[0]:.3f}",
                flush=True,
            )
    for label, pairs in kinds.items():
        if not pairs:
            continue
        result = summarise(pairs)
        verdict = "within" if result["overhead"] <= GOAL else "above"
        print(
            f"{args.cell} on {args.hw} (--start {args.start}, plain {args.plain_start}), {args.rounds} round(s), "
            f"suite/plain {label} ratio: "
            f"median {result['ratio_median']:.3f} (min {result['ratio_min']:.3f}, max {result['ratio_max']:.3f}); "
            f"overhead {result['overhead']:+.1%} ({verdict} the {GOAL:.0%} goal)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
