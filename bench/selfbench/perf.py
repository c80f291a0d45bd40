"""Benchmark of the suite itself: where a cell's fixed cost goes, and the full-matrix wall time.

    python -m bench selfbench perf [--hw cpu] [--run RUN_ID] [--base RUN] [--repeats 3] [--no-imports]

Import costs are measured now, in fresh interpreters; everything else is read from a finished run's records (where
each launcher's wall goes: the records' `phases`). With `--base` (a run of the same hardware folder, e.g. the base
side of `make compare-ab`) each figure is given for both runs and as a ratio; run the sides interleaved so that the
machine's drift hits both alike. Several trials per cell give medians."""

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from bench.judge.wall_split import NAMES, start_up_s
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


def trials(run_dir: Path) -> list[ResultRecord]:
    """The newest record of every trial of every cell that ran."""
    newest: dict[tuple[str, int], ResultRecord] = {}
    for record in load_results(run_dir).records:
        newest[(record.cell_id, record.trial)] = record
    return [r for r in newest.values() if r.status != Status.NOT_APPLICABLE and r.wall_s is not None]


def matrix_walls(records: Iterable[ResultRecord]) -> list[float]:
    """Seconds from the first cell's start to the last cell's end, per trial."""
    spans: dict[int, list[dt.datetime]] = {}
    for r in records:
        if r.started_at and r.finished_at:
            spans.setdefault(r.trial, []).extend(
                (dt.datetime.fromisoformat(r.started_at), dt.datetime.fromisoformat(r.finished_at))
            )
    return [(max(times) - min(times)).total_seconds() for _, times in sorted(spans.items())]


def by_launcher(records: Iterable[ResultRecord]) -> dict[str, list[ResultRecord]]:
    groups: dict[str, list[ResultRecord]] = {}
    for r in records:
        if r.metrics:
            groups.setdefault(f"{r.launcher} x{r.world_size}", []).append(r)
    return groups


def launcher_row(group: list[ResultRecord]) -> tuple[float, float, float, float]:
    """Medians over the group's trials: wall, fixed cost, load, training."""
    return (
        statistics.median(r.wall_s for r in group),
        statistics.median(fixed_cost(r) for r in group),
        statistics.median(r.metrics.load_s or 0 for r in group),
        statistics.median(r.metrics.steps * r.metrics.step_time_median_s for r in group),
    )


def phase_groups(records: Iterable[ResultRecord]) -> dict[str, list[ResultRecord]]:
    """Records that split their wall (bench/judge/wall_split.py) by launcher, world size and how the ranks started."""
    groups: dict[str, list[ResultRecord]] = {}
    for r in records:
        if r.phases:
            start = r.process_start.value if r.process_start else "?"
            groups.setdefault(f"{r.launcher} x{r.world_size} {start}", []).append(r)
    return groups


def phase_row(group: list[ResultRecord]) -> tuple[dict[str, float], float, float]:
    """Medians over the group: seconds per segment (absent: 0), start-up seconds, and the unaccounted share of the
    start-up (median of each record's share)."""
    medians = {name: statistics.median(r.phases.get(name, 0.0) for r in group) for name in NAMES}
    start_ups = [start_up_s(r.phases) for r in group]
    shares = [abs(r.phases.get("unaccounted", 0.0)) / s for r, s in zip(group, start_ups, strict=True) if s > 0]
    return medians, statistics.median(start_ups), statistics.median(shares) if shares else float("nan")


def phase_table(records: Iterable[ResultRecord], run: str = "") -> list[str]:
    """Where each launcher's wall goes, segment by segment (medians over its trials); empty without phases."""
    groups = phase_groups(records)
    if not groups:
        return []
    lines = [
        "",
        f"## Where the wall goes{run}, per launcher (medians over trials, seconds; bench/judge/wall_split.py)",
        "",
        "| launcher x ranks start | trials | " + " | ".join(NAMES) + " | start-up | unaccounted / start-up |",
        "|---|---|" + "---|" * (len(NAMES) + 2),
    ]
    for name, group in sorted(groups.items()):
        medians, start_up, share = phase_row(group)
        cells = " | ".join(f"{medians[n]:.2f}" for n in NAMES)
        lines.append(f"| {name} | {len(group)} | {cells} | {start_up:.2f} | {share:.1%} |")
    return lines


def _minutes(walls: list[float]) -> str:
    return ", ".join(f"{w / 60:.1f}" for w in walls) + " min"


def report(run_dir: Path, repeats: int, base_dir: Path | None = None, imports: bool = True) -> str:
    ran = trials(run_dir)
    base = trials(base_dir) if base_dir is not None else []
    title = f"# dpo-bench perf — run {run_dir.name}" + (f" against {base_dir.name}" if base_dir else "")
    lines = [title, ""]
    walls, base_walls = matrix_walls(ran), matrix_walls(base)
    cells = len({r.cell_id for r in ran})
    if walls:
        lines.append(
            f"Matrix wall time (first cell start to last cell end, per trial): {_minutes(walls)} for {cells} cells"
        )
    if base_walls and walls:
        ratio = statistics.median(walls) / statistics.median(base_walls)
        lines.append(f"Base: {_minutes(base_walls)}; ratio of the medians {ratio:.2f}")
    lines.append(f"Sum of cell wall times: {sum(r.wall_s for r in ran) / 60:.1f} min over {len(ran)} trials")
    if imports:
        lines += [
            "",
            f"## Fixed cost of one process (fresh interpreter, median of {repeats})",
            "",
            "| step | seconds |",
            "|---|---|",
        ]
        lines += [f"| {name} | {time_import(code, repeats):.2f} |" for name, code in IMPORTS.items()]
    groups, base_groups = by_launcher(ran), by_launcher(base)
    lines += ["", "## Per launcher (medians over trials)", ""]
    if base_dir is None:
        lines += [
            "| launcher x ranks | trials | wall s | fixed s (wall - steps x step) | load s | train s |",
            "|---|---|---|---|---|---|",
        ]
        for name, group in sorted(groups.items()):
            wall, fixed, load, train = launcher_row(group)
            lines.append(f"| {name} | {len(group)} | {wall:.1f} | {fixed:.1f} | {load:.1f} | {train:.1f} |")
    else:
        lines += [
            "| launcher x ranks | trials | base wall s | wall s | base fixed s | fixed s | fixed ratio | base train s "
            "| train s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, group in sorted(groups.items()):
            wall, fixed, _, train = launcher_row(group)
            if name not in base_groups:
                lines.append(f"| {name} | {len(group)} | — | {wall:.1f} | — | {fixed:.1f} | — | — | {train:.1f} |")
                continue
            b_wall, b_fixed, _, b_train = launcher_row(base_groups[name])
            lines.append(
                f"| {name} | {len(group)} | {b_wall:.1f} | {wall:.1f} | {b_fixed:.1f} | {fixed:.1f} | "
                f"{fixed / b_fixed:.2f} | {b_train:.1f} | {train:.1f} |"
            )
    lines += phase_table(ran, f" in {run_dir.name}" if base_dir else "")
    if base_dir is not None:
        lines += phase_table(base, f" in {base_dir.name}")
    if ran:
        slowest = max(ran, key=lambda r: r.wall_s)
        lines += ["", f"Slowest cell: {slowest.cell_id} {slowest.wall_s:.1f} s ({slowest.status})."]
    return "\n".join(lines) + "\n"


def run_folder(hardware_dir: Path, name: str) -> Path:
    """A run id of the hardware folder, or a run folder."""
    path = Path(name)
    return path if path.is_dir() and (path / "results.jsonl").exists() else hardware_dir / name


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--run", default=None, help="run id or folder (default: the latest)")
    parser.add_argument("--base", default=None, help="run id or folder to hold the run against (compare-ab's base)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-imports", action="store_true", help="leave the fresh-interpreter import timings out")


def run(args: argparse.Namespace) -> int:
    hardware_dir = RESULTS_DIR / args.hw
    run_dir = run_folder(hardware_dir, args.run) if args.run else latest_run(hardware_dir)
    base_dir = run_folder(hardware_dir, args.base) if args.base else None
    print(report(run_dir, args.repeats, base_dir, not args.no_imports))
    return 0
