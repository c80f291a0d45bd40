"""PREDICTED speed of the cells a memory prediction lists (the `predict` command's tokens/s column, `advise`'s
ranking among the setups that fit)."""

from collections.abc import Iterable
from typing import TYPE_CHECKING

from bench.errors import BenchError
from bench.estimate.speed.bounds import held_to_bound, implied_mfu
from bench.estimate.speed.calibration import load_speed_calibration
from bench.estimate.speed.model import SpeedPrediction, predict_speed
from bench.matrix.plan import Plan, plan_for

if TYPE_CHECKING:
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload


def speeds_of(profile: "HardwareProfile", workload: "Workload", cells: Iterable["Cell"]) -> dict[str, SpeedPrediction]:
    """Cell id -> its PREDICTED speed on `profile` with `workload`, full-length sequences; empty where the device's
    figures are not published (the catalog leaves them null): no speed is predicted then, memory still is."""
    return speeds_of_plans([plan_for(c, profile, workload) for c in cells])


def speeds_of_plans(plans: list[Plan]) -> dict[str, SpeedPrediction]:
    """model_speeds of the planned cells, each held to the best published utilisation of its kind
    (bounds.held_to_bound): what predict, advise and the page show."""
    by_plan = {p.cell.id: p for p in plans}
    return {cell_id: held_to_bound(speed, by_plan[cell_id]) for cell_id, speed in model_speeds(plans).items()}


def model_speeds(plans: list[Plan]) -> dict[str, SpeedPrediction]:
    """The speed model's own predictions of the planned cells (each resolved on its profile with its workload), not
    held to a published bound: a run's time budget takes their slow end."""
    calibration = load_speed_calibration()
    try:
        return {p.cell.id: predict_speed(p, calibration) for p in plans}
    except BenchError:
        return {}


def speeds_for(profile: "HardwareProfile", workload: "Workload", cell_ids: list[str]) -> dict[str, SpeedPrediction]:
    """speeds_of the matrix's cells named in `cell_ids`, each with the MFU it implies (where the profile has a
    peak): what `predict` and PREDICTED.md show."""
    from bench.matrix.scenario import expand, load_matrix

    plans = [plan_for(c, profile, workload) for c in expand(load_matrix()) if c.id in set(cell_ids)]
    speeds = speeds_of_plans(plans)
    return {p.cell.id: with_mfu(speeds[p.cell.id], p) for p in plans if p.cell.id in speeds}


def with_mfu(speed: SpeedPrediction, plan: "Plan") -> SpeedPrediction:
    """The prediction with the MFU its tokens/s implies; as it was where there is none (no tokens/s, no peak)."""
    if speed.tokens_per_s is None or not plan.profile.peak_tflops:
        return speed
    try:
        return speed.model_copy(update={"mfu": implied_mfu(speed, plan)})
    except ValueError:  # no model shape to count the FLOPs of
        return speed
