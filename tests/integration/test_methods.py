"""Every training method really trains on the tiny workload through the CLI, and each method's learning check
fails on the fault it is for: a reward head that outputs a constant, an SFT learning rate of 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.judge.learning import LN2
from bench.results.store import load_results

pytestmark = pytest.mark.integration

METHOD_CELLS = {
    "sft-one_adapter-none-single": "SFTTrainer",
    "reward-one_adapter-none-single": "RewardTrainer",
    "kto-two_adapters-none-ddp": "KTOTrainer",
    "orpo-one_adapter-none-single": "ORPOTrainer",
    "simpo-one_adapter-none-single": "CPOTrainer",
}


def run_method_cells(results: Path, cells: str, env: dict[str, str] | None = None) -> dict:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", "cpu", "--executor", "local"]
    done = subprocess.run(
        [*argv, "--method", "all", "--filter", cells, "--run-id", "r"],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ | (env or {}),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return load_results(results / "cpu" / "r").latest_by_cell()


def test_every_method_trains_with_its_own_trainer_and_passes_its_check(tmp_path):
    records = run_method_cells(tmp_path, ",".join(METHOD_CELLS))
    for cell_id, trainer in METHOD_CELLS.items():
        record = records[cell_id]
        assert record.status == "ok", (cell_id, record.message)
        assert record.engagement.trainer == trainer and record.method == cell_id.split("-")[0]
        assert record.metrics.tokens_total > 0 and record.learning.failures == []
    assert records["kto-two_adapters-none-ddp"].learning.first_loss == pytest.approx(0.5, abs=1e-3)
    reward = records["reward-one_adapter-none-single"].learning
    assert reward.first_loss == pytest.approx(LN2, abs=1e-3) and reward.pair_accuracy > 0.6
    assert reward.pairs_evaluated == 128
    for cell_id in ("sft-one_adapter-none-single", "orpo-one_adapter-none-single", "simpo-one_adapter-none-single"):
        learning = records[cell_id].learning
        assert learning.end_loss < learning.start_loss - 0.03, cell_id


def test_a_constant_reward_head_and_an_sft_learning_rate_of_zero_fail_the_learning_check(tmp_path):
    reward = "reward-one_adapter-none-single"
    constant = run_method_cells(tmp_path / "constant", reward, {"BENCH_FAULT": "constant_reward_head"})[reward]
    assert constant.status == "learning_failed", constant.message
    assert constant.learning.pair_accuracy == 0.0 and "did not learn to rank chosen over rejected" in constant.message
    assert constant.learning.losses == pytest.approx([LN2] * len(constant.learning.losses), abs=1e-6)

    sft = "sft-one_adapter-none-single"
    frozen = run_method_cells(tmp_path / "frozen", sft, {"BENCH_FAULT": "zero_learning_rate"})[sft]
    assert frozen.status == "learning_failed" and frozen.message.startswith("loss did not fall"), frozen.message
    assert abs(frozen.learning.end_loss - frozen.learning.start_loss) < 0.03


SYNTHETIC_CELLS = ("one_adapter-none-single", "two_models-none-single", *METHOD_CELLS)


def test_the_gpu_workloads_synthetic_preferences_are_learned_by_every_method(tmp_path):
    """tiny-synthetic: a Llama-3-shaped config at CPU size, random weights, and the synthetic generator every GPU
    workload uses. Each method's learning check passes on it (with chosen and rejected drawn alike, DPO's loss stays
    at ln 2 and every GPU cell would read learning_failed)."""
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu", "--executor", "local"]
    argv += ["--workload", "tiny-synthetic", "--method", "all", "--filter", ",".join(SYNTHETIC_CELLS)]
    done = subprocess.run([*argv, "--run-id", "s"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = load_results(tmp_path / "cpu" / "s").latest_by_cell()
    assert sorted(records) == sorted(SYNTHETIC_CELLS)
    for cell_id, record in records.items():
        assert record.status == "ok" and record.workload == "tiny-synthetic", (cell_id, record.message)
    dpo = records["one_adapter-none-single"].learning
    assert dpo.first_loss == pytest.approx(LN2, abs=1e-3) and dpo.end_loss < LN2 - 0.1


ONLINE_CELLS = {"grpo-two_models-none-single": "GRPOTrainer", "rloo-one_adapter-none-single": "RLOOTrainer"}


def test_the_online_methods_raise_their_rule_reward_and_a_learning_rate_of_zero_does_not(tmp_path):
    records = run_method_cells(tmp_path / "online", ",".join(ONLINE_CELLS))
    for cell_id, trainer in ONLINE_CELLS.items():
        record = records[cell_id]
        assert record.status == "ok", (cell_id, record.message)
        assert record.engagement.trainer == trainer and record.metrics.tokens_total > 0
        assert len(record.learning.rewards) == record.metrics.steps
    assert records["grpo-two_models-none-single"].engagement.ref_model is not None  # TRL loads it for beta > 0
    grpo = "grpo-two_models-none-single"
    frozen = run_method_cells(tmp_path / "frozen", grpo, {"BENCH_FAULT": "zero_learning_rate"})[grpo]
    assert frozen.status == "learning_failed" and frozen.message.startswith("reward did not rise"), frozen.message
