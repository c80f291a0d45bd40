"""`advise --export DIR` trains the real model: the tiny model and tokenizer saved to a folder the way a Hub checkpoint
is, exported for the CPU profile, the dataset placeholder replaced by a local JSONL folder, the exported launch.sh
run for a few steps; it saves the trained adapter. Once through TRL's own DPO script (dpo.yaml), once through the
script written where TRL's cannot build the cell (two adapters)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.advise.export import CONFIG_FILE, DATASET_PLACEHOLDER, LAUNCH_FILE, SCRIPT_FILE
from bench.cli import main
from bench.paths import SCENARIOS_DIR

pytestmark = pytest.mark.integration
STEPS = 2


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A local folder of prompt/chosen/rejected rows, as a user would point dataset_name at."""
    folder = tmp_path_factory.mktemp("data") / "prefs"
    shutil.copytree(SCENARIOS_DIR / "data" / "tiny_prefs", folder)
    return folder


def _export(folder: Path, checkpoint: Path, cell: str, capsys) -> None:
    """The CPU profile with a memory figure (`cpu` has none: nothing is predicted to fit), tiny's settings."""
    argv = ["advise", "--hw", "cpu-budget-4g", "--workload", "tiny", "--model", str(checkpoint), "--filter", cell,
            "--export", str(folder)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "random weights and synthetic data" in out and "--export" in out


def _train(folder: Path, dataset: Path) -> subprocess.CompletedProcess:
    config = folder / CONFIG_FILE
    config.write_text(config.read_text().replace(DATASET_PLACEHOLDER, str(dataset)))
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # `python` is this interpreter
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "HF_DATASETS_CACHE": str(folder / "datasets-cache"),
    }
    return subprocess.run(
        ["bash", str(folder / LAUNCH_FILE), "--max_steps", str(STEPS)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd="/",
    )


@pytest.mark.parametrize(
    ("cell", "script"),
    [("one_adapter-none-single", False), ("two_adapters-none-single", True)],
)
def test_exported_recipe_trains_the_model(checkpoint, dataset, tmp_path, capsys, cell, script):
    folder = tmp_path / "recipe"
    _export(folder, checkpoint, cell, capsys)
    settings = yaml.safe_load((folder / CONFIG_FILE).read_text())
    assert settings["model_name_or_path"] == str(checkpoint) and settings["dataset_name"] == DATASET_PLACEHOLDER
    assert (folder / SCRIPT_FILE).exists() == script
    refused = subprocess.run(["bash", str(folder / LAUNCH_FILE)], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and DATASET_PLACEHOLDER in refused.stderr  # the placeholder stops it

    done = _train(folder, dataset)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (folder / "output" / "adapter_model.safetensors").is_file(), sorted(os.listdir(folder / "output"))
