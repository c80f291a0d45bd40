"""`advise --export DIR`: for every applicable DPO cell the recipe is TRL's own settings (every dpo.yaml key a field
of TRL's ScriptArguments, DPOConfig or ModelConfig), built back by TRL into the LoRA and quantization configs the
worker builds, the DPOConfig keywords the worker's; the launcher line the cell's; a script where TRL's DPO script
cannot build the cell. What actually trains: tests/integration/test_advise_export.py."""

import dataclasses
import json
import py_compile
import subprocess

import pytest
import yaml

from bench.advise.command import native_files
from bench.advise.export import (
    CONFIG_FILE,
    DATASET_PLACEHOLDER,
    LAUNCH_FILE,
    README_FILE,
    SCRIPT_FILE,
    TRAINING_NOT_MEASURING,
    export_files,
    recipe_spec,
)
from bench.cli import main
from bench.matrix.profiles import gpu_profile, load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason, of_methods
from bench.worker.models import DTYPES, lora_config, quantization_config
from bench.worker.trainer_args import trainer_arguments

MODEL = "someone/some-model"


def _profiles():
    return [gpu_profile("A10:2", 1, "mistral-7b"), gpu_profile("H100:8", 1, "mistral-7b"), load_profile("cpu")]


def _cells(profile):
    return [c for c in of_methods(expand(load_matrix()), ["dpo"]) if not_applicable_reason(c, profile) is None]


@pytest.fixture(scope="module")
def trl_fields():
    from trl import DPOConfig, ModelConfig, ScriptArguments

    return {kind: {f.name for f in dataclasses.fields(kind)} for kind in (ScriptArguments, DPOConfig, ModelConfig)}


@pytest.mark.parametrize("profile", _profiles(), ids=lambda p: p.name)
def test_every_cells_recipe_is_trls_settings_and_the_workers(profile, trl_fields, tmp_path):
    from trl import ModelConfig, get_peft_config, get_quantization_config

    workload = load_workload("mistral-7b")
    scripts = 0
    for cell in _cells(profile):
        files = export_files(cell, profile, workload, MODEL, native_files(cell, profile))
        settings = yaml.safe_load(files[CONFIG_FILE])
        known = set().union(*trl_fields.values())
        assert set(settings) <= known, f"{cell.id}: not TRL fields: {set(settings) - known}"
        assert settings["dataset_name"] == DATASET_PLACEHOLDER and settings["model_name_or_path"] == MODEL
        spec = recipe_spec(cell, profile, workload, MODEL)
        ours = {k: v for k, v in trainer_arguments(spec).items() if v is not None and k not in TRAINING_NOT_MEASURING}
        assert {k: settings[k] for k in ours} == ours, cell.id
        model_args = ModelConfig(**{k: v for k, v in settings.items() if k in trl_fields[ModelConfig]})
        peft = get_peft_config(model_args)
        if spec.workload.lora and settings.get("use_peft"):
            worker = lora_config(spec)
            assert (peft.r, peft.lora_alpha, peft.lora_dropout, peft.target_modules, peft.task_type) == (
                worker.r, worker.lora_alpha, worker.lora_dropout, worker.target_modules, worker.task_type,
            ), cell.id  # fmt: skip
        else:
            assert peft is None and cell.init == "two_models", cell.id
        built = get_quantization_config(model_args)
        worker_quant = quantization_config(cell.quant, DTYPES[profile.precision], spec.recipe.settings)
        assert (built is None) == (worker_quant is None), cell.id
        if built is not None:
            for key in ("load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type", "bnb_4bit_quant_storage"):
                assert getattr(built, key) == getattr(worker_quant, key), (cell.id, key)
            assert built.bnb_4bit_compute_dtype == worker_quant.bnb_4bit_compute_dtype, cell.id
        launch = files[LAUNCH_FILE]
        if profile.device == "cuda" and cell.id == "one_adapter-none-single":  # TRL refuses a process seeing 2 GPUs
            assert "| cut -d, -f1-1)" in launch
        if cell.id == "one_adapter-none-ddp":
            assert "CUDA_VISIBLE_DEVICES" not in launch
        assert subprocess.run(["bash", "-n"], input=launch, text=True).returncode == 0
        command = launch.splitlines()[-1]
        module = "dpo_recipe" if SCRIPT_FILE in files else "trl.scripts.dpo"
        assert f" {module} --config {CONFIG_FILE} " in command and command.endswith('"$@"'), (cell.id, command)
        if cell.launcher == "accelerate":
            assert "--config_file accelerate.yaml" in command and "accelerate.yaml" in files
        if "deepspeed.json" in files:
            assert json.loads(files["deepspeed.json"])["zero_optimization"]["stage"] in (2, 3)
            through_accelerate = "accelerate.yaml" in files
            assert (settings.get("deepspeed") == "deepspeed.json") != through_accelerate, cell.id
        if SCRIPT_FILE in files:
            scripts += 1
            path = tmp_path / f"{cell.id}.py"
            path.write_text(files[SCRIPT_FILE])
            py_compile.compile(str(path), doraise=True)
            assert "runs instead of TRL's `trl dpo` because" in files[README_FILE]
        if cell.init == "two_adapters":
            assert SCRIPT_FILE in files, cell.id
    assert scripts > 0


def test_export_names_the_shipped_models_hub_id_and_labels_the_check(capsys, tmp_path):
    folder = tmp_path / "recipe"
    assert main(["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--export", str(folder)]) == 0
    out = capsys.readouterr()
    assert "a check of this setup on random weights and synthetic data (a few steps), not training your model" in (
        out.out
    )
    assert f"--export: wrote {CONFIG_FILE}" in out.err
    settings = yaml.safe_load((folder / CONFIG_FILE).read_text())
    assert settings["model_name_or_path"] == "Qwen/Qwen2.5-7B" and settings["max_length"] == 2048
    assert (folder / LAUNCH_FILE).stat().st_mode & 0o100 and (folder / README_FILE).is_file()


FLAG_KEYS = {"--batch-size": "per_device_train_batch_size", "--grad-accum": "gradient_accumulation_steps",
             "--max-length": "max_length"}  # fmt: skip


def test_export_of_a_fix_carries_the_fixs_settings(capsys, tmp_path):
    """Nothing fits as asked: the recipe is the best-ranked cell with its fix's settings applied."""
    from bench.advise.advice import Advice

    # ZeRO-3 with the parameters on the host: likely to fit (P(fit) 64 %), fits with batch 2 and 2x accumulation
    argv = ["advise", "--model", "llama-3.1-8b", "--gpu", "A10:1", "--max-length", "4096", "--batch-size", "4",
            "--init", "two_models", "--backend", "zero3_offload_param"]  # fmt: skip
    assert main([*argv, "--format", "json"]) == 0
    advice = Advice.model_validate_json(capsys.readouterr().out)
    assert advice.chosen is None and advice.run is not None and advice.run.change
    fix = next(c.fix for c in advice.cells if c.fix is not None)
    changed = {FLAG_KEYS[k]: int(v) for k, v in zip(fix.flags[::2], fix.flags[1::2], strict=True) if k in FLAG_KEYS}
    assert changed  # this point's fix is a settings change (batch 2 with 2x accumulation)
    assert main([*argv, "--export", str(tmp_path)]) == 0
    capsys.readouterr()
    settings = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())
    assert {k: settings[k] for k in changed} == changed
    readme = (tmp_path / README_FILE).read_text()
    assert advice.run.change in readme and f"`{advice.run.cell_id}`" in readme


def test_export_of_another_method_is_one_line(capsys, tmp_path):
    argv = ["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--method", "sft", "--export", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--export writes dpo recipes only" in err and "not --method sft" in err and "\n" not in err
    assert not list(tmp_path.iterdir())


def test_without_a_model_the_recipe_says_to_name_one(capsys, tmp_path):
    assert main(["advise", "--gpu", "A10:2", "--export", str(tmp_path)]) == 0
    capsys.readouterr()
    settings = yaml.safe_load((tmp_path / CONFIG_FILE).read_text())
    assert settings["model_name_or_path"] == "mistral-7b"
    for name in (CONFIG_FILE, README_FILE):
        assert "put the Hub id or the folder of your model there" in (tmp_path / name).read_text(), name
