"""The memory budget and the learning check on real cells: a kernel OOM kill under the budgeted profile, a cell
that fits it, and the two faults that the learning check must catch (a wrong reference, a NaN loss)."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.isolation import cgroups
from bench.judge.learning import LN2
from bench.results.store import load_results

pytestmark = pytest.mark.integration


def run_cells(results: Path, hw: str, cells: str, env: dict[str, str] | None = None, *extra: str) -> dict:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", hw, "--executor", "local"]
    done = subprocess.run(
        [*argv, "--filter", cells, "--run-id", "r", *extra],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ | (env or {}),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return load_results(results / hw / "r").latest_by_cell()


def leftover_cgroups(mine: Path) -> list[Path]:
    """Cell cgroups left behind by this test: empty ones, or ones holding a process of this test's results folder
    (another run on the machine may have its own live cell cgroup)."""

    def pids(group: Path) -> list[str]:
        return [pid for procs in group.rglob("cgroup.procs") for pid in procs.read_text().split()]

    def ours(pid: str) -> bool:
        try:
            return str(mine) in (Path("/proc") / pid / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False

    groups = cgroups.locate(need_write=False).path.glob("dpo-bench-*")
    return sorted(g for g in groups if not pids(g) or any(ours(pid) for pid in pids(g)))


def test_the_budget_kills_two_full_models_and_fits_one_adapter(tmp_path):
    cells = "two_models-none-single,one_adapter-none-single"
    records = run_cells(tmp_path, "cpu-budget", cells, None, "--run-predicted-oom")
    oom, fits = records["two_models-none-single"], records["one_adapter-none-single"]
    budget = 0.75 * 2**30
    assert oom.status == "oom", oom.message
    assert oom.message.startswith("rank 0 was OOM-killed by the kernel at its memory budget of 0.75 GiB")
    (rank0,) = oom.rank_memory
    assert rank0.oom_killed and rank0.limit_bytes == budget and rank0.kernel_peak_bytes >= 0.95 * budget
    assert fits.status == "ok", fits.message
    m = fits.metrics
    assert m.peak_bytes < budget and m.model_memory_bytes == m.peak_bytes - m.baseline_bytes
    assert fits.rank_memory[0].baseline_rss_bytes > 0 and fits.rank_memory[0].peak_rss_bytes > m.baseline_bytes
    parts = fits.rank_memory[0].rss_parts  # RSS by what backs it, read with the baseline and each peak
    assert set(parts) == {"baseline", "loaded", "trained"}
    split = parts["baseline"].anon_bytes + parts["baseline"].page_cache_bytes
    assert abs(split - fits.rank_memory[0].baseline_rss_bytes) < 2**20
    assert parts["trained"].page_cache_bytes > parts["baseline"].page_cache_bytes  # library code first run in training
    assert fits.learning.first_loss == pytest.approx(LN2, abs=1e-3) and fits.learning.failures == []
    assert leftover_cgroups(tmp_path) == []


def test_a_cell_predicted_to_run_out_of_memory_is_skipped_and_then_forced(tmp_path):
    skipped = run_cells(tmp_path, "cpu-budget", "two_models-none-ddp")["two_models-none-ddp"]
    assert skipped.status == "predicted_oom" and skipped.wall_s is None and skipped.metrics is None
    assert skipped.prediction.verdict == "oom" and skipped.prediction.total_bytes > 0.75 * 2**30 * 1.2
    assert skipped.message.startswith("predicted to need") and "--run-predicted-oom" in skipped.message
    forced = run_cells(tmp_path, "cpu-budget", "two_models-none-ddp", None, "--run-predicted-oom")
    measured = forced["two_models-none-ddp"]
    assert measured.status == "oom" and measured.prediction == skipped.prediction, measured.message
    assert any(rank.oom_killed for rank in measured.rank_memory)


def test_a_wrong_reference_and_a_nan_loss_are_caught_by_the_learning_check(tmp_path):
    cells = "two_models-none-single,one_adapter-none-single"
    wrong = run_cells(tmp_path / "wrong", "cpu", cells, {"BENCH_FAULT": "wrong_reference"})
    for record in wrong.values():
        assert record.status == "learning_failed", (record.cell_id, record.message)
        assert "the reference is not the initial policy" in record.message
        assert abs(record.learning.first_loss - LN2) > 0.01
    nan = run_cells(tmp_path / "nan", "cpu", "one_adapter-none-ddp", {"BENCH_FAULT": "nan_loss@rank1:step4"})
    record = nan["one_adapter-none-ddp"]
    assert record.status == "learning_failed" and record.message.startswith("non-finite loss"), record.message
    assert record.learning.first_loss == pytest.approx(LN2, abs=1e-3)
    assert any(v is None or not math.isfinite(v) for v in record.learning.losses)


def test_healthy_cells_of_every_init_mode_pass_the_learning_check(tmp_path):
    cells = "two_models-none-single,one_adapter-nf4-ddp,two_adapters-int8-single"
    for record in run_cells(tmp_path, "cpu", cells).values():
        assert record.status == "ok", (record.cell_id, record.message)
        learning = record.learning
        assert learning.first_loss == pytest.approx(LN2, abs=1e-3)
        assert learning.end_loss < learning.first_loss - 0.03 and learning.reward_accuracy is not None
