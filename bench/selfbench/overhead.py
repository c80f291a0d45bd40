"""Harness overhead: the same cell through the suite (`python -m bench run`) and as a plain TRL script
(bench/selfbench/plain_dpo.py), paired round by round, and the ratio of their steady-state speed.

    python -m bench selfbench overhead [--cell one_adapter-none-single] [--rounds 8] [--steps 300]
                                       [--pairing concurrent|sequential] [--start auto] [--plain-start same|fresh]

The plain side is the suite's rank without its measurement: it trains from the suite's spec.json, started as the
suite's cells start and with their environment (how it was made equivalent: docs/evidence/selfbench.md). Rounds run
both sides concurrently on disjoint halves of the cores, or one after the other. Reports the median suite/plain
ratio and the overhead's 95 % upper bound; the goal (<= 1 %) is met where the bound is within it."""

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen

from bench.errors import BenchError
from bench.executors.local import LocalExecutor, cell_env, venv_python
from bench.isolation.fork_server import ForkServer
from bench.matrix.profiles import load_profile
from bench.paths import PROJECT_ROOT
from bench.results.layout import RunFolder
from bench.results.store import load_results
from bench.run.fork_server_mode import CHOICES, fork_server
from bench.run.launch import SPEC_FILE, plan_launch
from bench.worker.spec import WorkerSpec

GOAL = 0.01
STEPS = 300
"""Both sides' training steps. At the tiny workload's 30 (a 1.2-second steady window) the same cell's suite/plain
ratio spread 0.82-1.12 over 8 rounds on a quiet 2-core VM, its step time drifting 45 -> 64 ms between rounds: a
window that short cannot tell 1 %."""

T95 = (
    12.71,
    4.30,
    3.18,
    2.78,
    2.57,
    2.45,
    2.36,
    2.31,
    2.26,
    2.23,
    2.20,
    2.18,
    2.16,
    2.14,
    2.13,
    2.12,
    2.11,
    2.10,
    2.09,
)
"""Student's t, two-sided 95 %, for 1..19 degrees of freedom (2.09 taken beyond)."""

Speed = tuple[float, float, float]
"""(tokens/s, median step time s, median CPU s per step)"""
Round = tuple[Speed, Path, Speed]
"""(the suite's speed, the spec.json its run wrote, the plain side's speed)"""


def pinned(cores: set[int] | None) -> Callable[[], None] | None:
    """A preexec_fn binding the child to `cores` (None: unbound). A fork server's child takes its client's cores
    (bench/isolation/fork_server_child.py), a launcher's children inherit them: every process of that side runs
    there."""
    return None if cores is None else lambda: os.sched_setaffinity(0, cores)


def start_suite(cell: str, hw: str, results: Path, start: str, steps: int | None, cores: set[int] | None) -> Popen:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", hw, "--filter", cell]
    argv += ["--steps", str(steps)] if steps else []
    return Popen(
        [*argv, "--executor", "local", "--start", start],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=pinned(cores),
    )


def finish_suite(done: Popen, cell: str, hw: str, results: Path) -> tuple[Speed, Path]:
    """The cell's speed through the suite, and the spec.json its run wrote (the plain side reads its steps)."""
    output, _ = done.communicate()
    runs = sorted((results / hw).iterdir(), key=lambda p: p.stat().st_mtime) if (results / hw).is_dir() else []
    if done.returncode != 0 or not runs:
        raise RuntimeError(f"suite run failed: {output[-3000:]}")
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
def plain_starter(start: str, hw: str, log: Path) -> Iterator[ForkServer | None]:
    """The fork server the plain side forks from where the suite's cells fork under `start`, started as a run
    starts its own, once per round (see the module's text), else None."""
    executor = LocalExecutor(PROJECT_ROOT)
    with fork_server(start, executor, load_profile(hw), {}, log) as serve:
        serve()
        yield executor.fork_server


def start_plain(spec_path: Path, log: Path, server: ForkServer | None, cores: set[int] | None) -> Popen:
    python = venv_python(sys.executable)
    argv = [python, "-m", "bench.selfbench.plain_dpo", "--spec", str(spec_path)]
    env = plain_environment(spec_path, python)
    if server is not None:
        argv, env = server.route(argv, python), env | server.env
    with log.open("w") as out:
        return Popen(argv, cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pinned(cores))


def finish_plain(done: Popen, log: Path, server: ForkServer | None) -> Speed:
    done.wait()
    lines = log.read_text().splitlines()
    if done.returncode != 0:
        raise RuntimeError(f"plain run failed: {''.join(lines[-30:])}")
    result = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
    if server is not None and result.get("fresh_reason"):
        raise RuntimeError(f"the plain side did not fork: {result['fresh_reason']}")
    return float(result["tokens_per_s"]), float(result["step_time_median_s"]), float(result["cpu_s_per_step_median"])


def summarise(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Median, min and max of suite/plain speed ratios, overhead = 1 - median ratio, and the overhead's upper bound:
    1 - the lower end of a 95 % t-interval of the mean ratio (the median itself where there is one round). Pure."""
    ratios = [suite / plain for suite, plain in pairs]
    median = statistics.median(ratios)
    low = median
    if len(ratios) > 1:
        half_width = T95[min(len(ratios) - 1, len(T95)) - 1] * statistics.stdev(ratios) / math.sqrt(len(ratios))
        low = statistics.fmean(ratios) - half_width
    return {
        "ratio_median": median,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "overhead": 1 - median,
        "overhead_bound": 1 - low,
    }


def core_halves() -> tuple[set[int], set[int]] | None:
    """This process's cores in two equal halves; None with fewer than two."""
    cores = sorted(os.sched_getaffinity(0))
    half = len(cores) // 2
    return (set(cores[:half]), set(cores[half : 2 * half])) if half else None


def launched(results: Path, hw: str, cell: str, suite: Popen) -> None:
    """Wait until the suite's run has written the cell's spec.json (it launches the cell next) or has ended."""
    while suite.poll() is None:
        if any((run / "configs" / cell / SPEC_FILE).exists() for run in (results / hw).glob("*")):
            return
        time.sleep(0.05)


def plain_start(args: argparse.Namespace) -> str:
    """How the plain side starts: as the suite's cells (`--start`), or fresh with `--plain-start fresh`."""
    return args.start if args.plain_start == "same" else "fresh"


def concurrent_round(index: int, args: argparse.Namespace, tmp: Path, spec: Path) -> Round:
    """Both sides at once, each on its half of the cores (swapped every round), the plain side started as the suite
    launches its cell: whatever the machine does during the round, both windows see it."""
    halves = core_halves()
    assert halves is not None
    suite_cores, plain_cores = halves if index % 2 == 0 else halves[::-1]
    results = tmp / f"round-{index}"
    suite = start_suite(args.cell, args.hw, results, args.start, args.steps, suite_cores)
    with plain_starter(plain_start(args), args.hw, tmp / f"fork-server-{index}.log") as server:
        launched(results, args.hw, args.cell, suite)
        log = tmp / f"plain-{index}.log"
        plain = finish_plain(start_plain(spec, log, server, plain_cores), log, server)
    return (*finish_suite(suite, args.cell, args.hw, results), plain)


def sequential_round(index: int, args: argparse.Namespace, tmp: Path, spec: Path) -> Round:
    """One side after the other on every core, the order alternating so that drift hits both sides alike."""
    log = tmp / f"plain-{index}.log"
    results = tmp / f"round-{index}"
    with plain_starter(plain_start(args), args.hw, tmp / f"fork-server-{index}.log") as server:
        if index % 2 == 1:
            plain = finish_plain(start_plain(spec, log, server, None), log, server)
        suite, spec = finish_suite(
            start_suite(args.cell, args.hw, results, args.start, args.steps, None), args.cell, args.hw, results
        )
        if index % 2 == 0:
            plain = finish_plain(start_plain(spec, log, server, None), log, server)
    return suite, spec, plain


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cell", default="one_adapter-none-single")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--hw", default="cpu")
    parser.add_argument(
        "--steps", type=int, default=STEPS, help=f"training steps of both sides (default {STEPS}; 0: the workload's)"
    )
    parser.add_argument("--start", choices=CHOICES, default="auto", help="the suite's run --start")
    parser.add_argument(
        "--plain-start", choices=["same", "fresh"], default="same", help="same: as the suite's cells start (default)"
    )
    parser.add_argument(
        "--pairing",
        choices=["concurrent", "sequential"],
        default="concurrent",
        help="concurrent (default): both sides at once, on disjoint halves of the cores; sequential: in turn",
    )


def run(args: argparse.Namespace) -> int:
    """The rounds, each a line, then the ratios of each kind of speed with their bound."""
    if args.pairing == "concurrent" and core_halves() is None:
        raise BenchError("--pairing concurrent needs two cores or more; use --pairing sequential")
    kinds = {"tokens/s": [], "median step speed": [], "CPU time per step": []}
    play = concurrent_round if args.pairing == "concurrent" else sequential_round
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        print(f"plain side started: {plain_start(args)} (a fork server of its own each round); {args.pairing}")
        warm = Path(tmp) / "warm-up"
        _, spec = finish_suite(
            start_suite(args.cell, args.hw, warm, args.start, args.steps, None), args.cell, args.hw, warm
        )  # the first round's plain side reads its spec.json (not counted)
        for index in range(args.rounds):
            suite, spec, plain = play(index, args, Path(tmp), spec)
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
        if pairs:
            print(summary_line(args, label, summarise(pairs)))
    return 0


def summary_line(args: argparse.Namespace, label: str, result: dict[str, float]) -> str:
    verdict = "within" if result["overhead_bound"] <= GOAL else "not shown within"
    return (
        f"{args.cell} on {args.hw} (--start {args.start}, plain {args.plain_start}, {args.pairing}), {args.rounds} "
        f"round(s) of {args.steps or 'the workload’s'} steps, suite/plain {label} ratio: median "
        f"{result['ratio_median']:.3f} (min {result['ratio_min']:.3f}, max {result['ratio_max']:.3f}); overhead "
        f"{result['overhead']:+.1%}, at most {result['overhead_bound']:+.1%} (95 %): {verdict} the {GOAL:.0%} goal"
    )
