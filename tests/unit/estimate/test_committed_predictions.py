"""What the estimator says about hardware nobody here has is pinned: the committed PREDICTED.md / predicted.csv of every
GPU profile are what the code writes today, byte for byte, and a few cells per GPU profile are held to their terms
(golden_predictions.json), so that a change to a GPU-only path (allocator slack, the phase that sets the step's
peak, bucket sizes) shows up as a named term in a failing test; a few cells of the budgeted CPU profile likewise.

After an intended change to the estimator:
    .venv/bin/python -m bench predict --hw all --write                      # (make predicted) the committed files
    .venv/bin/python -m tests.unit.estimate.test_committed_predictions      # rewrites golden_predictions.json
and review both diffs before committing them.
"""

import json
from pathlib import Path

import pytest

from bench.estimate.predict import load_calibration, predict_cell
from bench.estimate.prediction_tables import predicted_profiles, write_predicted
from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile, load_workload
from bench.results.tracked import tracked_results

GOLDEN = Path(__file__).with_name("golden_predictions.json")
GOLDEN_CELLS = (
    (
        Init.TWO_MODELS,
        Quant.NONE,
        Backend.SINGLE,
    ),  # full fine-tune: the end of backward (every gradient) may set the peak
    (Init.TWO_MODELS, Quant.NONE, Backend.ZERO2),  # ZeRO-2: the gradient partitions after backward
    (Init.TWO_MODELS, Quant.NONE, Backend.ZERO3),
    (Init.ONE_ADAPTER, Quant.NF4, Backend.SINGLE),  # adapters: the LM head's backward sets the peak
)
CPU_GOLDEN = "cpu-budget"
"""The budgeted CPU profile's paths (materialised attention scores, touched bucket pages, DeepSpeed's shared-memory
buffer, FSDP predicted as DDP, the measured process terms) with its fitted baselines: a refit rewrites these too."""
CPU_GOLDEN_CELLS = (
    (Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE),
    (Init.ONE_ADAPTER, Quant.NF4, Backend.FSDP),
    (Init.ONE_ADAPTER, Quant.NONE, Backend.ZERO2),
    (Init.TWO_ADAPTERS, Quant.INT8, Backend.ZERO3_OFFLOAD),
    (Init.TWO_MODELS, Quant.NONE, Backend.ZERO2),
    (Init.TWO_MODELS, Quant.NONE, Backend.DDP),
)
PINNED = (
    "verdict",
    "train_bytes",
    "load_bytes",
    "overhead_bytes",
    "total_bytes",
    "usable_bytes",
    "host_bytes",
    "host_terms",
    "terms",
)


def _cell(init: Init, quant: Quant, backend: Backend) -> Cell:
    return Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher)


def golden_now() -> dict[str, dict[str, dict]]:
    calibration = load_calibration()
    out: dict[str, dict[str, dict]] = {}
    for hardware in [*predicted_profiles(), CPU_GOLDEN]:
        profile = load_profile(hardware)
        workload = load_workload(profile.workload)
        for axes in CPU_GOLDEN_CELLS if hardware == CPU_GOLDEN else GOLDEN_CELLS:
            p = predict_cell(_cell(*axes), profile, workload, calibration)
            if p.status == "predicted":
                out.setdefault(hardware, {})[p.cell_id] = {k: getattr(p, k) for k in PINNED}
    return out


@pytest.fixture(scope="module")
def validation_line() -> str:
    # a module fixture, not functools.cache: see tests/unit/estimate/test_validate.py
    from bench.estimate.published import published_rows
    from bench.estimate.validate import validate, validation_line

    return validation_line(validate(tracked_results())[0], published_rows())


@pytest.mark.parametrize("hardware", predicted_profiles())
def test_committed_predicted_files_are_what_the_code_writes(hardware, tmp_path, validation_line):
    for written in write_predicted(hardware, tmp_path, validation_line):
        committed = tracked_results() / hardware / written.name
        assert committed.read_bytes() == written.read_bytes(), f"{committed} is stale: regenerate with `make predicted`"


def test_golden_predictions_hold_their_terms():
    golden = json.loads(GOLDEN.read_text())
    now = golden_now()
    assert set(now) == set(golden) and all(set(now[hw]) == set(golden[hw]) for hw in golden)
    for hardware, cells in golden.items():
        for cell_id, pinned in cells.items():
            got = now[hardware][cell_id]
            assert got["verdict"] == pinned["verdict"], (hardware, cell_id)
            for figure in PINNED[1:]:
                assert got[figure] == pytest.approx(pinned[figure], rel=1e-12), (hardware, cell_id, figure)


def test_every_gpu_profile_has_golden_cells_on_each_side_of_the_phase_choice():
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == {*predicted_profiles(), CPU_GOLDEN}
    phases = {
        "head" if "lm_head_backward" in p["terms"] else "end_of_backward"
        for cells in golden.values()
        for p in cells.values()
    }
    assert phases == {"head", "end_of_backward"}
    assert any("zero2_end_of_backward" in p["terms"] for cells in golden.values() for p in cells.values())
    assert any("gradients" in p["terms"] for cells in golden.values() for p in cells.values())


def test_gpu_total_is_the_nvidia_smi_figure_of_its_derived_terms():
    # reserved = allocated + the allocator's overhead, and the total held against the card adds the CUDA context, the
    # training step's kernel images (the one GPU figure measured by this project: bench/estimate/gpu_terms.py) and
    # NCCL's buffers
    from bench.estimate import gpu_terms

    p = predict_cell(
        _cell(Init.ONE_ADAPTER, Quant.NONE, Backend.SINGLE), load_profile("1xH100"), load_workload("llama-3.2-1b")
    )
    gpu = gpu_terms.gpu_named("H100-SXM")
    assert p.reserved_bytes > p.train_bytes and p.terms["cublas_workspaces"] == gpu_terms.cublas_workspaces(gpu)
    assert p.total_bytes == pytest.approx(
        p.reserved_bytes
        + gpu_terms.cuda_context(gpu)
        + gpu_terms.training_kernels(gpu)
        + gpu_terms.nccl_buffers(gpu, 1)
    )
    assert p.overhead_bytes == pytest.approx(p.total_bytes - p.train_bytes)


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(golden_now(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"written: {GOLDEN}")
