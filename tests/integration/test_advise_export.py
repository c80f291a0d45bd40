"""`advise --export DIR` trains the real model: the tiny model and tokenizer saved to a folder the way a Hub checkpoint
is, exported for the CPU profile, the dataset placeholder replaced by a local JSONL folder of the method's rows, the
exported launch.sh run for a few steps; it saves the trained adapter. DPO through TRL's own DPO script (dpo.yaml) and
through the script written where TRL's cannot build the cell (two adapters); SFT through TRL's SFT script; KTO, a
reference method, through the exported training script with KTOTrainer (two adapters); SimPO, reference-free and without
a script of TRL's, through the exported training script with CPOTrainer and a LoRA peft_config."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.advise.launch_files import LAUNCH_FILE, config_file, dataset_placeholder, script_file
from bench.assets.method_data import FORMS
from bench.cli import main
from bench.matrix.axes import Method
from bench.matrix.methods import method_spec
from bench.paths import SCENARIOS_DIR

pytestmark = pytest.mark.integration
STEPS = 2


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """Per data form, a local folder of its rows (a train.jsonl), as a user would point dataset_name at: the tiny
    preference pairs, and the rows the other forms derive from them (bench/assets/method_data.py)."""
    source = SCENARIOS_DIR / "data" / "tiny_prefs" / "train.jsonl"
    pairs = [json.loads(line) for line in source.read_text().splitlines()]
    folders = {}
    for form, rows in {"pairs": pairs, **{name: derive(pairs) for name, derive in FORMS.items()}}.items():
        folder = tmp_path_factory.mktemp("data") / form
        folder.mkdir()
        (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        folders[form] = folder
    return folders


def _export(folder: Path, checkpoint: Path, method: Method, cell: str, capsys) -> None:
    """The CPU profile with a memory figure (`cpu` has none: nothing is predicted to fit), tiny's settings."""
    argv = ["advise", "--hw", "cpu-budget-4g", "--workload", "tiny", "--model", str(checkpoint), "--method", method,
            "--filter", cell, "--export", str(folder)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "random weights and synthetic data" in out and "--export" in out


def _train(folder: Path, method: Method, dataset: Path) -> subprocess.CompletedProcess:
    config = folder / config_file(method)
    config.write_text(config.read_text().replace(dataset_placeholder(method), str(dataset)))
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
    ("method", "cell", "script"),
    [
        (Method.DPO, "one_adapter-none-single", False),
        (Method.DPO, "two_adapters-none-single", True),
        (Method.SFT, "sft-one_adapter-none-single", False),
        (Method.KTO, "kto-two_adapters-none-single", True),
        (Method.SIMPO, "simpo-one_adapter-none-single", True),
    ],
)
def test_exported_launch_files_train_the_model(checkpoint, datasets, tmp_path, capsys, method, cell, script):
    folder = tmp_path / "launch"
    _export(folder, checkpoint, method, cell, capsys)
    settings = yaml.safe_load((folder / config_file(method)).read_text())
    placeholder = dataset_placeholder(method)
    assert settings["model_name_or_path"] == str(checkpoint) and settings["dataset_name"] == placeholder
    assert (folder / script_file(method)).exists() == script
    refused = subprocess.run(["bash", str(folder / LAUNCH_FILE)], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and placeholder in refused.stderr  # the placeholder stops it

    done = _train(folder, method, datasets[method_spec(method).data])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (folder / "output" / "adapter_model.safetensors").is_file(), sorted(os.listdir(folder / "output"))
