"""PREDICTED speed of the cells a memory prediction lists (the `predict` command's tokens/s column)."""

from bench.estimate.speed.calibration import load_speed_calibration
from bench.estimate.speed.model import SpeedPrediction, predict_speed


def speeds_for(hardware: str, workload_name: str | None, cell_ids: list[str]) -> dict[str, SpeedPrediction]:
    """Cell id -> its PREDICTED speed on `hardware` with the workload (default: the profile's), full-length
    sequences."""
    from bench.matrix.profiles import load_profile, load_workload
    from bench.matrix.scenario import expand, load_matrix

    profile = load_profile(hardware)
    workload = load_workload(workload_name or profile.workload)
    calibration = load_speed_calibration()
    cells = {c.id: c for c in expand(load_matrix())}
    return {i: predict_speed(cells[i], profile, workload, calibration) for i in cell_ids if i in cells}
