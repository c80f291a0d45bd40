"""`run` applies the training-setting flags for real: one tiny two_models cell trained with `--attention eager
--precision pure-bf16` through the CLI, its launcher and TRL. The record is ok, env.json's training says what was
asked, and the engagement read back from the running trainer shows it engaged: the policy and the reference model
run eager attention, the trained weights are bf16, and no autocast runs."""

import json
import subprocess
import sys

import pytest

from bench.results.store import load_results

pytestmark = pytest.mark.integration

CELL = "two_models-none-single"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    flags = ["--attention", "eager", "--precision", "pure-bf16"]
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", "cpu", "--executor", "local"]
    done = subprocess.run([*argv, "--filter", CELL, *flags], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (found,) = (results / "cpu").iterdir()
    return found


def test_the_cell_trains_ok_with_the_settings_asked(run_dir):
    record = load_results(run_dir).latest_by_cell()[CELL]
    assert record.status == "ok", record.message
    training = json.loads((run_dir / "env.json").read_text())["training"]
    assert training["attention"] == "eager" and training["precision"] == "pure-bf16"


def test_the_settings_engaged_in_the_trainer(run_dir):
    seen = load_results(run_dir).latest_by_cell()[CELL].engagement
    assert (seen.attn_implementation, seen.ref_attn_implementation) == ("eager", "eager")
    assert seen.trainable_dtypes == ["torch.bfloat16"] and seen.mixed_precision == "no"
    assert seen.torch_compiled is False
