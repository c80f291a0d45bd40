"""Command line: python -m bench {list, run, matrix}."""

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT, RESULTS_DIR, SCENARIOS_DIR
from bench.profiles import load_profile, load_workload
from bench.scenario import Cell, expand, load_matrix, not_applicable_reason, select, world_size

LOCK_FILES = {
    "cpu": "docker/cpu/requirements.lock",
    "cuda": "docker/cuda/requirements.lock",
    "hpu": "docker/hpu/requirements.lock",
}


def _cells(args: argparse.Namespace) -> list[Cell]:
    return expand(load_matrix(Path(args.scenarios) / "matrix.yaml"))


def cmd_list(args: argparse.Namespace) -> int:
    profile = load_profile(args.hw, Path(args.scenarios))
    cells = select(_cells(args), args.filter)
    runnable = 0
    for cell in cells:
        reason = not_applicable_reason(cell, profile)
        runnable += reason is None
        what = f"N/A  {reason}" if reason else f"run  {cell.launcher} x{world_size(cell, profile)}"
        print(f"{cell.id:<42} {what}")
    print(f"{len(cells)} cells: {runnable} to run, {len(cells) - runnable} not applicable on {profile.name}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from bench.assets import prepare
    from bench.executors.local import LocalExecutor
    from bench.publish_matrix import run_is_complete, write_matrix
    from bench.report.matrix import render
    from bench.results import environment_fingerprint, new_run_id, write_env
    from bench.runner import RunContext, execute, summary

    scenarios = Path(args.scenarios)
    profile = load_profile(args.hw, scenarios)
    workload = load_workload(args.workload or profile.workload, scenarios)
    all_cells = _cells(args)
    cells = select(all_cells, args.filter)
    run_id = args.run_id or new_run_id()
    run_dir = Path(args.results) / profile.name / run_id
    if args.run_id and not run_dir.is_dir():
        raise BenchError(f"no run {args.run_id!r} under {Path(args.results) / profile.name} to resume")
    print(f"preparing workload {workload.name} (model, tokenizer, dataset) ...", flush=True)
    assets = prepare(workload)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = PROJECT_ROOT / LOCK_FILES[profile.image_flavor]
    write_env(run_dir, environment_fingerprint(profile.name, workload.name, "local", lock, None))
    executor = LocalExecutor(cwd=PROJECT_ROOT)
    ctx = RunContext(run_id, run_dir, profile, workload, assets, executor)
    try:
        records = execute(ctx, cells, force=args.force)
    except KeyboardInterrupt:
        return 130
    print()
    print(render(records, f"{profile.name} · run {run_id}", []))
    print(f"summary: {summary(records)}")
    ids = [c.id for c in all_cells]
    from bench.results import load_results

    if run_is_complete(load_results(run_dir).latest_by_cell(), ids):
        print(f"matrix written to {write_matrix(run_dir, ids)}")
    else:
        print(f"run {run_id} covers part of the matrix; results/{profile.name}/MATRIX.md left as it was")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from bench.publish_matrix import latest_complete_run, write_matrix

    profile = load_profile(args.hw, Path(args.scenarios))
    ids = [c.id for c in _cells(args)]
    hardware_dir = Path(args.results) / profile.name
    run_dir = hardware_dir / args.run_id if args.run_id else latest_complete_run(hardware_dir, ids)
    print(f"matrix written to {write_matrix(run_dir, ids)}")
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    top.add_argument("--scenarios", default=str(SCENARIOS_DIR), help="scenario folder (default: %(default)s)")
    top.add_argument("--results", default=str(RESULTS_DIR), help="results folder (default: %(default)s)")
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="show every cell and why some are not applicable; runs nothing")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run (or resume) the matrix on this machine")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--workload", default=None, help="override the profile's default workload")
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    p.add_argument("--run-id", default=None, help="resume this run instead of starting a new one")
    p.add_argument("--force", action="store_true", help="re-run cells that already have a result")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("matrix", help="regenerate results/<HW>/MATRIX.md from the latest complete run")
    p.add_argument("--hw", default="cpu")
    p.add_argument("--run-id", default=None)
    p.set_defaults(func=cmd_matrix)

    from bench.report.commands import add_commands

    add_commands(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
