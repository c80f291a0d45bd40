"""The recipe `advise --export` writes for a card without bf16 (the T4) trains: fp32 weights (`dtype: float32`) under
fp16 autocast with a GradScaler (`fp16: true`). The tiny model's full DPO is exported for `--gpu T4:1` and run on the
CPU with the same files, `--use_cpu true` added. accelerate runs no fp16 autocast on a CPU (Accelerator: fp16 AMP
only where `device.type != "cpu"`), so a sitecustomize shim gives the CPU Accelerator what a GPU's has: native AMP
(torch.autocast("cpu", float16)) and torch.amp.GradScaler("cpu"); it records each unscale_, where fp16 weights fail.
What differs from the T4: the CPU's fp16 kernels, and no overflow-driven skipped steps at these tiny losses."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.advise.launch_files import LAUNCH_FILE, config_file, dataset_placeholder
from bench.cli import main
from bench.matrix.axes import Method
from bench.paths import SCENARIOS_DIR

pytestmark = pytest.mark.integration

SHIM = """
import os

import accelerate
import torch

_init = accelerate.Accelerator.__init__


def __init__(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.state.mixed_precision == "fp16" and self.device.type == "cpu":
        self.native_amp = True
        self.scaler = torch.amp.GradScaler("cpu")


_unscale = torch.amp.GradScaler.unscale_


def unscale_(self, optimizer):
    with open(os.environ["UNSCALED"], "a") as record:
        record.write(f"{self.get_scale()}\\n")
    return _unscale(self, optimizer)


accelerate.Accelerator.__init__ = __init__
torch.amp.GradScaler.unscale_ = unscale_
"""


def _run(folder: Path, shim: Path, *flags: str) -> subprocess.CompletedProcess:
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(shim),
        "UNSCALED": str(folder / "unscaled.txt"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "HF_DATASETS_CACHE": str(folder / "datasets-cache"),
    }
    argv = ["bash", str(folder / LAUNCH_FILE), "--max_steps", "2", "--use_cpu", "true", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd="/")


def test_the_t4_recipe_trains_fp32_weights_under_fp16_autocast(checkpoint, tmp_path, capsys):
    folder, shim, data = tmp_path / "launch", tmp_path / "shim", tmp_path / "data"
    argv = ["advise", "--gpu", "T4:1", "--workload", "tiny", "--model", str(checkpoint),
            "--filter", "two_models-none-single", "--export", str(folder)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    config = folder / config_file(Method.DPO)
    settings = yaml.safe_load(config.read_text())
    assert (settings["dtype"], settings["fp16"], settings["bf16"]) == ("float32", True, False)
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    data.mkdir()
    rows = (SCENARIOS_DIR / "data" / "tiny_prefs" / "train.jsonl").read_text()
    (data / "train.jsonl").write_text(rows)
    config.write_text(config.read_text().replace(dataset_placeholder(Method.DPO), str(data)))

    done = _run(folder, shim)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scales = (folder / "unscaled.txt").read_text().split()
    assert len(scales) == 2 and all(float(s) > 1 for s in scales)  # the GradScaler unscaled every step
    assert (folder / "output" / "model.safetensors").is_file()

    broken = _run(folder, shim, "--dtype", "float16")  # what the export wrote before: fp16 weights
    assert broken.returncode != 0 and "Attempting to unscale FP16 gradients" in broken.stderr
