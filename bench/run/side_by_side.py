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
from dataclasses import dataclass, field
from typing import TextIO

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
    pool = ThreadPoolExecutor(max_workers=total, thread_name_prefix="cell")
    shared = _Machine(ctx, devices, predictions, done, repeats, budget, out, pending, needs, len(todo), pool)
    print(f"cells run side by side on {total} devices; a cell that takes them all runs alone", file=out, flush=True)
    try:
        while shared.pending or shared.running:
            shared.start_what_fits()
            if shared.running:
                shared.record_what_ended()
    except BaseException:
        left = [label(r, repeats) for r in shared.running.values()]
        executor.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        if left:
            print(f"\nstopped {', '.join(left)}: not recorded", file=out, flush=True)
        raise
    pool.shutdown()
    return shared.over_budget


@dataclass
class _Machine:
    """The machine's devices shared by the cells of a run: which wait, which run where, which the budget left out."""

    ctx: RunContext
    devices: list[DeviceSlot]
    predictions: dict[str, PredictionSummary | None]
    done: dict[str, ResultRecord]
    repeats: int
    budget: TimeBudget | None
    out: TextIO
    pending: list[tuple[Cell, int]]
    needs: dict[str, int]
    """Devices each cell takes."""
    trials: int
    """Trials to run in all (the progress lines' denominator)."""
    pool: ThreadPoolExecutor
    free: list[int] = field(default_factory=list)
    spans: list[Running] = field(default_factory=list)
    running: dict[Future, Running] = field(default_factory=dict)
    over_budget: list[tuple[Cell, float]] = field(default_factory=list)
    recorded: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.free = list(range(len(self.devices)))

    def start_what_fits(self) -> None:
        """Start the waiting cells, in order, whose devices are free; one that takes them all waits for the machine
        to empty, and nothing after it starts before it."""
        total = len(self.devices)
        for item in list(self.pending):
            cell, trial = item
            if self.budget is not None and not self.budget.fits(cell):
                self.pending.remove(item)
                self.over_budget.append((cell, self.budget.predicted_s(cell)))
                print(f"      {cell.id:<40} {self.budget.not_run(cell)}", file=self.out, flush=True)
                continue
            count = self.needs[cell.id]
            if count >= total and self.running:
                break  # it runs alone: nothing after it starts before it
            if any(r.cell.id == cell.id for r in self.running.values()):
                continue
            indexes = pick(self.free, count, total)
            if indexes is None:
                continue
            self.pending.remove(item)
            self._start(cell, trial, indexes)
            if count >= total:
                break

    def _start(self, cell: Cell, trial: int, indexes: list[int]) -> None:
        for index in indexes:
            self.free.remove(index)
        placement = SlotPlacement(tuple(indexes), tuple(self.devices[i] for i in indexes))
        timeout = self.budget.cell_timeout(self.ctx.profile.timeout_s) if self.budget is not None else None
        run = Running(cell, trial, placement, time.time())
        self.spans.append(run)
        prediction = self.predictions.get(cell.id)
        future = self.pool.submit(run_cell, self.ctx, cell, trial, prediction, timeout_s=timeout, placement=placement)
        self.running[future] = run
        print(f"      {label(run, self.repeats)} ... ({placement.label})", file=self.out, flush=True)

    def record_what_ended(self) -> None:
        """Wait for a running cell to end; append the record of each that did, marked with the cells beside it."""
        ended, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
        for future in ended:
            run = self.running.pop(future)
            run.ended = time.time()
            self.free.extend(run.placement.indexes)
            record = future.result()
            record = with_overlap(record, run.started, run.ended)  # another runner shared the machine
            record = record.model_copy(
                update={"shared_with": shared_with(run, self.spans), "devices": run.placement.label}
            )
            append_or_keep(self.ctx.run_dir, record)
            self.recorded += 1
            self.done[run.cell.id] = record
            if self.budget is not None:
                self.budget.learn(run.cell, record)
            line = format_progress(self.recorded, self.trials, record, time.monotonic() - self.started_at)
            print(line, file=self.out, flush=True)
