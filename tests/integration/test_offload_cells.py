"""The offload backends on one rank, as on one GPU, through the real CLI, launchers, DeepSpeed and TRL: what the
engagement check sees when offload runs, and that it calls a cell whose offload was dropped a silent fallback."""

import os
import subprocess
import sys

import pytest

from bench.results.store import load_results

pytestmark = pytest.mark.integration

OFFLOADED = "one_adapter-nf4-zero3_offload_param+1rank"
ZERO2 = "two_models-none-zero2_offload+1rank"
DROPPED = "one_adapter-none-zero3_offload_param+1rank"


@pytest.fixture(scope="module")
def latest(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", "cpu", "--executor", "local"]
    env = os.environ | {"BENCH_FAULT": "drop_offload", "BENCH_FAULT_CELL": DROPPED}
    done = subprocess.run(
        [*argv, "--filter", f"{OFFLOADED},{ZERO2},{DROPPED}"], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (results / "cpu").iterdir()
    return load_results(run_dir).latest_by_cell()


def test_offload_on_one_rank_is_ok_and_its_engagement_names_it(latest):
    for cell_id in (OFFLOADED, ZERO2):
        record = latest[cell_id]
        assert (record.status, record.world_size) == ("ok", 1), record.message
        seen = record.engagement
        assert seen.world_size == 1 and seen.optimizer_offload == "cpu" and seen.optimizer == "DeepSpeedCPUAdam"
        assert seen.optimizer_state_devices == ["cpu"]
    assert latest[OFFLOADED].engagement.param_offload == "cpu" and latest[OFFLOADED].engagement.zero_stage == 3
    assert latest[ZERO2].engagement.param_offload is None and latest[ZERO2].engagement.zero_stage == 2


def test_a_cell_that_lost_its_offload_is_a_silent_fallback(latest):
    record = latest[DROPPED]
    assert record.status == "silent_fallback"
    assert record.mismatches == [
        "optimizer offload to cpu requested, engine reports None",
        "parameter offload to cpu requested, engine reports None",
    ]
    assert record.engagement.optimizer != "DeepSpeedCPUAdam"
