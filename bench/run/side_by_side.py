"""Cells side by side: on disjoint devices of this machine (bench/run/slots.py), or in slots of one device's memory
(`run --gpu-slots`: bench/run/memory_slots.py, handed out by the ledger every run on the device shares,
bench/run/slot_ledger.py). One thread per running cell plans, executes and builds its record (bench/run/one_cell.py);
the main thread starts each cell once its devices are free and records it as it ends (bench/run/trial.py), marked
with the cells that ran meanwhile (`shared_with`), its devices, and in slots `gpu_shared`, its slots and its cap. A
cell that takes every device runs alone; two trials of one cell never run together (they share the cell's folder).
On Ctrl-C or a failure that stops the run, every running cell is killed and none is recorded. In slots, a cell that
runs out of memory under its cap is run again alone; after the cells an exclusive speed pass runs SPEED_TRIALS
trials of a few of them alone. Reference: docs/hardware.md, "Cells side by side"."""

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial

from bench.executors.local import LocalExecutor
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.results.schema import ResultRecord, Status
from bench.run.budget import coverage_order
from bench.run.memory_slots import SPEED_TRIALS, SharedDevice, cap_bytes, slots_taken
from bench.run.one_cell import RunContext
from bench.run.slot_ledger import DeviceLedger, Devices, Span
from bench.run.slots import DeviceSlot, SlotPlacement, need, start_order
from bench.run.trial import Lifecycle, Trial, label
from bench.units import GiB
from bench.worker.placement import cell_devices
from bench.worker.spec import WorkerSpec

POLL_S = 1.0
"""How often a run whose next cell waits for slots another run holds looks again."""


@dataclass(frozen=True)
class Sharing:
    """What the cells share: the devices handed out, the ledger that hands them out, and in slots of one device's
    memory, that device."""

    devices: list[DeviceSlot]
    ledger: Devices | DeviceLedger
    memory: SharedDevice | None = None


def in_process(devices: list[DeviceSlot], run_id: str) -> Sharing:
    """Disjoint devices of this machine, handed out by this runner alone."""
    return Sharing(devices, Devices(len(devices), run_id))


@dataclass
class Running:
    trial: Trial
    placement: SlotPlacement
    span: Span


def cell_needs(ctx: RunContext, cell: Cell, total: int) -> int:
    """How many of the machine's `total` devices the cell takes."""
    plan = ctx.plan(cell)
    return need(plan.on_profile, cell_devices(WorkerSpec.from_plan(plan, ctx.assets, "")), total)


def speed_pass(cells: list[Cell], done: dict[str, ResultRecord], count: int, repeats: int) -> list[Trial]:
    """The exclusive speed pass: of `cells` (in coverage order), the first `count` whose record is ok with a shared
    speed, SPEED_TRIALS trials each after the run's own. Pure."""
    chosen = [c for c in cells if (r := done.get(c.id)) is not None and r.status == Status.OK and r.speed_shared]
    return [Trial(c, repeats + i, alone=True) for c in chosen[:count] for i in range(SPEED_TRIALS)]


def run_side_by_side(trials: Lifecycle, todo: list[tuple[Cell, int]], sharing: Sharing, speed_cells: int = 0) -> None:
    """Run `todo` side by side; every record is appended as its cell ends. Without a time budget (whose coverage
    order stands) the cells that share the machine go first, then those that take all of it. In slots of one device,
    then the exclusive speed pass over up to `speed_cells` cells. The budget's left-out cells: `trials.over_budget`."""
    ctx, budget, out, repeats = trials.ctx, trials.budget, trials.out, trials.repeats
    executor = ctx.executor
    if not isinstance(executor, LocalExecutor):
        raise TypeError(f"cells run side by side under the local executor only, not {executor.name}")
    alone = sharing.memory is not None and sharing.memory.alone
    machine = _Machine(trials, sharing, [Trial(c, t, alone) for c, t in todo])
    if budget is None:  # the budget's coverage order stands
        machine.share_first()
    cells = coverage_order(list({c.id: c for c, _ in todo}.values()), budget.predicted_s if budget else None)
    if sharing.memory is None:
        speed_cells = 0
    if budget is not None and speed_cells:
        budget.reserve(cells[:speed_cells], SPEED_TRIALS)
    trials.say(_opening(sharing))
    pool = ThreadPoolExecutor(max_workers=len(sharing.devices), thread_name_prefix="cell")
    machine.pool = pool
    try:
        machine.drive()
        if budget is not None:
            budget.reserve([], 0)
        if exclusive := speed_pass(cells, trials.done, speed_cells, repeats):
            trials.say(f"exclusive speed pass: {len(exclusive) // SPEED_TRIALS} cell(s) x {SPEED_TRIALS} trials, "
                       "each alone on the device")  # fmt: skip
            machine.pending, trials.total = exclusive, trials.total + len(exclusive)
            machine.drive()
    except BaseException:
        left = [label(r.trial, repeats) for r in machine.running.values()]
        executor.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        if left:
            print(f"\nstopped {', '.join(left)}: not recorded", file=out, flush=True)
        raise
    finally:
        if isinstance(sharing.ledger, DeviceLedger):
            sharing.ledger.leave()
    pool.shutdown()


def _opening(sharing: Sharing) -> str:
    memory, ledger = sharing.memory, sharing.ledger
    if memory is None or not isinstance(ledger, DeviceLedger):
        return f"cells run side by side on {len(sharing.devices)} devices; a cell that takes them all runs alone"
    where = f"GPU {memory.gpu}" if memory.gpu is not None else "the host's memory"
    cap = f"; each capped at its card's {memory.emulated_bytes / 1e9:g} GB" if memory.emulated_bytes else ""
    return (
        f"cells run side by side in {memory.slots} slots of {where} ({memory.share_bytes / GiB:.2f} GiB each), "
        f"admitted by their predicted memory{cap}; other runs on it share the slots through {ledger.path}"
    )


@dataclass
class _Machine:
    """The devices shared by the cells of a run: which wait, which run where."""

    trials: Lifecycle
    sharing: Sharing
    pending: list[Trial]
    pool: ThreadPoolExecutor | None = None
    running: dict[Future, Running] = field(default_factory=dict)
    needs: dict[str, int] = field(default_factory=dict)

    @property
    def ctx(self) -> RunContext:
        return self.trials.ctx

    @property
    def total(self) -> int:
        return len(self.sharing.devices)

    def drive(self) -> None:
        """Until nothing waits or runs: start what fits, record what ends; while another run holds the slots the
        next cell needs, look again every POLL_S."""
        shared = isinstance(self.sharing.ledger, DeviceLedger)
        while self.pending or self.running:
            self.start_what_fits()
            if self.running:
                self.record_what_ended(POLL_S if shared else None)
            elif self.pending:
                time.sleep(POLL_S)

    def count(self, trial: Trial) -> int:
        """The devices a trial takes."""
        memory = self.sharing.memory
        if trial.alone:
            return self.total
        if memory is None:
            if trial.cell.id not in self.needs:
                self.needs[trial.cell.id] = cell_needs(self.ctx, trial.cell, self.total)
            return self.needs[trial.cell.id]
        return slots_taken(
            memory, self.trials.predictions.get(trial.cell.id), CellOnProfile(trial.cell, self.ctx.profile).world
        )

    def share_first(self) -> None:
        """The trials of cells that share the devices first (in their order), then those that take them all."""
        cells = list({t.cell.id: t.cell for t in self.pending}.values())
        counts = {c.id: self.count(Trial(c, 0)) for c in cells}
        order = {c.id: i for i, c in enumerate(start_order(cells, lambda c: counts[c.id], self.total))}
        self.pending.sort(key=lambda t: (order[t.cell.id], t.trial))

    def beside_now(self) -> int:
        """The cells that would share a device's compute with one started now (slots of one device only)."""
        return len(self.running) if self.sharing.memory is not None else 0

    def start_what_fits(self) -> None:
        """Start the waiting trials, in order, whose devices are free; one that takes them all waits for the device
        to empty, and nothing after it starts before it."""
        for item in list(self.pending):
            if self.trials.budget is not None and not self._fits(item):
                continue
            count = self.count(item)
            if count >= self.total and self.running:
                break  # it runs alone: nothing after it starts before it
            if any(r.trial.cell.id == item.cell.id for r in self.running.values()):
                continue
            taken = self.sharing.ledger.take(count, item.cell.id)
            if taken is None:
                if count >= self.total:
                    break
                continue
            self.pending.remove(item)
            self._start(item, *taken)
            if count >= self.total:
                break

    def _fits(self, item: Trial) -> bool:
        """Whether the budget lets `item` start now; one it does not is left out."""
        if self.trials.admit(item, beside=0 if item.alone else self.beside_now(), reserving=not item.alone):
            return True
        self.pending.remove(item)
        return False

    def placement(self, item: Trial, indexes: list[int]) -> SlotPlacement:
        devices = tuple(self.sharing.devices[i] for i in indexes)
        memory = self.sharing.memory
        if memory is None:
            return SlotPlacement(tuple(indexes), devices)
        prediction = self.trials.predictions.get(item.cell.id)
        cap = cap_bytes(memory, len(indexes), prediction, CellOnProfile(item.cell, self.ctx.profile).world)
        device_bytes = memory.memory_bytes if memory.gpu is not None else None
        return SlotPlacement(tuple(indexes), devices, cap, device_bytes, memory.slots)

    def _start(self, item: Trial, indexes: list[int], span: Span) -> None:
        assert self.pool is not None
        placement = self.placement(item, indexes)
        future = self.pool.submit(self.trials.run, item, placement=placement)
        self.running[future] = Running(item, placement, span)
        cap = f", capped at {placement.cap_bytes / GiB:.2f} GiB" if placement.cap_bytes is not None else ""
        slot = f", slots {placement.slot}" if placement.slot else ""
        self.trials.starting(item, f" ({placement.label}{slot}{cap})")

    def record_what_ended(self, timeout: float | None) -> None:
        """Wait (up to `timeout`) for a running cell to end; record each that did, marked with the cells beside it,
        or send a cell that ran out of memory under its slots' cap back to run alone first."""
        ended, _ = wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in ended:
            run = self.running.pop(future)
            names = self.sharing.ledger.give(list(run.placement.indexes), run.span)
            assert run.span.ended is not None
            ran = (run.span.started, run.span.ended)
            mark = partial(self._marked, run, names=names)
            if self.trials.finish(run.trial, future.result(), ran, run.placement, mark) is None:
                self.pending.insert(0, Trial(run.trial.cell, run.trial.trial, alone=True))

    def _marked(self, run: Running, record: ResultRecord, names: list[str]) -> ResultRecord:
        """The record (marked with the runs that overlapped it) with the cells beside it and where it ran; another
        run's cells beside it in the device's slots are named there, not as a run that overlapped it (their memory is
        their own), and a run that only waits for the device's slots, with no cell on it, did not share the
        machine."""
        update: dict = {"shared_with": names, "devices": run.placement.label}
        if self.sharing.memory is not None:
            sharing_runs = {name.split("/", 1)[0] for name in names if "/" in name}
            if isinstance(self.sharing.ledger, DeviceLedger) and record.overlapped_by:
                sharing_runs |= self.sharing.ledger.waiting_runs(run.span.started)
            update |= {
                "gpu_shared": bool(names),
                "slot": run.placement.slot,
                "memory_cap_bytes": run.placement.cap_bytes,
                "overlapped_by": [r for r in record.overlapped_by if r not in sharing_runs],
            }
        return record.model_copy(update=update)
