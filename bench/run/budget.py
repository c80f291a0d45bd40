"""A time-boxed run (`run --time-budget MINUTES`): which cells run first, and which would not end in time.

Order: a first pass that shows every backend, init mode, quantization, method and launcher of the selection once
(greedy, the matrix order breaking ties), then the rest in matrix order. Time: a cell is predicted to take the run's
start-up cost (the largest so far; the profile's `start_up_s` until a cell has ended) plus its steps at the speed
model's slow end, scaled by how much slower this run's cells trained alone. No cell starts that would end after the
budget; those are reported not run, and resuming the run picks them up. Cells in slots of one device
(`--gpu-slots`) are each held to the deadline from their start, their steps taking as many times longer as there
are cells on the device, and the exclusive speed pass's predicted time (`reserve`) is kept back."""

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.matrix.cell import Cell
from bench.results.schema import ResultRecord

AXES = ("backend", "init", "quant", "method", "launcher")
UNKNOWN_STEPS_S = 60.0
"""The training steps of a cell the speed model has no figure for (a device whose figures are not published)."""


def coverage_order(cells: Sequence[Cell], cost: Callable[[Cell], float] | None = None) -> list[Cell]:
    """Pure: `cells` reordered so that every axis value they hold appears once before anything repeats. Among cells
    that add as many values, the cheapest by `cost` (predicted seconds), then the first in matrix order."""
    left = list(cells)
    seen: set[tuple[str, str]] = set()
    ordered: list[Cell] = []
    while left:
        gains = [len(values(cell) - seen) for cell in left]
        best = max(gains)
        if best == 0:
            break
        tied = [i for i, gain in enumerate(gains) if gain == best]
        chosen = left.pop(min(tied, key=lambda i: (cost(left[i]) if cost else 0.0, i)))
        seen |= values(chosen)
        ordered.append(chosen)
    return ordered + left


def first_pass(cells: Sequence[Cell], cost: Callable[[Cell], float] | None = None) -> list[Cell]:
    """The cells of coverage_order's first pass: the fewest, in order, that show every axis value once."""
    wanted = set().union(*(values(c) for c in cells))
    seen: set[tuple[str, str]] = set()
    taken = []
    for cell in coverage_order(cells, cost):
        if seen >= wanted:
            break
        taken.append(cell)
        seen |= values(cell)
    return taken


def values(cell: Cell) -> set[tuple[str, str]]:
    return {(axis, str(getattr(cell, axis))) for axis in AXES}


@dataclass
class TimeBudget:
    """The deadline of a time-boxed run and what its cells have shown about their cost so far."""

    seconds: float
    steps: int
    """Training steps of every cell (the workload's)."""
    step_seconds: Callable[[Cell], float | None]
    """The speed model's seconds per step of a cell at its slow end; None where it has no figure."""
    start_up_guess_s: float = 60.0
    """A cell's start-up until one of the run has shown its own (the profile's start_up_s)."""
    started: float = field(default_factory=time.monotonic)
    cell_timeout_s: float | None = None
    """A cell's own time limit (the profile's timeout_s, or --cell-timeout); None: only the budget's."""
    start_ups: list[float] = field(default_factory=list)
    slowdowns: list[float] = field(default_factory=list)
    """Measured over predicted training time of each cell that trained alone."""
    reserved: list[tuple[Cell, int]] = field(default_factory=list)
    """Cells (and trials each) kept time for after the cells that share a device: the exclusive speed pass."""

    def left(self, now: float | None = None) -> float:
        return self.seconds - ((time.monotonic() if now is None else now) - self.started)

    def predicted_s(self, cell: Cell, beside: int = 0) -> float:
        """Start-up plus training, the training `beside + 1` times as long when `beside` other cells share its
        device."""
        per_step = self.step_seconds(cell)
        training = UNKNOWN_STEPS_S if per_step is None else per_step * self.steps * self.slowdown
        start_up = max(self.start_ups) if self.start_ups else self.start_up_guess_s
        return start_up + training * (1 + beside)

    def reserve(self, cells: Sequence[Cell], trials: int) -> None:
        """Keep `trials` runs of each of `cells` alone, at the end, out of what the shared cells may use."""
        self.reserved = [(cell, trials) for cell in cells]

    def reserved_s(self) -> float:
        return sum(self.predicted_s(cell) * trials for cell, trials in self.reserved)

    @property
    def slowdown(self) -> float:
        return max(1.0, statistics.median(self.slowdowns)) if self.slowdowns else 1.0

    def not_run(self, cell: Cell, beside: int = 0) -> str:
        """Why `cell` (started beside `beside` others) is left out, for the progress line."""
        predicted = self.predicted_s(cell, beside)
        return f"not run: predicted {predicted:.0f} s, {max(0.0, self.left()):.0f} s of the time budget left"

    def fits(self, cell: Cell, now: float | None = None, beside: int = 0, reserving: bool = False) -> bool:
        """Whether `cell`, started now beside `beside` others, ends within the budget (`reserving`: the time kept for
        the speed pass left aside)."""
        keep = self.reserved_s() if reserving else 0.0
        return self.predicted_s(cell, beside) <= self.left(now) - keep

    def learn(self, cell: Cell, record: ResultRecord) -> None:
        """What an ended cell shows: its start-up (wall time beyond its training steps) and, where it trained alone,
        how much slower than predicted its steps were (a shared speed says nothing of the device's)."""
        if record.wall_s is None:
            return
        metrics = record.metrics
        training = metrics.step_time_median_s * self.steps if metrics is not None else 0.0
        self.start_ups.append(max(0.0, record.wall_s - training))
        per_step = self.step_seconds(cell)
        if metrics is not None and per_step and not record.speed_shared:
            self.slowdowns.append(metrics.step_time_median_s / per_step)

    def cell_timeout(self, grace_s: float = 60.0) -> float:
        """A cell's time limit within the budget: its own (`cell_timeout_s`), cut to what is left plus `grace_s`, so
        one slow cell cannot take the run far past its budget."""
        own = self.cell_timeout_s if self.cell_timeout_s is not None else float("inf")
        return max(10.0, min(own, self.left() + grace_s))
