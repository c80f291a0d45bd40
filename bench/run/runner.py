"""A benchmark run: record what will not run, then run the rest (or resume) one trial after another, side by side
(bench/run/side_by_side.py) or in flight under a scheduler (bench/run/in_flight.py), each trial through the same
lifecycle (bench/run/trial.py), appended as it ends.
"""

import contextlib
import errno
import json
import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

from bench.errors import BenchError
from bench.executors.local import LocalExecutor
from bench.files import write_whole
from bench.isolation.deferred_sigint import stopped_by
from bench.judge.record import not_run_record
from bench.matrix.cell import Cell
from bench.results.schema import ResultRecord, Status
from bench.results.store import (
    DISK_FULL_ERRNOS,
    DiskFull,
    append_result,
    load_results,
    mend_results,
    now_iso,
    report_problems,
)
from bench.run.budget import TimeBudget, coverage_order
from bench.run.one_cell import CellPlan, RunContext, plan_cells
from bench.run.slots import DeviceSlot, machine_devices
from bench.run.trial import Lifecycle, Trial, label
from bench.run.unrecorded import Unrecorded

if TYPE_CHECKING:
    from bench.run.memory_slots import SharedDevice
    from bench.run.side_by_side import Sharing

BUDGET_FILE = "budget.json"
"""What a time-boxed run ran and did not run, with each prediction (run --time-budget)."""


def stop_disk_full(ctx: RunContext, label: str, what: str, kept: int) -> DiskFull:
    return DiskFull(
        f"disk full ({what}): the run stops; {kept} record(s) kept, {label} not recorded; "
        f"free space, then resume with --run-id {ctx.run_id}"
    )


def stop_unwritable(ctx: RunContext, label: str, what: str, kept: int) -> BenchError:
    """The run stops on a results folder it cannot write (other than a full disk): what failed, what is kept."""
    return BenchError(
        f"{what}: the run stops; {kept} record(s) kept, {label} not recorded; make {ctx.run_dir} writable, then "
        f"resume with --run-id {ctx.run_id}"
    )


def execute(
    ctx: RunContext,
    cells: list[Cell],
    force: bool = False,
    repeats: int = 1,
    out=sys.stdout,
    budget: TimeBudget | None = None,
    exclusive: bool = False,
    slots: "SharedDevice | None" = None,
    speed_cells: int = 0,
) -> list[ResultRecord]:
    """Run (or resume) `repeats` trials of each cell; every record is appended as its trial ends. With a `budget`
    the cells run in coverage order and none starts that would end after it (bench/run/budget.py). Cells run side by
    side on disjoint devices where the machine has more than a cell takes, or in `slots` of one device's memory, then
    an exclusive speed pass over up to `speed_cells` of them (bench/run/side_by_side.py), unless `exclusive`. Returns
    this run's latest record per cell."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    if notice := mend_results(ctx.run_dir):
        print(f"warning: {notice}", file=out, flush=True)
    existing = load_results(ctx.run_dir, quiet=True)
    report_problems(existing.problems, out)
    done = existing.latest_by_cell()
    plans = plan_cells([ctx.plan(c) for c in cells], ctx.untested, ctx.predict, ctx.run_predicted_oom)
    predictions = {p.cell.id: p.prediction for p in plans}
    runnable = [p.cell for p in plans if p.not_run is None]
    skipped = [p for p in plans if p.not_run is not None]
    # valid lines in results.jsonl, to tell after a Ctrl-C whether a cell was recorded
    lines = len(existing.records) + _record_not_run(ctx, skipped, done, force)
    todo = _trials_to_run(ctx, existing.records, runnable, repeats, force, budget)
    _announce(ctx, todo, len(runnable) * repeats - len(todo), repeats, skipped, out)
    concurrent = ctx.executor.concurrent  # a scheduler orders the cells, and no time budget is applied there
    sharing = None if concurrent or exclusive or not todo else shared_devices(ctx, slots)
    memory = sharing.memory if sharing is not None else None
    trials = Lifecycle(ctx, predictions, done, repeats, None if concurrent else budget, out, len(todo), memory)
    if concurrent:
        from bench.run.in_flight import run_in_flight

        run_in_flight(trials, todo)
        return [done[c.id] for c in cells if c.id in done]
    if sharing is not None:
        from bench.run.side_by_side import run_side_by_side

        try:
            run_side_by_side(trials, todo, sharing, speed_cells)
        except (DiskFull, Unrecorded) as exc:
            kept = len(load_results(ctx.run_dir, quiet=True).records)
            stop = stop_disk_full if isinstance(exc, DiskFull) else stop_unwritable
            raise stop(ctx, "the cells that were running", str(exc), kept) from None
    else:
        _run_in_order(trials, todo, lines)
    if budget is not None:
        report_budget(ctx, budget, [c for c, _ in todo], trials.over_budget, out)
    return [done[c.id] for c in cells if c.id in done]


def _record_not_run(ctx: RunContext, skipped: list[CellPlan], done: dict[str, ResultRecord], force: bool) -> int:
    """Record the cells that will not run (not yet recorded, or all with `force`); how many records were appended."""
    appended = 0
    for plan in skipped:
        if force or plan.cell.id not in done:
            status, reason = plan.not_run
            record = not_run_record(ctx.facts, plan.cell, plan.world, status, reason, now_iso(), plan.prediction)
            append_result(ctx.run_dir, record)
            appended += 1
            done[plan.cell.id] = record
    return appended


def _trials_to_run(
    ctx: RunContext,
    records: list[ResultRecord],
    runnable: list[Cell],
    repeats: int,
    force: bool,
    budget: TimeBudget | None,
) -> list[tuple[Cell, int]]:
    """The (cell, trial) pairs not recorded yet (all with `force`), in coverage order under a budget."""
    # a cell once skipped as predicted_oom is not "done" for a run that asks to run such cells; nor is one the harness
    # spoiled (status harness): its outcome is unknown
    recorded = {
        (r.cell_id, r.trial)
        for r in records
        if not (ctx.run_predicted_oom and r.status == Status.PREDICTED_OOM) and r.status != Status.HARNESS
    }
    if budget is not None:
        runnable = coverage_order(runnable, budget.predicted_s)
    return [(c, t) for c in runnable for t in range(repeats) if force or (c.id, t) not in recorded]


def _announce(
    ctx: RunContext, todo: list[tuple[Cell, int]], resumed: int, repeats: int, skipped: list[CellPlan], out
) -> None:
    trials = f" x {repeats} trials" if repeats > 1 else ""
    not_run = Counter(plan.not_run[0] for plan in skipped)
    counts = [f"{len(todo)} cell(s){trials} to run", f"{resumed} already recorded"]
    counts += [f"{count} {status.replace('_', ' ')}" for status, count in not_run.items()]
    print(f"run {ctx.run_id}: {', '.join(counts)} -> {ctx.run_dir}", file=out, flush=True)


def _run_in_order(trials: Lifecycle, todo: list[tuple[Cell, int]], lines: int) -> None:
    """One trial after another, each recorded as it ends. `lines`: the records results.jsonl holds before the
    first."""
    ctx, out = trials.ctx, trials.out
    for trial in (Trial(cell, index) for cell, index in todo):
        if not trials.admit(trial):
            continue
        before = lines
        # A Ctrl-C anywhere in here (the executor has stopped the cell's processes by the time it arrives) says
        # what became of this cell: the results file is read back, so a record written just before it counts.
        try:
            trials.starting(trial)
            started_at = time.time()
            record = trials.run(trial)
            trials.finish(trial, record, (started_at, time.time()))
            lines += 1
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (bench/isolation/deferred_sigint.py)
            cell = trial.cell
            kept = len(load_results(ctx.run_dir, quiet=True).records) > before
            what = f"after {cell.id} was recorded" if kept else f"during {cell.id}: it is not recorded"
            with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) cannot be told
                print(
                    f"\ninterrupted{stopped_by(exc)} {what}; re-run with --run-id {ctx.run_id} to resume",
                    file=out,
                    flush=True,
                )
            raise
        except (DiskFull, Unrecorded, OSError) as exc:
            raise _stopped(ctx, label(trial, trials.repeats), exc, lines) from None


def _stopped(ctx: RunContext, label: str, exc: OSError | Unrecorded, lines: int) -> Exception:
    """The one-line stop for a cell whose record could not be written: the disk is full, or the folder unwritable."""
    if isinstance(exc, DiskFull):
        return stop_disk_full(ctx, label, str(exc), lines)
    if isinstance(exc, Unrecorded):
        return stop_unwritable(ctx, label, str(exc), lines)
    if exc.errno == errno.EISDIR and exc.filename:  # writable, but a folder stands where a file goes
        folder = exc.filename2 or exc.filename  # a rename of a whole file's temporary names the target second
        return BenchError(
            f"{folder} is a folder, where the run writes a file: the run stops; {lines} record(s) kept, {label} "
            f"not recorded; move {folder} away, then resume with --run-id {ctx.run_id}"
        )
    what = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc.strerror or exc)
    if exc.errno not in DISK_FULL_ERRNOS:
        return stop_unwritable(ctx, label, what, lines)
    return stop_disk_full(ctx, label, what, lines)


def shared_devices(ctx: RunContext, slots: "SharedDevice | None") -> "Sharing | None":
    """What the cells share: the `slots` of one device's memory (their ledger shared with every run on it), else
    the machine's devices where it has more than one; None: one cell at a time."""
    from bench.run.memory_slots import slot_devices
    from bench.run.side_by_side import Sharing, in_process
    from bench.run.slot_ledger import DeviceLedger

    cores = sorted(os.sched_getaffinity(0))
    if slots is not None and not ctx.untested:
        ledger = DeviceLedger.for_device(slots.key, slots.slots, slots.memory_bytes, ctx.run_id, slots.priority)
        return Sharing(slot_devices(slots, cores), ledger, slots)
    devices = shareable_devices(ctx)
    return in_process(devices, ctx.run_id) if len(devices) > 1 else None


def shareable_devices(ctx: RunContext) -> list[DeviceSlot]:
    """The devices cells can share: the machine's (bench/run/slots.py) where the local executor runs them; none
    under any other executor."""
    if not isinstance(ctx.executor, LocalExecutor) or ctx.untested:
        return []
    return machine_devices(ctx.profile, ctx.launch_env, sorted(os.sched_getaffinity(0)))


def report_budget(
    ctx: RunContext, budget: TimeBudget, planned: list[Cell], over: list[tuple[Cell, float]], out
) -> None:
    """Say which cells the time budget left out, and write BUDGET_FILE: the order, what ran, what did not."""
    skipped = {cell.id: round(seconds, 1) for cell, seconds in over}
    write_whole(
        ctx.run_dir / BUDGET_FILE,
        json.dumps(
            {
                "budget_s": budget.seconds,
                "used_s": round(budget.seconds - budget.left(), 1),
                "order": [cell.id for cell in planned],
                "not_run": skipped,
                "start_up_s": [round(s, 1) for s in budget.start_ups],
                "slowdown": round(budget.slowdown, 3),
            },
            indent=2,
        ),
    )
    if skipped:
        print(
            f"time budget: {len(skipped)} cell(s) not run ({', '.join(skipped)}); "
            f"resume them with --run-id {ctx.run_id}",
            file=out,
            flush=True,
        )
