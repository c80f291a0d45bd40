"""`weights: pretrained` from a local folder: the tiny model and tokenizer saved to a folder the way a hub
checkpoint is, a workload pointing at it, one single-process cell trained through the CLI."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.paths import SCENARIOS_DIR
from bench.results.store import load_results

pytestmark = pytest.mark.integration
CELL = "one_adapter-none-single"


def test_pretrained_from_local_folder_trains(checkpoint: Path, tmp_path: Path):
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios, ignore=shutil.ignore_patterns("data"))
    (scenarios / "data").symlink_to(SCENARIOS_DIR / "data")  # the workload's dataset is read from --scenarios
    workload = yaml.safe_load((SCENARIOS_DIR / "workloads" / "tiny.yaml").read_text())
    workload["name"] = "tiny_pretrained"
    workload["model"] = {"weights": "pretrained", "source": str(checkpoint)}
    workload["tokenizer"] = {"kind": "pretrained", "source": str(checkpoint)}
    (scenarios / "workloads" / "tiny_pretrained.yaml").write_text(yaml.safe_dump(workload))

    results = tmp_path / "results"
    top = [sys.executable, "-m", "bench", "--scenarios", str(scenarios), "--results", str(results)]
    done = subprocess.run(
        [*top, "run", "--hw", "cpu", "--workload", "tiny_pretrained", "--filter", CELL, "--executor", "local"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (results / "cpu").iterdir()
    record = load_results(run_dir).latest_by_cell()[CELL]
    assert (record.status, record.workload) == ("ok", "tiny_pretrained"), record.message
    assert record.metrics.tokens_per_s > 0 and record.metrics.steps == workload["train"]["steps"]
    spec = json.loads((run_dir / "configs" / CELL / "spec.json").read_text())
    assert spec["assets"]["model"] == spec["assets"]["tokenizer"] == str(checkpoint)
