"""The SFT -> merge -> DPO -> merge -> generate pipeline and the rlhf one (SFT, a reward model, GRPO scored by it),
really run through the CLI: every stage a process with its own record; a stage that fails stops the chain. The tiny
workload runs in make test; small is opt-in (`pytest -m pipeline_small`, a few minutes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline.chain import DPO_PIPELINE, NEW_TOKENS, PIPELINES, load_stages

pytestmark = [pytest.mark.integration, pytest.mark.long]


def run_pipeline(
    results: Path, workload: str, env: dict[str, str] | None = None, pipeline: str = "dpo"
) -> tuple[int, list]:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "pipeline", "--hw", "cpu"]
    done = subprocess.run(
        [*argv, "--model", workload, "--run-id", "p", "--pipeline", pipeline],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ | (env or {}),
    )
    return done.returncode, load_stages(results / "cpu" / "pipelines" / "p")


def check_every_stage(stages: list) -> None:
    assert [s.stage for s in stages] == [s.name for s in DPO_PIPELINE.stages]
    assert all(s.status == "ok" for s in stages), [(s.stage, s.status, s.message) for s in stages]
    assert all(s.peak_bytes and s.wall_s for s in stages)
    sft, merge_sft, dpo, merge_dpo, generate = stages
    assert sft.record.engagement.trainer == "SFTTrainer" and dpo.record.engagement.trainer == "DPOTrainer"
    assert merge_sft.checks["adapter_effect"] > 0 and merge_sft.checks["merge_error"] <= merge_sft.checks["tolerance"]
    assert merge_dpo.checks["adapter_effect"] > 0
    assert generate.checks["new_tokens"] == NEW_TOKENS
    assert dpo.record.learning.first_loss == pytest.approx(0.6931, abs=1e-3)


def test_the_pipeline_runs_every_stage_on_tiny_and_a_failed_stage_stops_it(tmp_path):
    code, stages = run_pipeline(tmp_path / "ok", "tiny")
    assert code == 0
    check_every_stage(stages)

    # the DPO stage's rank SIGKILLs itself: its real error stops the chain, the merge and generation never start
    fault = {"BENCH_FAULT": "sigkill", "BENCH_FAULT_CELL": "one_adapter-none-single"}
    code, stages = run_pipeline(tmp_path / "killed", "tiny", fault)
    assert code == 1
    assert [s.status for s in stages] == ["ok", "ok", "error", "not_run", "not_run"]
    assert stages[2].error_class == "crash" and "SIGKILL" in stages[2].message
    assert stages[3].message.startswith("not run: stage 3 (dpo) ended error")


def test_the_rlhf_pipeline_scores_grpo_with_the_reward_model_it_trained(tmp_path):
    code, stages = run_pipeline(tmp_path, "tiny", pipeline="rlhf")
    assert code == 0, [(s.stage, s.status, s.message) for s in stages]
    assert [s.stage for s in stages] == [s.name for s in PIPELINES["rlhf"].stages]
    assert all(s.status == "ok" and s.peak_bytes and s.wall_s for s in stages)
    _, _, reward, merge_reward, grpo, _, generate = stages
    assert reward.record.engagement.trainer == "RewardTrainer" and grpo.record.engagement.trainer == "GRPOTrainer"
    assert merge_reward.checks["merge_error"] <= merge_reward.checks["tolerance"]
    written = [f for f in grpo.record.config_files if f.endswith("spec.json")]
    spec = json.loads((tmp_path / "cpu" / "pipelines" / "p" / written[0]).read_text())
    assert spec["reward_model"] == merge_reward.output
    # the trained head scores: a zero head (a matrix cell's reward model) gives exactly 0 to every completion
    parts = grpo.record.learning.reward_parts
    model_scores = parts[Path(merge_reward.output).name]
    assert set(parts) == {"target_token_share", Path(merge_reward.output).name}
    assert len(set(model_scores)) > 1 and all(score != 0 for score in model_scores)
    assert generate.checks["new_tokens"] == NEW_TOKENS


@pytest.mark.pipeline_small
def test_the_pipeline_runs_every_stage_on_small(tmp_path):
    code, stages = run_pipeline(tmp_path, "small")
    assert code == 0
    check_every_stage(stages)
