"""One trial's lifecycle, the same whether trials run one after another (run/runner.py), side by side
(run/side_by_side.py) or in flight under a scheduler (run/in_flight.py): the time budget lets it start or leaves it
out, `run_cell` runs it, an OOM under a slot's cap below the cell's own is sent back to run alone, its record is
marked with the runs that shared the machine (and by the caller, with what ran beside it), appended (or kept outside
the results folder), taught to the budget and said in a progress line. The callers decide only when and where.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from bench.matrix.cell import Cell
from bench.results.layout import RunFolder
from bench.results.schema import PredictionSummary, ResultRecord, Status
from bench.run.budget import TimeBudget
from bench.run.memory_slots import SPEED_TRIALS, SharedDevice, below_own
from bench.run.one_cell import RunContext, run_cell
from bench.run.progress import format_progress
from bench.run.runner_registry import with_overlap
from bench.run.slots import SlotPlacement
from bench.run.unrecorded import append_or_keep
from bench.units import GiB


@dataclass(frozen=True)
class Trial:
    """One trial to run; `alone` takes every device (an OOM under a slot's cap run again, the speed pass, every trial
    of a run with --alone)."""

    cell: Cell
    trial: int
    alone: bool = False


def label(trial: Trial, repeats: int) -> str:
    if trial.trial >= repeats:
        return f"{trial.cell.id} (speed pass, trial {trial.trial - repeats + 1}/{SPEED_TRIALS})"
    return trial.cell.id + (f" (trial {trial.trial + 1}/{repeats})" if repeats > 1 else "")


@dataclass
class Lifecycle:
    """The trials of one run: what each step reads and writes (the predictions, the latest record per cell, the
    budget, the progress count). `memory`: the device whose slots cap the trials, where they run in slots."""

    ctx: RunContext
    predictions: dict[str, PredictionSummary | None]
    done: dict[str, ResultRecord]
    repeats: int
    budget: TimeBudget | None
    out: TextIO
    total: int
    """Trials to run in all (the progress lines' denominator; the speed pass adds its own)."""
    memory: SharedDevice | None = None
    ended: int = 0
    """Trials recorded or left out by the budget."""
    over_budget: list[tuple[Cell, float]] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def admit(self, trial: Trial, beside: int = 0, reserving: bool = False) -> bool:
        """Whether the budget lets `trial` start now, beside `beside` others (`reserving`: the speed pass's time
        kept back); one it does not is left out, with its prediction, and said so."""
        if self.budget is None or self.budget.fits(trial.cell, beside=beside, reserving=reserving):
            return True
        self.ended += 1
        self.over_budget.append((trial.cell, self.budget.predicted_s(trial.cell, beside)))
        not_run = self.budget.not_run(trial.cell, beside)
        self.say(f"[{self.ended:>3}/{self.total}] {label(trial, self.repeats):<40} {not_run}")
        return False

    def starting(self, trial: Trial, where: str = "") -> None:
        self.say(f"[{self.ended:>3}/{self.total}] {label(trial, self.repeats)} ...{where}")

    def run(self, trial: Trial, **where) -> ResultRecord:
        """run_cell, within the budget's time (`where`: its placement, or whether its folder starts fresh)."""
        timeout = self.budget.cell_timeout() if self.budget is not None else None
        prediction = self.predictions.get(trial.cell.id)
        return run_cell(self.ctx, trial.cell, trial.trial, prediction, timeout_s=timeout, **where)

    def finish(
        self,
        trial: Trial,
        record: ResultRecord,
        ran: tuple[float, float] | None,
        placement: SlotPlacement | None = None,
        mark: Callable[[ResultRecord], ResultRecord] | None = None,
        suffix: str = "",
    ) -> ResultRecord | None:
        """Record an ended trial; None where it ran out of memory under a cap below its own (run it again alone).
        `ran`: epoch start and end on this machine, to mark the runners that shared it (None: a scheduler's node);
        `mark`: what the caller adds (the cells beside it); `suffix`: the end of its progress line."""
        if self._capped_out(trial, record, placement):
            return None
        if ran is not None:
            record = with_overlap(record, *ran)  # another runner shared the machine meanwhile
        if mark is not None:
            record = mark(record)
        append_or_keep(self.ctx.run_dir, record)  # kept outside the results folder when it cannot be appended
        self.ended += 1
        self.done[trial.cell.id] = record
        if self.budget is not None:
            self.budget.learn(trial.cell, record)
        self.say(format_progress(self.ended, self.total, record, time.monotonic() - self.started_at) + suffix)
        return record

    def _capped_out(self, trial: Trial, record: ResultRecord, placement: SlotPlacement | None) -> bool:
        """An OOM under a cap below the cell's own: its log kept aside, said so."""
        cap = placement.cap_bytes if placement is not None else None
        if self.memory is None or record.status != Status.OOM or not below_own(self.memory, cap):
            return False
        assert cap is not None
        log = RunFolder(self.ctx.run_dir).log(trial.cell.id, trial.trial)
        if log.exists():
            log.replace(log.with_suffix(".capped.log"))
        self.say(
            f"      {label(trial, self.repeats)}: out of memory under its slots' cap ({cap / GiB:.2f} GiB), less than "
            f"its profile gives it: not recorded, run again alone ({log.with_suffix('.capped.log').name})"
        )
        return True
