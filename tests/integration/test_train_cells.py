"""Really trains a subset of cells through the CLI, real launchers and TRL, covering every init mode,
every quantization and every backend the CPU profile can run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.assets.prepare import prepare
from bench.isolation.shm_segments import PREFIX, SHM_DIR
from bench.judge.wall_split import start_up_s
from bench.matrix.profiles import load_workload
from bench.results.store import load_results

pytestmark = pytest.mark.integration

CELLS = {
    "two_models-none-single": "ok",
    "one_adapter-int8-ddp": "ok",
    "two_adapters-nf4-zero2": "ok",
    "two_models-none-zero3": "ok",
    "one_adapter-none-ddp+mpirun": "ok",
    # accelerate's FSDP on CPU trains, but as plain DDP: the suite must say so.
    "one_adapter-none-fsdp": "silent_fallback",
    # one device: device_map is impossible by rule, recorded without running.
    "one_adapter-none-device_map": "not_applicable",
}


def bench(*args: str, results: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--results", str(results), *args],
        capture_output=True,
        text=True,
        timeout=900,
    )


def deepspeed_segments() -> set[str]:
    return {p.name for p in SHM_DIR.glob(f"{PREFIX}_{os.getuid()}_*")} if SHM_DIR.is_dir() else set()


@pytest.fixture(scope="module")
def shm_before() -> set[str]:
    return deepspeed_segments()


@pytest.fixture(scope="module")
def run(tmp_path_factory, shm_before):
    results = tmp_path_factory.mktemp("results")
    done = bench("run", "--hw", "cpu", "--executor", "local", "--filter", ",".join(CELLS), results=results)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (results / "cpu").iterdir()
    return run_dir, done.stdout


def test_statuses(run):
    run_dir, _ = run
    latest = load_results(run_dir).latest_by_cell()
    assert {cell: latest[cell].status for cell in CELLS} == CELLS, {c: latest[c].message for c in CELLS}


def test_engagement_shows_what_really_ran(run):
    latest = load_results(run[0]).latest_by_cell()
    ddp = latest["one_adapter-int8-ddp"].engagement
    assert ddp.world_size == 2 and ddp.wrapper == "DistributedDataParallel" and ddp.quantized_layers["Linear8bitLt"]
    zero2 = latest["two_adapters-nf4-zero2"].engagement
    assert zero2.zero_stage == 2 and zero2.wrapper == "DeepSpeedEngine" and zero2.adapters == ["default", "ref"]
    assert zero2.quantized_layers["Linear4bit"] > 0
    zero3 = latest["two_models-none-zero3"].engagement
    assert zero3.zero_stage == 3 and zero3.partitioned_params and zero3.ref_model is not None
    fsdp = latest["one_adapter-none-fsdp"]
    assert fsdp.engagement.fsdp_modules == 0 and "expected distributed type FSDP" in fsdp.message
    mpi = latest["one_adapter-none-ddp+mpirun"].engagement
    assert mpi.world_size == 2 and mpi.wrapper == "DistributedDataParallel"


def test_metrics_are_sane(run):
    model_bytes = (Path(prepare(load_workload("tiny")).model) / "model.safetensors").stat().st_size
    for cell, status in CELLS.items():
        record = load_results(run[0]).latest_by_cell()[cell]
        if status in ("ok", "silent_fallback"):
            m = record.metrics
            assert m.tokens_per_s > 0 and m.pairs_per_s > 0 and m.steps == 30
            assert m.step_time_p90_s >= m.step_time_median_s > 0
            assert m.train_peak_bytes > model_bytes and m.load_peak_bytes > model_bytes
            assert record.wall_s > 0 and m.load_s > 0


def test_every_trained_cell_splits_its_wall_by_its_ranks_phases(run):
    latest = load_results(run[0]).latest_by_cell()
    for cell, status in CELLS.items():
        if status in ("ok", "silent_fallback"):
            phases = latest[cell].phases
            assert {"launch", "interpreter", "imports", "model", "trainer", "prepare", "steps", "exit"} <= set(phases)
            # a process start is known to a clock tick (10 ms): a launch that quick may come out a tick early
            assert all(seconds > -0.02 for name, seconds in phases.items() if name != "unaccounted"), (cell, phases)
            assert abs(phases["unaccounted"]) < 0.1 * start_up_s(phases), (cell, phases)


def test_configs_and_env_are_kept_next_to_results(run):
    run_dir, _ = run
    env = json.loads((run_dir / "env.json").read_text())
    assert env["packages"]["trl"] == "1.16.0" and env["hardware_profile"] == "cpu"
    record = load_results(run_dir).latest_by_cell()["two_adapters-nf4-zero2"]
    assert "configs/two_adapters-nf4-zero2/deepspeed.json" in record.config_files
    assert json.loads((run_dir / "configs/two_adapters-nf4-zero2/deepspeed.json").read_text())["zero_optimization"]


def test_rerun_resumes_without_repeating(run):
    run_dir, _ = run
    before = len(load_results(run_dir).records)
    done = bench(
        "run",
        "--hw",
        "cpu",
        "--executor",
        "local",
        "--filter",
        ",".join(CELLS),
        "--run-id",
        run_dir.name,
        results=run_dir.parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert "0 cell(s) to run, 6 already recorded, 1 not applicable" in done.stdout
    assert len(load_results(run_dir).records) == before


def test_deepspeed_cells_leave_no_shared_memory_behind(run, shm_before):
    assert deepspeed_segments() - shm_before == set()


def test_every_trial_computes_its_reference_log_probs(tmp_path):
    """TRL caches precomputed reference log-probs next to the dataset, keyed by the (seeded, identical) model: a
    second trial loading the shared asset folder would skip the reference pass and time something else."""
    dataset = Path(prepare(load_workload("tiny")).dataset)
    before = {p.name for p in dataset.iterdir()}
    cell = "one_adapter-none-single+precompute_ref"
    argv = ["run", "--hw", "cpu", "--executor", "local", "--filter", cell, "--repeats", "2"]
    done = bench(*argv, results=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (tmp_path / "cpu").iterdir()
    assert [r.status for r in load_results(run_dir).records] == ["ok", "ok"]
    for log in (f"{cell}.log", f"{cell}.trial1.log"):
        assert "Computing reference log probs for train dataset: 100%" in (run_dir / "logs" / log).read_text()
    assert {p.name for p in dataset.iterdir()} == before
    assert not (run_dir / "cells" / cell / "dataset").exists()
