"""PREDICTED speed of the cells a memory prediction lists (the `predict` command's tokens/s column)."""

from typing import TYPE_CHECKING

from bench.estimate.speed.calibration import load_speed_calibration
from bench.estimate.speed.model import SpeedPrediction, predict_speed

if TYPE_CHECKING:
    from bench.matrix.profiles import HardwareProfile, Workload


def speeds_for(profile: "HardwareProfile", workload: "Workload", cell_ids: list[str]) -> dict[str, SpeedPrediction]:
    """Cell id -> its PREDICTED speed on `profile` with `workload`, full-length sequences."""
    from bench.matrix.scenario import expand, load_matrix

    calibration = load_speed_calibration()
    cells = {c.id: c for c in expand(load_matrix())}
    return {i: predict_speed(cells[i], profile, workload, calibration) for i in cell_ids if i in cells}
