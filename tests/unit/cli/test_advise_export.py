"""`advise --export DIR`: for every applicable cell of every offline method the launch files are TRL's own settings
(every `<method>.yaml` key a field of TRL's ScriptArguments, the method's config class or ModelConfig), built back by
TRL into the LoRA and quantization configs the worker builds, the config keywords the method's trainer module builds its
trainer with; the launcher line the cell's; a script where TRL ships none for the method or its script cannot build the
cell. What actually trains: tests/integration/test_advise_export.py."""

import dataclasses
import importlib
import json
import py_compile
import subprocess

import pytest
import yaml

from bench.advise import launch_files
from bench.advise.command import native_files
from bench.advise.launch_files import (
    EXPORT_METHODS,
    LAUNCH_FILE,
    README_FILE,
    TRAINING_NOT_MEASURING,
    config_file,
    dataset_placeholder,
    export_files,
    launch_spec,
    script_file,
    script_module,
)
from bench.cli import main
from bench.matrix.axes import Method
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.plan import plan_for
from bench.matrix.profiles import gpu_profile, load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason, of_methods
from bench.worker.models import lora_config, quantization_config, torch_dtype
from bench.worker.trainers import model_class, trainer_module

MODEL = "someone/some-model"
DPO = Method.DPO


def _profiles():
    return [gpu_profile("A10:2", 1, "mistral-7b"), gpu_profile("H100:8", 1, "mistral-7b"), load_profile("cpu")]


def _cells(profile, method):
    return [
        c
        for c in of_methods(expand(load_matrix()), [method])
        if not_applicable_reason(CellOnProfile(c, profile)) is None
    ]


def _class(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _fields(*kinds) -> set[str]:
    return {f.name for kind in kinds for f in dataclasses.fields(kind)}


@pytest.mark.parametrize("method", EXPORT_METHODS)
def test_trls_script_of_a_method_reads_its_config_class(method):
    """The training script the launch files run for the method parses the method's config (TRL's `make_parser`)."""
    spec = method_spec(method)
    if spec.trl_script is None:
        assert spec.experimental, method  # TRL ships scripts for its stable trainers
        return
    parser = importlib.import_module(spec.trl_script).make_parser()
    assert _class(spec.config) in parser.dataclass_types, method


@pytest.mark.parametrize("method", EXPORT_METHODS)
@pytest.mark.parametrize("profile", _profiles(), ids=lambda p: p.name)
def test_every_cells_launch_files_are_trls_settings_and_the_workers(profile, method, tmp_path):
    from trl import ModelConfig, ScriptArguments, get_peft_config, get_quantization_config

    workload = load_workload("mistral-7b")
    known, model_fields = (
        _fields(ScriptArguments, _class(method_spec(method).config), ModelConfig),
        _fields(ModelConfig),
    )
    config, script, trl_script = config_file(method), script_file(method), method_spec(method).trl_script
    cells = _cells(profile, method)
    assert cells, (profile.name, method)
    for cell in cells:
        files = export_files(cell, profile, workload, MODEL, native_files(cell, profile))
        settings = yaml.safe_load(files[config])
        assert set(settings) <= known, f"{cell.id}: not TRL fields: {set(settings) - known}"
        assert settings["dataset_name"] == dataset_placeholder(method) and settings["model_name_or_path"] == MODEL
        spec = launch_spec(plan_for(cell, profile, workload), MODEL)
        arguments = trainer_module(method).arguments(spec)
        ours = {k: v for k, v in arguments.items() if v is not None and k not in TRAINING_NOT_MEASURING}
        assert {k: settings[k] for k in ours} == ours, cell.id
        assert {k: settings[k] for k in TRAINING_NOT_MEASURING} == TRAINING_NOT_MEASURING, cell.id
        model_args = ModelConfig(**{k: v for k, v in settings.items() if k in model_fields})
        peft = get_peft_config(model_args)
        if init_spec(cell.init).adapters:
            worker = lora_config(spec, model_class(method)[2])
            assert (peft.r, peft.lora_alpha, peft.lora_dropout, peft.target_modules, peft.task_type) == (
                worker.r, worker.lora_alpha, worker.lora_dropout, worker.target_modules, worker.task_type,
            ), cell.id  # fmt: skip
        else:
            assert peft is None, cell.id
        built = get_quantization_config(model_args)
        worker_quant = quantization_config(
            cell.quant, torch_dtype(profile.precision, quantized=True), spec.recipe.settings
        )
        assert (built is None) == (worker_quant is None), cell.id
        if built is not None:
            for key in ("load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type", "bnb_4bit_quant_storage"):
                assert getattr(built, key) == getattr(worker_quant, key), (cell.id, key)
            assert built.bnb_4bit_compute_dtype == worker_quant.bnb_4bit_compute_dtype, cell.id
        launch = files[LAUNCH_FILE]
        assert f"grep -q '{dataset_placeholder(method)}' {config}" in launch
        if profile.device == "cuda" and cell.id.endswith("one_adapter-none-single"):  # TRL refuses 2 GPUs in 1 rank
            assert "| cut -d, -f1-1)" in launch
        if cell.id.endswith("one_adapter-none-ddp"):
            assert "CUDA_VISIBLE_DEVICES" not in launch
        assert subprocess.run(["bash", "-n"], input=launch, text=True).returncode == 0
        command = launch.splitlines()[-1]
        module = script_module(method) if script in files else trl_script
        assert f" {module} --config {config} " in command and command.endswith('"$@"'), (cell.id, command)
        if cell.launcher == "accelerate":
            assert "--config_file accelerate.yaml" in command and "accelerate.yaml" in files
        if "deepspeed.json" in files:
            assert json.loads(files["deepspeed.json"])["zero_optimization"]["stage"] in (2, 3)
            through_accelerate = "accelerate.yaml" in files
            assert (settings.get("deepspeed") == "deepspeed.json") != through_accelerate, cell.id
        if trl_script is None or (method_spec(method).reference and cell.init == "two_adapters"):
            assert script in files, cell.id
        if script in files:
            path = tmp_path / f"{cell.id}.py"
            path.write_text(files[script])
            py_compile.compile(str(path), doraise=True)
            trainer = method_spec(method).trainer.rsplit(".", 1)
            assert (
                f"from {trainer[0]} import {method_spec(method).config.rsplit('.', 1)[1]}, {trainer[1]}"
                in (files[script])
            ), cell.id
            reference = init_spec(cell.init).reference if method_spec(method).reference else None
            assert f"REFERENCE = {reference!r}" in files[script], cell.id
            assert "runs instead of TRL's own script because" in files[README_FILE]
        else:
            assert f"`{trl_script}` is the script `trl {method} --config {config}` runs" in files[README_FILE]
        assert set(files) <= {config, script, LAUNCH_FILE, README_FILE, "accelerate.yaml", "deepspeed.json"}


def test_export_names_the_shipped_models_hub_id_and_labels_the_check(capsys, tmp_path):
    folder = tmp_path / "launch"
    assert main(["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--export", str(folder)]) == 0
    out = capsys.readouterr()
    assert "a check of this setup on random weights and synthetic data (a few steps), not training your model" in (
        out.out
    )
    assert f"--export: wrote {config_file(DPO)}" in out.err
    settings = yaml.safe_load((folder / config_file(DPO)).read_text())
    assert settings["model_name_or_path"] == "Qwen/Qwen2.5-7B" and settings["max_length"] == 2048
    assert (folder / LAUNCH_FILE).stat().st_mode & 0o100 and (folder / README_FILE).is_file()


FLAG_KEYS = {"--batch-size": "per_device_train_batch_size", "--grad-accum": "gradient_accumulation_steps",
             "--max-length": "max_length"}  # fmt: skip


def test_export_of_a_fix_carries_the_fixs_settings(capsys, tmp_path):
    """Nothing fits as asked: the launch files are the best-ranked cell's with its fix's settings applied."""
    from bench.advise.advice import Advice

    argv = ["advise", "--model", "llama-3.1-8b", "--gpu", "A10:1", "--max-length", "4096", "--batch-size", "8",
            "--init", "two_models"]  # fmt: skip
    assert main([*argv, "--format", "json"]) == 0
    advice = Advice.model_validate_json(capsys.readouterr().out)
    assert advice.chosen is None and advice.run is not None and advice.run.change
    fix = next(c.fix for c in advice.cells if c.fix is not None)
    changed = {FLAG_KEYS[k]: int(v) for k, v in zip(fix.flags[::2], fix.flags[1::2], strict=True) if k in FLAG_KEYS}
    assert changed  # this point's fix is a settings change (batch 4 with 2x accumulation)
    assert main([*argv, "--export", str(tmp_path)]) == 0
    capsys.readouterr()
    settings = yaml.safe_load((tmp_path / config_file(DPO)).read_text())
    assert {k: settings[k] for k in changed} == changed
    readme = (tmp_path / README_FILE).read_text()
    assert advice.run.change in readme and f"`{advice.run.cell_id}`" in readme


@pytest.mark.parametrize("method", EXPORT_METHODS)
def test_export_writes_the_methods_files(method, capsys, tmp_path):
    argv = ["advise", "--gpu", "A10:2", "--model", "phi-3-mini-4k", "--method", method,
            "--filter", "*one_adapter-none-ddp", "--export", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    model = yaml.safe_load((tmp_path / config_file(method)).read_text())["model_name_or_path"]
    script = method_spec(method).trl_script is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [config_file(method), LAUNCH_FILE, README_FILE, *([script_file(method)] if script else [])]
    )
    readme = (tmp_path / README_FILE).read_text()
    title = readme.splitlines()[0]
    assert title.startswith(f"# {method.upper()} launch files: `{model}` as `") and "one_adapter-none-ddp` on" in title
    assert f"a folder of {launch_files.rows(method)} rows" in readme


def test_export_of_a_method_it_has_no_launch_files_for_is_one_line(capsys, tmp_path, monkeypatch):
    """A method export does not cover (the online ones, GRPO and RLOO, once they are methods) is refused before any
    work, naming the methods it covers."""
    monkeypatch.setattr(launch_files, "EXPORT_METHODS", tuple(m for m in EXPORT_METHODS if m != Method.SFT))
    argv = ["advise", "--gpu", "A10:2", "--model", "qwen2.5-7b", "--method", "sft", "--export", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--export writes dpo, reward, kto, orpo, simpo launch files only" in err and "not --method sft" in err
    assert "\n" not in err and not list(tmp_path.iterdir())


def test_without_a_model_the_launch_files_say_to_name_one(capsys, tmp_path):
    assert main(["advise", "--gpu", "A10:2", "--export", str(tmp_path)]) == 0
    capsys.readouterr()
    settings = yaml.safe_load((tmp_path / config_file(DPO)).read_text())
    assert settings["model_name_or_path"] == "mistral-7b"
    for name in (config_file(DPO), README_FILE):
        assert "put the Hub id or the folder of your model there" in (tmp_path / name).read_text(), name
