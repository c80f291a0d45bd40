"""A benchmark run: plan the cells for a profile, run each in isolation, record it, resume, summarise."""

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.assets import PreparedAssets
from bench.executors import Executor
from bench.hardware import untested_reason
from bench.launch import plan_launch
from bench.mfu import inputs_for
from bench.profiles import HardwareProfile, Workload
from bench.rank_report import read_rank_reports
from bench.record import base_record, finished_record
from bench.results import append_result, load_results, now_iso
from bench.results_schema import ResultRecord, Status
from bench.scenario import Cell, not_applicable_reason, world_size
from bench.secrets import redact_file
from bench.worker.spec import WorkerSpec


@dataclass
class RunContext:
    run_id: str
    run_dir: Path
    profile: HardwareProfile
    workload: Workload
    assets: PreparedAssets
    executor: Executor
    launch_env: dict[str, str] = field(default_factory=dict)
    """Added to every cell's launch environment (bench.hardware.preflight: visible devices, --emulate cap)."""
    emulated: bool = False


def plan_cells(cells: list[Cell], profile: HardwareProfile) -> tuple[list[Cell], dict[str, str]]:
    """Runnable cells, and the not-applicable ones with their reasons."""
    runnable, skipped = [], {}
    for cell in cells:
        reason = not_applicable_reason(cell, profile)
        if reason:
            skipped[cell.id] = reason
        else:
            runnable.append(cell)
    return runnable, skipped


def run_cell(ctx: RunContext, cell: Cell, trial: int = 0) -> ResultRecord:
    untested = untested_reason(ctx.profile)
    if untested:  # the device's software stack is absent: record why, never a fake result
        base = base_record(cell, ctx.run_id, ctx.profile.name, ctx.workload.name, world_size(cell, ctx.profile))
        return base.model_copy(
            update={"status": Status.UNTESTED, "message": untested, "finished_at": now_iso(), "executor": "none"}
        )
    config_dir = ctx.run_dir / "configs" / cell.id
    out_dir = ctx.run_dir / "cells" / cell.id
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    (ctx.run_dir / "logs").mkdir(exist_ok=True)
    spec = WorkerSpec(cell=cell, profile=ctx.profile, workload=ctx.workload, assets=ctx.assets, out_dir=str(out_dir))
    plan, spec = plan_launch(spec, config_dir / "spec.json", config_dir, ctx.executor.python)
    plan.env |= ctx.launch_env
    world = world_size(cell, ctx.profile)
    base = base_record(cell, ctx.run_id, ctx.profile.name, ctx.workload.name, world)
    started = now_iso()
    labels = {"dpo-bench.run": ctx.run_id, "dpo-bench.cell": cell.id, "dpo-bench.hardware": ctx.profile.name}
    log_path = ctx.run_dir / "logs" / (f"{cell.id}.log" if trial == 0 else f"{cell.id}.trial{trial}.log")
    outcome = ctx.executor.run(plan, log_path, ctx.profile.timeout_s, labels)
    redact_file(log_path)
    reports, problems = read_rank_reports(out_dir)
    train = ctx.workload.train
    record = finished_record(
        base,
        cell,
        reports,
        problems,
        outcome,
        train.warmup_steps,
        train.per_device_train_batch_size * world,
        train.steps,
        inputs_for(ctx.profile, ctx.workload, ctx.assets.model, cell, world),
    )
    files = [str(p.relative_to(ctx.run_dir)) for p in [*plan.config_files, config_dir / "spec.json"]]
    return record.model_copy(
        update={
            "config_files": files,
            "started_at": started,
            "finished_at": now_iso(),
            "executor": ctx.executor.name,
            "trial": trial,
            "emulated": ctx.emulated,
        }
    )


def format_progress(done: int, total: int, record: ResultRecord, elapsed: float) -> str:
    remaining = total - done
    eta = elapsed / done * remaining if done else 0.0
    detail = ""
    if record.metrics:
        peak = record.metrics.train_peak_bytes or 0
        detail = f"{record.metrics.tokens_per_s:>9,.0f} tok/s {peak / 2**20:>7,.0f} MiB"
    elif record.message:
        detail = record.message[:60]
    wall = f"{record.wall_s:5.1f}s" if record.wall_s is not None else ""
    return f"[{done:>3}/{total}] {record.cell_id:<40} {record.status:<15} {detail} {wall} | ETA {eta / 60:4.1f} min"


def execute(
    ctx: RunContext, cells: list[Cell], force: bool = False, repeats: int = 1, out=sys.stdout
) -> list[ResultRecord]:
    """Run (or resume) `repeats` trials of each cell; every record is appended as its trial ends.
    Returns this run's latest record per cell."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    existing = load_results(ctx.run_dir)
    for problem in existing.problems:
        print(f"warning: {problem}", file=out)
    done = existing.latest_by_cell()
    runnable, skipped = plan_cells(cells, ctx.profile)

    for cell in cells:
        if cell.id in skipped and (force or cell.id not in done):
            base = base_record(cell, ctx.run_id, ctx.profile.name, ctx.workload.name, world_size(cell, ctx.profile))
            record = base.model_copy(update={"message": skipped[cell.id], "finished_at": now_iso()})
            append_result(ctx.run_dir, record)
            done[cell.id] = record

    recorded = {(r.cell_id, r.trial) for r in existing.records}
    todo = [(c, t) for c in runnable for t in range(repeats) if force or (c.id, t) not in recorded]
    resumed = len(runnable) * repeats - len(todo)
    trials = f" x {repeats} trials" if repeats > 1 else ""
    print(
        f"run {ctx.run_id}: {len(todo)} cell(s){trials} to run, {resumed} already recorded, "
        f"{len(skipped)} not applicable "
        f"-> {ctx.run_dir}",
        file=out,
        flush=True,
    )
    started = time.monotonic()
    for index, (cell, trial) in enumerate(todo, start=1):
        label = cell.id + (f" (trial {trial + 1}/{repeats})" if repeats > 1 else "")
        print(f"[{index - 1:>3}/{len(todo)}] {label} ...", file=out, flush=True)
        try:
            record = run_cell(ctx, cell, trial)
        except KeyboardInterrupt:
            print(
                f"\ninterrupted during {cell.id}: it is not recorded; re-run with RUN={ctx.run_id} to resume",
                file=out,
                flush=True,
            )
            raise
        append_result(ctx.run_dir, record)
        done[cell.id] = record
        print(format_progress(index, len(todo), record, time.monotonic() - started), file=out, flush=True)
    return [done[c.id] for c in cells if c.id in done]


def summary(records: list[ResultRecord]) -> str:
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    order = [s.value for s in Status]
    return ", ".join(f"{counts[s]} {s}" for s in order if s in counts)
