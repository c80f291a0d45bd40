"""`advise --export DIR`: the launch files that train the user's real model in the advised setup, beside the benchmark's
check of it (`python -m bench run ... --filter CELL`: random weights, synthetic data, a few steps).

Written: the launcher line (`launch.sh`, built by the launcher table as `run` builds it), the native accelerate /
DeepSpeed files (command.py `native_files`), and a config for TRL's own script of the method (`<method>.yaml`), or,
where TRL has no script that builds what the cell measured (ORPO, SimPO, two adapters, a recipe's device_map, ...),
a short script from the same YAML (`<method>_train.py`, launch_script.py). Every training setting comes from the
functions the worker builds its trainer with, so the launch files cannot drift from what was measured; only what the
benchmark sets to measure a few steps is set as a training run sets it (TRAINING_NOT_MEASURING)."""

import shlex
from pathlib import Path
from typing import Any

import yaml

from bench.advise.command import EXAMPLE_PORT
from bench.advise.launch_script import script_reasons, training_script
from bench.errors import BenchError
from bench.launchers import LaunchInputs, launcher_spec
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.plan import Plan, plan_for
from bench.matrix.precision import PURE_BF16_DEEPSPEED
from bench.matrix.profiles import HardwareProfile, Workload
from bench.worker.trainer_args import pure_bf16

EXPORT_METHODS = (Method.DPO, Method.SFT, Method.REWARD, Method.KTO, Method.ORPO, Method.SIMPO)
"""Methods --export writes launch files for: the offline ones (a dataset of rows, no generation)."""
ROWS = {"pairs": "prompt/chosen/rejected", "completions": "prompt/completion", "unpaired": "prompt/completion/label"}
"""The columns of the rows each data form's trainer reads (bench/matrix/methods.py DataForm; KTO's label is true for
a desirable completion)."""
PLACEHOLDER_MARK = "REPLACE-ME/"
LAUNCH_FILE = "launch.sh"
README_FILE = "README.md"


def rows(method: Method) -> str:
    return ROWS[method_spec(method).data]


def dataset_placeholder(method: Method) -> str:
    """The YAML's dataset_name until the user names theirs (a Hub dataset or a local folder of the method's rows);
    launch.sh refuses to start while it is there."""
    return f"{PLACEHOLDER_MARK}your-{rows(method).replace('/', '-')}-dataset"


def config_file(method: Method) -> str:
    return f"{method}.yaml"


def script_module(method: Method) -> str:
    return f"{method}_train"


def script_file(method: Method) -> str:
    return f"{script_module(method)}.py"


TRAINING_NOT_MEASURING: dict[str, Any] = {
    "output_dir": "output",
    "max_steps": -1,
    "num_train_epochs": 1,
    "logging_steps": 10,
    "save_strategy": "steps",
    "save_steps": 500,
    "disable_tqdm": False,
}
"""What the benchmark sets to time a few steps (its step count, one log line, nothing saved, no progress bar), as a
training run sets it: one epoch over the dataset, a log line every 10 steps, a checkpoint every 500, the model (or
the adapter) saved to output/ at the end (TRL's script and dpo_train.py both save it)."""

LORA_KEYS = {
    "r": "lora_r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "target_modules": "lora_target_modules",
    "task_type": "lora_task_type",
}
"""LoraConfig's keyword -> TRL ModelConfig's field (trl/trainer/utils.py get_peft_config builds it back)."""
QUANT_KEYS = {
    "load_in_8bit": "load_in_8bit",
    "load_in_4bit": "load_in_4bit",
    "bnb_4bit_quant_type": "bnb_4bit_quant_type",
    "bnb_4bit_quant_storage": "bnb_4bit_quant_storage",
}
"""BitsAndBytesConfig's keyword -> TRL ModelConfig's field (get_quantization_config builds it back; its compute
dtype is ModelConfig.dtype)."""


def check_method(methods: tuple[Method, ...]) -> None:
    """One line when --export is asked for a method it writes no launch files for."""
    other = [str(m) for m in methods if m not in EXPORT_METHODS]
    if other:
        raise BenchError(
            f"--export writes {', '.join(m.value for m in EXPORT_METHODS)} launch files only (TRL's offline trainers), "
            f"not --method {','.join(other)}"
        )


def model_id(given: str | None, workload: Workload) -> str:
    """What the launch files load: the `--model` Hub id or local folder as given (a shipped config's name: its Hub id),
    else the workload's pretrained source, else its name (to replace)."""
    from bench.assets.model_config import models_dir, shipped_models

    if given is None:
        pretrained = workload.model.weights == "pretrained" and workload.model.source
        return workload.model.source if pretrained else workload.name
    path = Path(given).expanduser()
    if path.is_file():
        return str(path.absolute().parent)
    if path.is_dir():
        return str(path.absolute())
    if "/" not in given and (models_dir() / given / "config.json").is_file():
        hub = next((m.hub_id for m in shipped_models() if m.folder == given and m.hub_id), None)
        return hub or given
    return given


def launch_spec(plan: Plan, model: str, report_to: tuple[str, ...] = ("none",)) -> Any:
    """The worker's spec of the planned cell with the user's model in place of the prepared assets (no data: the
    launch files' dataset is the user's), reporting to `report_to`'s trackers."""
    from bench.assets.prepare import PreparedAssets
    from bench.run.launch import DEEPSPEED_FILE
    from bench.worker.spec import WorkerSpec

    cell = plan.cell
    # as plan_launch: a launcher that reads no accelerate.yaml gets the DeepSpeed file through DPOConfig(deepspeed=)
    through_trainer = plan.backend.deepspeed is not None and not launcher_spec(cell.launcher).reads_accelerate_config
    return WorkerSpec.from_plan(
        plan,
        PreparedAssets(model=model, tokenizer=model, dataset=dataset_placeholder(cell.method)),
        "",
        deepspeed_config=DEEPSPEED_FILE if through_trainer else None,
        report_to=report_to,
    )


def _renamed(kwargs: dict[str, Any], keys: dict[str, str], what: str) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(keys))
    if unknown:
        raise ValueError(f"TRL's ModelConfig has no field for {what} {', '.join(unknown)}: export needs a script")
    return {keys[k]: v for k, v in kwargs.items()}


def model_arguments(spec: Any) -> dict[str, Any]:
    """TRL ModelConfig's fields for the cell: the model, its dtype, the LoRA adapter (of the method's task type), the
    quantization."""
    from bench.matrix.precision import load_dtype
    from bench.matrix.quants import quant_spec
    from bench.worker.models import lora_kwargs, quantization_kwargs
    from bench.worker.trainers import model_class

    dtype = load_dtype(spec.profile.precision, quant_spec(spec.cell.quant).quantized)
    fields: dict[str, Any] = {"model_name_or_path": spec.assets.model, "dtype": dtype}
    if spec.workload.train.attn_implementation is not None:
        fields["attn_implementation"] = spec.workload.train.attn_implementation
    if init_spec(spec.cell.init).adapters:
        task = model_class(spec.cell.method)[2]
        fields |= {"use_peft": True, **_renamed(lora_kwargs(spec, task), LORA_KEYS, "LoraConfig's")}
    quant = quantization_kwargs(spec.cell.quant, dtype, spec.recipe.settings)
    if quant is not None:
        compute = quant.pop("bnb_4bit_compute_dtype", dtype)
        if compute != dtype:
            raise ValueError(f"TRL computes 4-bit weights in ModelConfig.dtype ({dtype}), the cell in {compute}")
        fields |= _renamed(quant, QUANT_KEYS, "BitsAndBytesConfig's")
    return fields


def trl_config(spec: Any) -> dict[str, Any]:
    """The YAML's keys: TRL's ScriptArguments (the dataset), the method's config (its trainer module's `arguments`, the
    measuring settings replaced by TRAINING_NOT_MEASURING) and ModelConfig."""
    from bench.worker.trainers import trainer_module

    arguments = trainer_module(spec.cell.method).arguments(spec) | TRAINING_NOT_MEASURING
    trainer = {k: v for k, v in arguments.items() if v is not None}
    return {"dataset_name": dataset_placeholder(spec.cell.method), **model_arguments(spec), **trainer}


def pure_bf16_native(spec: Any, native: dict[str, str]) -> dict[str, str]:
    """The accelerate / DeepSpeed files for pure bf16: accelerate without mixed precision (its FSDP would upcast the
    bf16 weights to an fp32 copy under `bf16`); DeepSpeed's bf16 engine always keeps an fp32 master copy, so no
    DeepSpeed file trains pure bf16 (one line)."""
    from bench.run.launch import ACCELERATE_FILE, DEEPSPEED_FILE

    if not pure_bf16(spec):
        return native
    if DEEPSPEED_FILE in native:
        raise BenchError(
            f"--precision pure-bf16: {spec.cell.id} runs DeepSpeed ({PURE_BF16_DEEPSPEED}); export a setup without "
            "DeepSpeed, or --precision mixed"
        )
    out = dict(native)
    if ACCELERATE_FILE in out:
        out[ACCELERATE_FILE] = yaml.safe_dump(yaml.safe_load(out[ACCELERATE_FILE]) | {"mixed_precision": "no"})
    return out


def settings_note(spec: Any) -> str | None:
    """README's line naming the settings flags gave (the prediction's and these files')."""
    from bench.matrix.precision import NOTES
    from bench.matrix.settings import knobs_said

    pure = [f"precision pure-bf16 ({NOTES['pure-bf16']})"] if pure_bf16(spec) else []
    said = pure + knobs_said(spec.workload)
    return f"Settings as predicted: {', '.join(said)}." if said else None


def trl_module(method: Method, script: bool) -> str:
    """The module launch.sh runs: the exported training script, or TRL's script of the method (what `trl <method>` runs
    through `accelerate launch`)."""
    module = script_module(method) if script else method_spec(method).trl_script
    if module is None:
        raise ValueError(f"TRL ships no script for {method}: its launch files hold a script of its own")
    return module


def launch_command(spec: Any, script: bool) -> list[str]:
    """The cell's launcher line (the launcher table's argv, as `run` builds it) running TRL's script of the method,
    or the exported training script, on the method's YAML."""
    from bench.run.launch import ACCELERATE_FILE

    cell, profile = spec.cell, spec.profile
    launcher = launcher_spec(cell.launcher)
    inputs = LaunchInputs(
        python="python",
        processes=CellOnProfile(cell, profile).world,
        port=EXAMPLE_PORT,
        worker=("-m", trl_module(cell.method, script), "--config", config_file(cell.method)),
        accelerate_config=ACCELERATE_FILE if launcher.reads_accelerate_config else None,
        gpus=profile.device == "cuda",
    )
    return launcher.command(inputs, "python")


MODEL_NOTE = (
    "model_name_or_path is the workload's name (the benchmark trained its architecture with random weights): put the "
    "Hub id or the folder of your model there"
)
"""Without --model: what the launch files say of the model it names."""


def _yaml(config: dict[str, Any], method: Method, model_named: bool) -> str:
    head = [
        *([] if model_named else [f"# {MODEL_NOTE}."]),
        f"# TRL's {method.upper()} settings (ScriptArguments, {_config_class(method)}, ModelConfig), from the",
        "# benchmark's own trainer arguments.",
        f"# dataset_name {dataset_placeholder(method)} is a placeholder: put a Hub dataset, or the absolute path",
        f"# of a folder of {rows(method)} rows (a train.jsonl); launch.sh will not start until it is replaced.",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False)


def _config_class(method: Method) -> str:
    return method_spec(method).config.rsplit(".", 1)[1]


def visible_devices(spec: Any) -> str | None:
    """launch.sh's CUDA_VISIBLE_DEVICES line where the cell uses fewer of the machine's GPUs than it has (as `run`
    gives it: bench/worker/placement.py cell_devices): the first ones of those visible, else of 0..N-1. A single
    process that sees several GPUs is refused by TRL ("does not support nn.DataParallel"); the deepspeed launcher
    takes every visible GPU. None: every GPU."""
    from bench.worker.placement import cell_devices

    used, every = cell_devices(spec), spec.profile.device_count
    if spec.profile.device != "cuda" or used >= every:
        return None
    default = ",".join(str(i) for i in range(every))
    return f'export CUDA_VISIBLE_DEVICES=$(echo "${{CUDA_VISIBLE_DEVICES:-{default}}}" | cut -d, -f1-{used})'


def _launch_sh(command: list[str], method: Method, launcher: str, devices: str | None) -> str:
    exports = [] if devices is None else [devices]
    if launcher == "mpirun":  # mpirun forwards these to the ranks (-x); torch's rendezvous reads them
        exports += [
            "export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}",
            f"export MASTER_PORT=${{MASTER_PORT:-{EXAMPLE_PORT}}}",
        ]
    config, placeholder = config_file(method), dataset_placeholder(method)
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            f"# Trains the model in {config} as the advised setup; extra arguments go to the training script",
            "# (TRL's flags, e.g. --max_steps 100). Written by `dpo-bench advise --export`.",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            f"if grep -q '{placeholder}' {config}; then",
            f'  echo "{config}: replace dataset_name {placeholder} with your dataset first" >&2',
            "  exit 2",
            "fi",
            *exports,
            f'exec {shlex.join(command)} "$@"',
            "",
        ]
    )


HEAD_NOTE = (
    "The reward head starts as transformers creates it (random, as TRL's reward script leaves it); the benchmark "
    "zeroes it so that its learning check reads a first loss of ln 2: the same memory and step time."
)
"""The one way a reward model's launch files differ from what the benchmark ran (bench/worker/trainers/reward.py)."""


def _readme(
    spec: Any, command: list[str], files: list[str], reasons: list[str], change: str | None, model_named: bool
) -> str:
    cell, method = spec.cell, spec.cell.method
    config, trainer = config_file(method), method_spec(method).trainer_class
    lines = [
        f"# {method.upper()} launch files: `{spec.assets.model}` as `{cell.id}` on {spec.profile.name}",
        "",
        "Written by `dpo-bench advise --export`. This trains your model on your data. The `dpo-bench run"
        " ... --filter` line `advise` prints is a check of this setup on random weights and synthetic data (a few "
        "steps), not training your model.",
        "",
        *([f"The setup did not fit as it was; these launch files apply: {change}.", ""] if change else []),
        *([note, ""] if (note := settings_note(spec)) else []),
        f"1. In `{config}`, replace `dataset_name: {dataset_placeholder(method)}` with a Hub dataset or the absolute "
        f"path of a folder of {rows(method)} rows (e.g. `train.jsonl`)."
        + ("" if model_named else f" Its {MODEL_NOTE}."),
        "2. Run it:",
        "",
        "```",
        "bash launch.sh",
        "```",
        "",
        "which runs, in this folder:",
        "",
        "```",
        shlex.join(command),
        "```",
        "",
        f"Arguments after `launch.sh` go to the training script (TRL's flags override {config}: `--max_steps 100`, "
        "`--output_dir /data/run1`). The model (for adapters: the adapter) is saved to `output/`.",
        "",
        "Files:",
        "",
        *[f"- `{name}`" + (f": {role}" if (role := file_role(name, method)) else "") for name in files],
    ]
    if reasons:
        lines += [
            "",
            f"`{script_file(method)}` runs instead of TRL's own script because:",
            "",
            *[f"- {r}" for r in reasons],
        ]
    else:
        lines += [
            "",
            f"`{trl_module(method, False)}` is the script `trl {method} --config {config}` runs (through `accelerate "
            f"launch`); launch.sh runs it with this setup's own launcher. It builds {trainer} as the benchmark did.",
        ]
    lines += [
        "",
        "The settings are the ones the benchmark measured (PREDICTED to fit by `advise`), except one epoch instead of "
        "the benchmark's few steps, a log line every 10 steps and a checkpoint every 500.",
        *([HEAD_NOTE] if method == Method.REWARD else []),
        "",
    ]
    return "\n".join(lines)


def file_role(name: str, method: Method) -> str | None:
    """What README.md says a launch file is."""
    config, config_class = config_file(method), _config_class(method)
    return {
        LAUNCH_FILE: "the launcher line",
        config: f"TRL's settings (dataset, model, LoRA, quantization, {config_class})",
        script_file(method): f"{method_spec(method).trainer_class} built as the benchmark builds it, from {config}",
        "accelerate.yaml": "accelerate's config for this setup",
        "deepspeed.json": f"DeepSpeed's config for this setup (batch and precision `auto`: from {config})",
    }.get(name)


def export_files(
    cell: Cell,
    profile: HardwareProfile,
    workload: Workload,
    model: str,
    native: dict[str, str],
    change: str | None = None,
    report_to: tuple[str, ...] = ("none",),
) -> dict[str, str]:
    """File name -> content of the launch files. `native`: the accelerate / DeepSpeed files (command.py native_files);
    `report_to`: the trackers its trainer reports to (`--report-to`)."""
    if cell.method not in EXPORT_METHODS:
        check_method((cell.method,))
    if profile.nodes != 1:
        raise BenchError(f"--export writes one-node launch files; {profile.name} has {profile.nodes} nodes")
    spec = launch_spec(plan_for(cell, profile, workload), model, report_to)
    native = pure_bf16_native(spec, native)
    reasons = script_reasons(spec)
    command = launch_command(spec, script=bool(reasons))
    model_named = not (model == workload.name and workload.model.weights == "random")
    config = config_file(cell.method)
    files = {config: _yaml(trl_config(spec), cell.method, model_named)}
    if reasons:
        files[script_file(cell.method)] = training_script(spec, reasons, config)
    files |= native
    files[LAUNCH_FILE] = _launch_sh(command, cell.method, str(cell.launcher), visible_devices(spec))
    files[README_FILE] = _readme(spec, command, list(files), reasons, change, model_named)
    return files


def write_export(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / LAUNCH_FILE).chmod(0o755)
