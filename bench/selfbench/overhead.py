"""Harness overhead: the same cell through the suite (`python -m bench run`) and through a plain TRL script
(bench/selfbench/plain_dpo.py), alternating, and the ratio of their steady-state tokens/s.

    python -m bench.selfbench.overhead [--cell one_adapter-none-single] [--rounds 3] [--hw cpu]

Each round runs both, in alternating order so drift on a shared machine hits both sides alike. Reports every
round, the median suite/plain ratio, its min-max spread and the overhead (1 - ratio); the goal is <= 3%.
Also the ratio of median step times (plain/suite): on a shared machine a load spike during one run moves
tokens/s a lot and the median step time little.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.paths import PROJECT_ROOT
from bench.results.store import load_results

GOAL = 0.03


Speed = tuple[float, float]
"""(tokens/s, median step time s)"""


def suite_speed(cell: str, hw: str, results: Path) -> Speed:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", hw, "--filter", cell]
    done = subprocess.run(
        [*argv, "--executor", "local"],
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
    return record.metrics.tokens_per_s, record.metrics.step_time_median_s


def plain_speed(cell: str, hw: str) -> Speed:
    done = subprocess.run(
        [sys.executable, "-m", "bench.selfbench.plain_dpo", "--cell", cell, "--hw", hw],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=plain_env(),
    )
    if done.returncode != 0:
        raise RuntimeError(f"plain run failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["tokens_per_s"]), float(result["step_time_median_s"])


def plain_env() -> dict[str, str]:
    """The thread/tokenizer settings the suite's launcher gives a cell (bench/run/launch.py _base_env)."""
    return os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def summarise(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Median, min and max of suite/plain speed ratios; overhead = 1 - median ratio. Pure."""
    ratios = [suite / plain for suite, plain in pairs]
    median = statistics.median(ratios)
    return {"ratio_median": median, "ratio_min": min(ratios), "ratio_max": max(ratios), "overhead": 1 - median}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.selfbench.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="one_adapter-none-single")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hw", default="cpu")
    args = parser.parse_args(argv)
    throughput: list[tuple[float, float]] = []
    step_speed: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        for round_index in range(args.rounds):
            if round_index % 2 == 0:
                suite = suite_speed(args.cell, args.hw, Path(tmp))
                plain = plain_speed(args.cell, args.hw)
            else:
                plain = plain_speed(args.cell, args.hw)
                suite = suite_speed(args.cell, args.hw, Path(tmp))
            throughput.append((suite[0], plain[0]))
            step_speed.append((1 / suite[1], 1 / plain[1]))
            print(
                f"round {round_index + 1}: suite {suite[0]:,.0f} tok/s (median step {suite[1] * 1000:.1f} ms), "
                f"plain {plain[0]:,.0f} tok/s ({plain[1] * 1000:.1f} ms); tokens/s ratio {suite[0] / plain[0]:.3f}",
                flush=True,
            )
    for label, pairs in (("tokens/s", throughput), ("median step speed", step_speed)):
        result = summarise(pairs)
        verdict = "within" if result["overhead"] <= GOAL else "above"
        print(
            f"{args.cell} on {args.hw}, {args.rounds} round(s), suite/plain {label} ratio: median "
            f"{result['ratio_median']:.3f} (min {result['ratio_min']:.3f}, max {result['ratio_max']:.3f}); "
            f"overhead {result['overhead']:+.1%} ({verdict} the {GOAL:.0%} goal)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
