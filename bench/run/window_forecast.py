"""The window's plan with its numbers (bench/run/window.py prints it first and writes it as plan.json): each phase's
cells as its run will start them, the slots each takes (its predicted memory, bench/run/memory_slots.py), its
PREDICTED seconds (the start-ups measured on the card's profile, its steps at the speed model's figures), when its
assets are PREDICTED ready, and what bench/run/window_plan.py's simulation makes of them: the cells of each phase
predicted to end within the window, at the slow end and the fast end."""

import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import HardwareProfile, Workload
from bench.paths import RESULTS_DIR
from bench.run.memory_slots import SPEED_TRIALS, SharedDevice, slots_taken
from bench.run.window_plan import PlanCell, PlanPhase, predicted_counts, simulate
from bench.run.window_spec import WindowPhase

PREPARED_S = {"cuda": (51.0, 76.0), "cpu": (17.0, 17.0)}
"""When a workload's assets are PREDICTED ready, seconds into the window: the first workload's, the others' (prepared
side by side once the first is: bench/assets/prepare_all.py). Measured: on the lent H200, llama-3.2-1b at 51 s and
phi-2 at 76 s (results/1xH200/20261126-182033/first-contact.log; opt-1.3b and mistral-7b PREDICTED as phi-2); on
the 2-core VM, tiny and small in the background in 17.3 s (docs/hardware.md)."""


@dataclass(frozen=True)
class Scenario:
    """One end of the prediction's range."""

    name: str
    start_up: str
    """`median` or `max` of the start-ups measured on the card's profile."""
    speed: str
    """The speed model's figure: `s_per_step` (central) or `s_per_step_high` (slow end)."""
    shared: bool
    """Cells that train at one time split the device's compute evenly."""


SCENARIOS = (Scenario("slow", "max", "s_per_step_high", True), Scenario("fast", "median", "s_per_step", False))


def start_ups(profile: str, results: Path = RESULTS_DIR) -> list[float]:
    """The start-up (wall less its training steps) of every `ok` cell of the profile's runs under `results`, the
    budget's measure (bench/run/budget.py)."""
    from bench.results.runs import run_dirs
    from bench.results.schema import Status
    from bench.results.store import load_results

    found = []
    folder = results / profile
    for run in run_dirs(folder) if folder.is_dir() else []:
        for record in load_results(run, quiet=True).records:
            metrics = record.metrics
            if record.status == Status.OK and metrics is not None and record.wall_s is not None:
                found.append(record.wall_s - metrics.step_time_median_s * metrics.steps)
    return found


@dataclass(frozen=True)
class Inputs:
    """What the forecast reads besides the phases: the card and its device, the start-ups measured on it."""

    card: HardwareProfile
    device: SharedDevice
    device_kind: str
    start_ups: tuple[float, ...]


def forecast(phases: list[WindowPhase], inputs: Inputs, seconds: float) -> dict:
    """plan.json's content: each phase's planned cells and, per scenario, how many are PREDICTED to end."""
    by_scenario = {}
    planned: dict[str, list[PlanPhase]] = {}
    for scenario in SCENARIOS:
        planned[scenario.name] = plan_phases(phases, inputs, scenario)
        by_scenario[scenario.name] = simulate(planned[scenario.name], inputs.device.slots, seconds, scenario.shared)
    rows = []
    for phase, plan in zip(phases, planned["slow"], strict=True):
        predicted = {name: len(outcome[phase.name].ended) for name, outcome in by_scenario.items()}
        rows.append(
            {"name": phase.name, "priority": phase.priority, "profile": phase.profile, "workload": phase.workload,
             "run_id": phase.run_id, "cells": [c.id for c in plan.cells], "predicted_cells": predicted}
        )  # fmt: skip
    totals = {name: sum(predicted_counts(outcome).values()) for name, outcome in by_scenario.items()}
    return {
        "prediction": "PREDICTED: cells ending within the window, slow end and fast end (bench/run/window_plan.py)",
        "profile": inputs.card.name, "seconds": seconds, "slots": inputs.device.slots,
        "device_bytes": inputs.device.memory_bytes,
        "start_up_s": {"median": _start_up(inputs, "median"), "max": _start_up(inputs, "max")},
        "phases": rows, "predicted_total": totals,
    }  # fmt: skip


def _start_up(inputs: Inputs, which: str) -> float:
    if not inputs.start_ups:
        return float(inputs.card.start_up_s)
    return round(max(inputs.start_ups) if which == "max" else statistics.median(inputs.start_ups), 1)


def plan_phases(phases: list[WindowPhase], inputs: Inputs, scenario: Scenario) -> list[PlanPhase]:
    """The phases as the simulation sees them, under `scenario`."""
    workloads = list(dict.fromkeys(p.workload for p in phases))
    first, others = PREPARED_S.get(inputs.device_kind, PREPARED_S["cuda"])
    planned: list[PlanPhase] = []
    for phase in phases:
        cells = plan_cells(phase, inputs, scenario)
        if phase.speed_of is not None:
            source = next(p for p in planned if p.name == phase.speed_of).cells[: len(phase.cells)]
            alone = inputs.device.slots
            cells = [PlanCell(f"{c.id} (speed {t + 1})", alone, c.start_up_s, c.steps_s, c.budget_start_up_s,
                              c.budget_steps_s) for c in source for t in range(SPEED_TRIALS)]  # fmt: skip
        ready = first if workloads.index(phase.workload) == 0 else others
        planned.append(PlanPhase(phase.name, phase.priority, ready, tuple(cells), phase.after))
    return planned


def plan_cells(phase: WindowPhase, inputs: Inputs, scenario: Scenario) -> list[PlanCell]:
    """The phase's cells its run starts, in the order it starts them (its budget's coverage order); those the
    estimator predicts out of memory by a clear margin are recorded without running, and left out here."""
    from bench.estimate.gate import clearly_out_of_memory, predictor
    from bench.matrix.plan import plan_for
    from bench.matrix.profiles import load_workload
    from bench.matrix.scenario import expand, load_matrix
    from bench.run.budget import coverage_order

    profile = inputs.card if phase.profile == inputs.card.name else _profile(phase.profile)
    workload = load_workload(phase.workload)
    matrix = {c.id: c for c in expand(load_matrix())}
    cells = [matrix[c] for c in phase.cells]
    predict = predictor(profile, workload)
    predictions = {c.id: predict(plan_for(c, profile, workload)) for c in cells}
    cells = [c for c in cells if not clearly_out_of_memory(predictions[c.id])]
    budget = _steps(profile, workload, cells, "s_per_step_high")
    steps = _steps(inputs.card, workload, cells, scenario.speed)
    guess = _start_up(inputs, "max") if inputs.start_ups else float(profile.start_up_s)
    start_up = _start_up(inputs, scenario.start_up)
    device = _device(inputs.device, profile, phase)
    order = coverage_order(cells, lambda c: guess + budget[c.id])
    return [
        PlanCell(c.id, _slots(device, predictions[c.id], CellOnProfile(c, profile).world, phase.alone), start_up,
                 steps[c.id], guess, budget[c.id])
        for c in order
    ]  # fmt: skip


def _profile(name: str) -> HardwareProfile:
    from bench.matrix.profiles import load_profile

    return load_profile(name)


def _device(device: SharedDevice, profile: HardwareProfile, phase: WindowPhase) -> SharedDevice:
    """The device as the phase's run sees it: an emulated card's cells capped at its memory."""
    from dataclasses import replace

    from bench.units import GB

    if "--emulate" in phase.target and profile.memory_per_device_gb:
        card = int(profile.memory_per_device_gb * GB)
        return replace(device, own_bytes=card, emulated_bytes=card)
    return device


def _slots(device: SharedDevice, prediction, ranks: int, alone: bool) -> int:
    return device.slots if alone else slots_taken(device, prediction, ranks)


def _steps(profile: HardwareProfile, workload: Workload, cells: list[Cell], figure: str) -> dict[str, float]:
    """Each cell's training steps, seconds, at the speed model's `figure` on `profile` (the budget's unknown where
    it has none)."""
    from bench.estimate.speed.cell_speeds import speeds_of
    from bench.run.budget import UNKNOWN_STEPS_S

    speeds = speeds_of(profile, workload, cells)
    steps = {}
    for cell in cells:
        per_step = getattr(speeds.get(cell.id), figure, None)
        steps[cell.id] = UNKNOWN_STEPS_S if per_step is None else per_step * workload.train.steps
    return steps
