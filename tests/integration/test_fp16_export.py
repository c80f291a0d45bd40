"""The recipe `advise --export` writes for a card without bf16 (the T4) trains: fp32 weights (`dtype: float32`) under
fp16 autocast with a GradScaler (`fp16: true`). The tiny model's full DPO is exported for `--gpu T4:1` and run on the
CPU with the same files, `--use_cpu true` added. accelerate runs no fp16 autocast on a CPU (Accelerator: fp16 AMP
only where `device.type != "cpu"`), so a sitecustomize shim gives the CPU Accelerator what a GPU's has: native AMP
(torch.autocast("cpu", float16)) and torch.amp.GradScaler("cpu"); it records each unscale_, where fp16 weights fail.
What differs from the T4: the CPU's fp16 kernels, and no overflow-driven skipped steps at these tiny losses. The
T4's QLoRA recipe (nf4, bitsandbytes' CPU kernels) is exported and trained the same way."""

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


def _exported(checkpoint: Path, tmp_path: Path, cell: str) -> tuple[Path, Path, dict]:
    """`advise --export` of `cell` for one T4, its dataset placeholder filled with the tiny preference rows and the
    shim beside it: (the launch folder, the shim folder, the exported training config)."""
    folder, shim, data = tmp_path / "launch", tmp_path / "shim", tmp_path / "data"
    argv = ["advise", "--gpu", "T4:1", "--workload", "tiny", "--model", str(checkpoint),
            "--filter", cell, "--export", str(folder)]  # fmt: skip
    assert main(argv) == 0
    config = folder / config_file(Method.DPO)
    settings = yaml.safe_load(config.read_text())
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    data.mkdir()
    rows = (SCENARIOS_DIR / "data" / "tiny_prefs" / "train.jsonl").read_text()
    (data / "train.jsonl").write_text(rows)
    config.write_text(config.read_text().replace(dataset_placeholder(Method.DPO), str(data)))
    return folder, shim, settings


def test_the_t4_recipe_trains_fp32_weights_under_fp16_autocast(checkpoint, tmp_path, capsys):
    folder, shim, settings = _exported(checkpoint, tmp_path, "two_models-none-single")
    capsys.readouterr()
    assert (settings["dtype"], settings["fp16"], settings["bf16"]) == ("float32", True, False)

    done = _run(folder, shim)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scales = (folder / "unscaled.txt").read_text().split()
    assert len(scales) == 2 and all(float(s) > 1 for s in scales)  # the GradScaler unscaled every step
    assert (folder / "output" / "model.safetensors").is_file()

    broken = _run(folder, shim, "--dtype", "float16")  # what the export wrote before: fp16 weights
    assert broken.returncode != 0 and "Attempting to unscale FP16 gradients" in broken.stderr


def test_the_t4_qlora_recipe_computes_in_fp16_and_trains(checkpoint, tmp_path, capsys):
    """The T4's QLoRA recipe: nf4 weights whose compute dtype (TRL's `get_quantization_config` takes `dtype`) is
    fp16, fp16 autocast, no bf16 anywhere; trained two steps on the CPU as the full recipe above is, the LoRA
    weights (peft's `autocast_adapter_dtype`: fp32) unscaled by the GradScaler every step."""
    import torch
    from transformers import HfArgumentParser
    from trl import ModelConfig, get_quantization_config

    folder, shim, settings = _exported(checkpoint, tmp_path, "one_adapter-nf4-single")
    capsys.readouterr()
    assert (settings["dtype"], settings["fp16"], settings["bf16"]) == ("float16", True, False)
    assert (settings["load_in_4bit"], settings["bnb_4bit_quant_type"], settings["use_peft"]) == (True, "nf4", True)
    (model_args,) = HfArgumentParser(ModelConfig).parse_dict(settings, allow_extra_keys=True)
    quantization = get_quantization_config(model_args)
    assert quantization.bnb_4bit_compute_dtype == torch.float16
    assert "bfloat16" not in (folder / config_file(Method.DPO)).read_text()
    script = folder / "dpo_train.py"  # the recipe places the model on the process's GPU; here, the CPU
    exported = script.read_text()
    assert "DEVICE_MAP = 'local_rank'" in exported
    script.write_text(exported.replace("DEVICE_MAP = 'local_rank'", "DEVICE_MAP = {'': 'cpu'}"))

    done = _run(folder, shim)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scales = (folder / "unscaled.txt").read_text().split()
    assert len(scales) == 2 and all(float(s) > 1 for s in scales)
    assert (folder / "output" / "adapter_model.safetensors").is_file()
