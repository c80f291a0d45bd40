"""`predict` and PREDICTED.md show the MFU a PREDICTED tokens/s implies (bench/estimate/speed/cell_speeds.py speeds_for,
bench/judge/mfu.py's convention): on a GPU profile, beside the tokens/s and in predicted.csv; nowhere on a CPU
profile (no peak)."""

import pytest

from bench.estimate.prediction_tables import SPEED_COLUMNS, _speed, _speed_cells
from bench.estimate.speed.cell_speeds import speeds_for
from bench.judge.mfu import flops_per_token, model_shape
from bench.matrix.profiles import load_profile, load_workload
from bench.paths import scenarios_dir

CELLS = ["one_adapter-none-single", "two_models-none-single", "two_models-none-zero3_offload"]


def test_a_gpu_prediction_carries_the_mfu_its_tokens_per_s_imply():
    profile, workload = load_profile("1xH200"), load_workload("mistral-7b")
    speeds = speeds_for(profile, workload, CELLS)
    shape = model_shape(str(scenarios_dir() / "workloads" / "mistral-7b"))
    assert shape is not None
    dpo_flops = flops_per_token(shape, workload.train.max_length, precomputed_ref=False)  # a reference forward
    for cell in CELLS:
        speed = speeds[cell]
        assert speed.mfu == pytest.approx(speed.tokens_per_s * dpo_flops / (profile.peak_tflops * 1e12))
    assert 0.2 < speeds["one_adapter-none-single"].mfu < 0.6 and speeds["two_models-none-zero3_offload"].mfu < 0.05
    assert _speed(speeds[CELLS[0]]).endswith(f" · MFU {speeds[CELLS[0]].mfu:.1%}")
    assert SPEED_COLUMNS[-1] == "predicted_mfu" and _speed_cells(speeds[CELLS[0]])[-1] == f"{speeds[CELLS[0]].mfu:.4f}"


def test_a_cpu_prediction_has_none():
    speeds = speeds_for(load_profile("cpu"), load_workload("tiny"), CELLS[:1])
    assert speeds[CELLS[0]].tokens_per_s and speeds[CELLS[0]].mfu is None
    assert "MFU" not in _speed(speeds[CELLS[0]]) and _speed_cells(speeds[CELLS[0]])[-1] == ""
