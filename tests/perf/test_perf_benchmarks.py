"""pytest-benchmark tests of the suite itself: `make perf` (`pytest tests/perf --benchmark-enable`).

- harness overhead: what the runner does around a cell that is not the cell (plan + write its files, build its
  record from the rank reports, load a run's records), and the only suite code inside a cell's timed steps: the
  step recorder's callbacks (37 us a step on the AMD EPYC of 2026-11-28, 0.09 % of tiny's 40 ms CPU step);
- per-cell fixed cost: a fresh interpreter importing TRL's DPOTrainer, which every rank of every cell pays;
- estimator speed: `predict_cell` for every cell of each GPU profile, and the whole matrix for every profile.

`make test` does not run this folder (`--ignore=tests/perf`); pyproject's addopts has `--benchmark-disable`, so a
plain `pytest tests/perf` runs each body once as a smoke test, and `--benchmark-enable` times them.
`pytest-benchmark compare` works on the saved runs (`make perf` autosaves under .benchmarks/).
"""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.assets.prepare import PreparedAssets
from bench.estimate.predict import load_calibration, predict_cell
from bench.executors.base import Outcome
from bench.isolation import step_marks
from bench.judge.record import Execution, Expectation, RunFacts, finished_record
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix
from bench.paths import RESULTS_DIR, SCENARIOS_DIR
from bench.results.schema import Engagement
from bench.results.store import load_results
from bench.run.launch import plan_launch, write_files
from bench.worker.measure import StepRecorder
from bench.worker.rank_report import RankReport
from bench.worker.spec import WorkerSpec

pytestmark = pytest.mark.perf

PROFILES = sorted(p.stem for p in (SCENARIOS_DIR / "hardware").glob("*.yaml"))
GPU_PROFILES = [name for name in PROFILES if load_profile(name).device == "cuda"]
STEPS, WARMUP = 30, 5


def test_harness_plan_and_write_files(benchmark, tmp_path):
    """Plan a DeepSpeed cell through accelerate (the most files: accelerate + DeepSpeed config + worker spec) and
    write its files."""
    profile = load_profile("cpu")
    spec = WorkerSpec.from_plan(
        plan_for(
            Cell(init="one_adapter", quant="none", backend="zero2", launcher="accelerate"),
            profile,
            load_workload(profile.workload),
        ),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        str(tmp_path / "out"),
    )

    def plan_and_write():
        plan = plan_launch(spec, tmp_path / "configs", port=29555)
        write_files(plan, tmp_path)
        return plan

    plan = benchmark(plan_and_write)
    assert plan.files and all(path.is_file() for path in plan.files)


def _report(rank: int) -> RankReport:
    ends = [1.0 + 0.05 * i for i in range(STEPS)]
    return RankReport(
        rank=rank,
        pid=100 + rank,
        hostname="h",
        load_s=1.0,
        train_start=0.9,
        step_ends=ends,
        cpu_times=[0.5 + 0.04 * i for i in range(STEPS)],
        tokens=[250 * (i + 1) for i in range(STEPS)],
        memory_now=[400 * 2**20 + i for i in range(STEPS)],
        load_peak_bytes=350 * 2**20,
        train_peak_bytes=420 * 2**20,
        baseline_rss_bytes=300 * 2**20,
        losses=[0.6931472 - 0.01 * i for i in range(STEPS)],
        reward_accuracies=[0.5] * STEPS,
        engagement=Engagement(
            world_size=2,
            distributed_type="MULTI_CPU",
            wrapper="DistributedDataParallel",
            adapters=["default"],
            trainer="DPOTrainer",
        ),
    )


def test_harness_record_building(benchmark):
    """A two-rank cell's record from its rank reports: metrics, learning check, engagement, classification."""
    cell = Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
    expect = Expectation(world_size=2, warmup_steps=WARMUP, steps=STEPS, pairs_per_step=4)
    ran = Execution(
        Outcome(exit_code=0, timed_out=False, wall_s=20.0, log_tail=""), [_report(0), _report(1)], [], "a", "b"
    )
    record = benchmark(finished_record, RunFacts("perf", "cpu", "tiny", "local"), cell, expect, ran)
    assert record.status == "ok", record.message
    assert record.metrics is not None and record.metrics.cpu_s_per_step_median == pytest.approx(0.04)


def test_harness_step_callbacks(benchmark, tmp_path):
    """What the worker adds to every training step: the recorder's step-begin and step-end callbacks (clock, CPU
    time, token count, memory read, the trainer's metrics, the progress marks)."""
    recorder = StepRecorder(None)
    recorder.trainer = SimpleNamespace(_total_train_tokens=512, _metrics={"train": {"rewards/accuracies": [0.5]}})
    recorder.progress = step_marks.StepMarks(tmp_path, 0)
    state = SimpleNamespace(num_input_tokens_seen=0)

    def one_step() -> None:
        recorder.on_step_begin(None, state, None)
        recorder.on_step_end(None, state, None)

    benchmark(one_step)
    recorder.progress.end()
    assert recorder.tokens[-1] == 512 and recorder.memory_now[-1] > 0


def test_harness_load_results(benchmark):
    """Read and validate every line of the largest committed CPU run."""
    runs = sorted(RESULTS_DIR.glob("cpu*/*/results.jsonl"), key=lambda p: p.stat().st_size)
    if not runs:
        pytest.skip("no committed run under results/cpu*/")
    loaded = benchmark(load_results, runs[-1])
    assert loaded.records and not loaded.problems


def test_cell_fixed_cost_trl_import(benchmark):
    """A fresh interpreter importing DPOTrainer: paid by every rank of every cell before anything else."""
    argv = [sys.executable, "-c", "from trl import DPOTrainer"]
    done = benchmark.pedantic(subprocess.run, args=(argv,), kwargs={"check": True}, rounds=3, iterations=1)
    assert done.returncode == 0


def test_cell_fixed_cost_interpreter_start(benchmark):
    """The floor under the import: a fresh interpreter that does nothing."""
    argv = [sys.executable, "-c", "pass"]
    benchmark.pedantic(subprocess.run, args=(argv,), kwargs={"check": True}, rounds=5, iterations=1)


@pytest.mark.parametrize("hardware", GPU_PROFILES)
def test_estimator_predict_cell_every_cell(benchmark, hardware):
    """predict_cell for every cell of the matrix on one GPU profile, with its default workload."""
    profile = load_profile(hardware)
    workload = load_workload(profile.workload)
    cells = expand(load_matrix())
    calibration = load_calibration()

    predictions = benchmark(lambda: [predict_cell(c, profile, workload, calibration) for c in cells])
    assert len(predictions) == len(cells)


def test_estimator_whole_matrix_all_profiles(benchmark):
    """The whole matrix for every profile, loading included (what `make predict` does per profile)."""
    from bench.estimate.prediction_tables import predict_matrix

    def everything():
        return {name: predict_matrix(name) for name in PROFILES}

    result = benchmark.pedantic(everything, rounds=3, iterations=1)
    assert set(result) == set(PROFILES) and all(result.values())


def test_perf_folder_is_not_part_of_make_test():
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text(encoding="utf-8")
    assert '-m pytest tests -m "not docker" --ignore=tests/perf' in makefile
    assert "-m pytest tests/perf --benchmark-enable" in makefile
