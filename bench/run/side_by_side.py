"""Cells side by side on disjoint devices (a run without --exclusive on a machine with more devices than its cells
take: bench/run/slots.py). One thread per running cell plans, executes and builds its record (bench/run/cell.py);
this (the main) thread starts each cell once its devices are free, appends each record as its cell ends, and
marks it with the cells that ran meanwhile (`shared_with`) and its devices. A cell that takes every device runs
alone; two trials of one cell never run together (they share the cell's folder). On Ctrl-C or a failure that stops
the run, every running cell is killed and none of them is recorded.
"""

import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from bench.executors.local import LocalExecutor
from bench.matrix.cell import Cell
from bench.matrix.scenario import world_size
from bench.results.schema import PredictionSummary, ResultRecord
from bench.run.budget import TimeBudget
from bench.run.cell import RunContext, run_cell
from bench.run.progress import format_progress
from bench.run.runners import with_overlap
from bench.run.slots import DeviceSlot, SlotPlacement, need, pick, start_order
from bench.run.unrecorded import append_or_keep
from bench.worker.placement import cell_devices
from bench.worker.spec import WorkerSpec


@dataclass
class Running:
    cell: Cell
    trial: int
    placement: SlotPlacement
    started: float
    """Epoch seconds."""
    ended: float | None = None


def label(run: Running, repeats: int) -> str:
    return run.cell.id + (f" (trial {run.trial + 1}/{repeats})" if repeats > 1 else "")


def shared_with(run: Running, others: list[Running]) -> list[str]:
    """The cells that ran at some moment while `run` did (it has ended). Pure."""
    assert run.ended is not None
    return sorted(
        {
            o.cell.id
            for o in others
            if o is not run and o.started <= run.ended and (o.ended is None or o.ended >= run.started)
        }
    )


def cell_needs(ctx: RunContext, cell: Cell, total: int) -> int:
    """How many of the machine's `total` devices the cell takes."""
    spec = WorkerSpec(cell=cell, profile=ctx.profile, workload=ctx.workload, assets=ctx.assets, out_dir="")
    return need(cell, ctx.profile, world_size(cell, ctx.profile), cell_devices(spec), total)


def run_side_by_side(
    ctx: RunContext,
    todo: list[tuple[Cell, int]],
    devices: list[DeviceSlot],
    predictions: dict[str, PredictionSummary | None],
    done: dict[str, ResultRecord],
    repeats: int,
    budget: TimeBudget | None = None,
    out=sys.stdout,
) -> list[tuple[Cell, float]]:
    """Run `todo` side by side; every record is appended as its cell ends. Without a `budget` (whose coverage order
    stands) the cells that share the machine go first, then those that take all of it. Returns the cells the time
    budget left out, with their predictions."""
    executor = ctx.executor
    if not isinstance(executor, LocalExecutor):
        raise TypeError(f"cells run side by side under the local executor only, not {executor.name}")
    total = len(devices)
    needs = {c.id: cell_needs(ctx, c, total) for c, _ in todo}
    pending = list(todo)
    if budget is None:
        cells = list({c.id: c for c, _ in todo}.values())
        order = {c.id: i for i, c in enumerate(start_order(cells, lambda c: needs[c.id], total))}
        pending.sort(key=lambda item: (order[item[0].id], item[1]))
    free = list(range(total))
    started_at = time.monotonic()
    spans: list[Running] = []
    running: dict[Future, Running] = {}
    over_budget: list[tuple[Cell, float]] = []
    recorded = 0
    pool = ThreadPoolExecutor(max_workers=total, thread_name_prefix="cell")
    print(f"cells run side by side on {total} devices; a cell that takes them all runs alone", file=out, flush=True)
    try:
        while pending or running:
            for item in list(pending):
                cell, trial = item
                if budget is not None and not budget.fits(cell):
                    pending.remove(item)
                    over_budget.append((cell, budget.predicted_s(cell)))
                    print(f"      {cell.id:<40} {budget.not_run(cell)}", file=out, flush=True)
                    continue
                count = needs[cell.id]
                if count >= total and running:
                    break  # it runs alone: nothing after it starts before it
                if any(r.cell.id == cell.id for r in running.values()):
                    continue
                indexes = pick(free, count, total)
                if indexes is None:
                    continue
                pending.remove(item)
                for index in indexes:
                    free.remove(index)
                placement = SlotPlacement(tuple(indexes), tuple(devices[i] for i in indexes))
                timeout = budget.cell_timeout(ctx.profile.timeout_s) if budget is not None else None
                run = Running(cell, trial, placement, time.time())
                spans.append(run)
                future = pool.submit(
                    run_cell, ctx, cell, trial, predictions.get(cell.id), timeout_s=timeout, placement=placement
                )
                running[future] = run
                print(f"      {label(run, repeats)} ... ({placement.label})", file=out, flush=True)
                if count >= total:
                    break
            if not running:
                continue
            ended, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in ended:
                run = running.pop(future)
                run.ended = time.time()
                free.extend(run.placement.indexes)
                record = future.result()
                record = with_overlap(record, run.started, run.ended)  # another runner shared the machine
                record = record.model_copy(
                    update={"shared_with": shared_with(run, spans), "devices": run.placement.label}
                )
                append_or_keep(ctx.run_dir, record)
                recorded += 1
                done[run.cell.id] = record
                if budget is not None:
                    budget.learn(run.cell, record)
                line = format_progress(recorded, len(todo), record, time.monotonic() - started_at)
                print(line, file=out, flush=True)
    except BaseException:
        left = [label(r, repeats) for r in running.values()]
        executor.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        if left:
            print(f"\nstopped {', '.join(left)}: not recorded", file=out, flush=True)
        raise
    pool.shutdown()
    return over_budget
