"""The window's plan (`python -m bench window`): which cells of each phase are predicted to end within the window.
Pure: a simulation of the policy the window's runs follow on the device they share.

The policy (slot_ledger.py, side_by_side.py): each phase's run starts once its assets are ready and takes slots for
its cells in order, as many as a cell's predicted memory needs (every slot where it runs alone); a run takes no slot
while a higher-priority run waits for one; a run starts no cell its time budget says would end after the window
(budget.py). Two scenarios bound the prediction: `slow` (the largest start-up measured, the speed model's slow end,
the device's compute split evenly) and `fast` (the median start-up, the central speed, each cell as if alone)."""

from collections.abc import Sequence
from dataclasses import dataclass, field

RUN_START_S = 15.0
"""A `bench run`'s own start before its first cell (imports, the machine's checks, env.json): 8-15 s measured on the
2-core VM, the slow end of it."""


@dataclass(frozen=True)
class PlanCell:
    """One cell as the plan sees it: the slots it takes and its predicted seconds."""

    id: str
    slots: int
    start_up_s: float
    steps_s: float
    """Its training steps alone on the device."""
    budget_start_up_s: float
    budget_steps_s: float
    """What its run's time budget predicts for it alone (the budget's convention: the slow end)."""


@dataclass(frozen=True)
class PlanPhase:
    name: str
    priority: int
    ready_s: float
    """When its assets are predicted ready, seconds into the window."""
    cells: tuple[PlanCell, ...]
    """In the order its run starts them."""
    after: tuple[str, ...] = ()
    """The phases it starts after (the one whose run it resumes among them)."""


@dataclass
class PhaseOutcome:
    """What the simulation says of one phase."""

    name: str
    planned: int
    ended: list[str] = field(default_factory=list)
    """Cells that end within the window, in the order they end."""
    started_s: float | None = None
    """When its run opened (its assets ready, the phase it resumes ended, its own start)."""
    ended_s: float | None = None
    """When its run has no cell left to start or running (None: not within the window)."""


@dataclass
class _Running:
    cell: PlanCell
    phase: str
    start_up_left: float
    steps_left: float


@dataclass
class _State:
    phases: list[PlanPhase]
    slots: int
    seconds: float
    shared: bool
    run_start_s: float
    now: float = 0.0
    pending: dict[str, list[PlanCell]] = field(default_factory=dict)
    running: list[_Running] = field(default_factory=list)
    outcome: dict[str, PhaseOutcome] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pending = {p.name: list(p.cells) for p in self.phases}
        self.outcome = {p.name: PhaseOutcome(p.name, len(p.cells)) for p in self.phases}

    def opens_at(self, phase: PlanPhase) -> float | None:
        """When the phase's run takes its first slot; None while a phase it starts after has not ended."""
        ended = [self.outcome[name].ended_s for name in phase.after]
        if None in ended:
            return None
        return max([phase.ready_s, *ended]) + self.run_start_s  # type: ignore[list-item]

    def free(self) -> int:
        return self.slots - sum(min(r.cell.slots, self.slots) for r in self.running)

    def own(self, phase: str) -> int:
        return sum(r.phase == phase for r in self.running)


def simulate(
    phases: Sequence[PlanPhase], slots: int, seconds: float, shared: bool, run_start_s: float = RUN_START_S
) -> dict[str, PhaseOutcome]:
    """Phase name -> its outcome: the cells predicted to end within `seconds` on a device of `slots` slots. `shared`:
    the cells training at one time split the device's compute evenly; else each trains as if alone."""
    state = _State(sorted(phases, key=lambda p: p.priority), slots, seconds, shared, run_start_s)
    while True:
        _start_what_fits(state)
        step = _next_event(state)
        if step is None or state.now + step > seconds:
            break
        _advance(state, step)
    return state.outcome


def _start_what_fits(state: _State) -> None:
    """Each open run in priority order starts the cells it can; a run that waits for slots holds off every run of a
    lower priority."""
    waiting_above: int | None = None
    for phase in state.phases:
        opens = state.opens_at(phase)
        if opens is None or opens > state.now or _done(state, phase.name):
            continue
        outcome = state.outcome[phase.name]
        outcome.started_s = opens if outcome.started_s is None else outcome.started_s
        if waiting_above is not None and phase.priority > waiting_above:
            continue
        if _start_cells(state, phase.name):
            waiting_above = phase.priority
        _mark_done(state, phase.name)


def _start_cells(state: _State, phase: str) -> bool:
    """Start the phase's cells that fit, in order; whether one waits for slots."""
    waits = False
    for cell in list(state.pending[phase]):
        predicted = cell.budget_start_up_s + cell.budget_steps_s * (1 + state.own(phase))
        if predicted > state.seconds - state.now:
            state.pending[phase].remove(cell)  # the budget leaves it out
            continue
        alone = cell.slots >= state.slots
        if alone and state.own(phase):
            return True  # it waits for the device to empty, and nothing of its run starts before it
        if min(cell.slots, state.slots) > state.free():
            waits = True
            if alone:
                return True
            continue
        state.pending[phase].remove(cell)
        state.running.append(_Running(cell, phase, cell.start_up_s, cell.steps_s))
    return waits


def _done(state: _State, phase: str) -> bool:
    return state.outcome[phase].ended_s is not None


def _mark_done(state: _State, phase: str) -> None:
    if not state.pending[phase] and not state.own(phase):
        state.outcome[phase].ended_s = state.now


def _rate(state: _State) -> float:
    """How fast a training cell's steps advance: 1 / the cells training at once where they share the device."""
    training = sum(r.start_up_left <= 0 for r in state.running)
    return 1.0 / training if state.shared and training else 1.0


def _next_event(state: _State) -> float | None:
    """Seconds to the next moment something changes: a cell's start-up or steps end, a phase's run opens."""
    rate = _rate(state)
    times = [r.start_up_left if r.start_up_left > 0 else r.steps_left / rate for r in state.running]
    for phase in state.phases:
        opens = state.opens_at(phase)
        if opens is not None and opens > state.now and not _done(state, phase.name) and state.pending[phase.name]:
            times.append(opens - state.now)
    return max(0.0, min(times)) if times else None


def _advance(state: _State, step: float) -> None:
    """Move `step` seconds on: start-ups and steps advance, cells that end are counted, runs that end end."""
    rate = _rate(state)
    state.now += step
    for run in list(state.running):
        if run.start_up_left > 0:
            run.start_up_left -= step
            continue
        run.steps_left -= step * rate
        if run.steps_left <= 1e-9:
            state.running.remove(run)
            state.outcome[run.phase].ended.append(run.cell.id)
            _mark_done(state, run.phase)


def predicted_counts(outcome: dict[str, PhaseOutcome]) -> dict[str, int]:
    return {name: len(o.ended) for name, o in outcome.items()}
