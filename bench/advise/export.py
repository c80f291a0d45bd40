"""`advise --export DIR`: the recipe that trains the user's real model in the advised setup, beside the benchmark's
check of it (`python -m bench run ... --filter CELL`: random weights, synthetic data, a few steps).

What is written: the launcher line (`launch.sh`, the cell's launcher built by the launcher table as `run` builds
it), the native accelerate / DeepSpeed files (bench/advise/command.py `native_files`: the generators `run` uses),
and a config for TRL's own DPO script (`dpo.yaml`: TRL's ScriptArguments, DPOConfig and ModelConfig keys, read by
`trl dpo --config dpo.yaml` and `python -m trl.scripts.dpo --config dpo.yaml`). Where TRL's script cannot build what
the cell measured (two adapters, a recipe's device_map, a separate reference model beside precomputed log-probs),
a short script does, with TRL's DPOTrainer API, from the same dpo.yaml (`dpo_recipe.py`).

Every training setting comes from the functions the worker builds its trainer with (bench/worker/trainer_args.py
`trainer_arguments`, bench/worker/models.py `lora_kwargs`, `quantization_kwargs`, `DTYPE_NAMES`,
bench/worker/placement.py `device_map_setting`): a recipe cannot drift from what the benchmark measured. Only what
the benchmark sets to measure a few steps is set as a training run sets it (TRAINING_NOT_MEASURING)."""

import inspect
import shlex
from pathlib import Path
from typing import Any

import yaml

from bench.advise.command import EXAMPLE_PORT
from bench.errors import BenchError
from bench.launchers import LaunchInputs, launcher_spec
from bench.matrix.axes import Method
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.scenario import world_size

EXPORT_METHODS = (Method.DPO,)
"""Methods --export writes a recipe for (TRL's DPO script and DPOTrainer)."""
DATASET_PLACEHOLDER = "REPLACE-ME/your-preference-dataset"
"""dpo.yaml's dataset_name until the user names theirs (a Hub dataset or a local folder of prompt/chosen/rejected
rows); launch.sh refuses to start while it is there."""
CONFIG_FILE = "dpo.yaml"
SCRIPT_MODULE = "dpo_recipe"
SCRIPT_FILE = f"{SCRIPT_MODULE}.py"
LAUNCH_FILE = "launch.sh"
README_FILE = "README.md"
TRL_MODULE = "trl.scripts.dpo"
"""TRL's DPO script: what `trl dpo` runs through `accelerate launch`; run as a module by the cell's own launcher."""

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
the adapter) saved to output/ at the end (TRL's script and dpo_recipe.py both save it)."""

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
    """One line when --export is asked for a method it writes no recipe for."""
    other = [m.value for m in methods if m not in EXPORT_METHODS]
    if other:
        raise BenchError(
            f"--export writes {', '.join(m.value for m in EXPORT_METHODS)} recipes only (TRL's DPO script and "
            f"DPOTrainer), not --method {','.join(other)}"
        )


def model_id(given: str | None, workload: Workload) -> str:
    """What the recipe loads: the `--model` Hub id or local folder as given (a shipped config's name: its Hub id),
    else the workload's pretrained source, else its name (to replace)."""
    from bench.assets.model_config import MODELS_DIR, shipped_models

    if given is None:
        pretrained = workload.model.weights == "pretrained" and workload.model.source
        return workload.model.source if pretrained else workload.name
    path = Path(given).expanduser()
    if path.is_file():
        return str(path.absolute().parent)
    if path.is_dir():
        return str(path.absolute())
    if "/" not in given and (MODELS_DIR / given / "config.json").is_file():
        hub = next((m.hub_id for m in shipped_models() if m.folder == given and m.hub_id), None)
        return hub or given
    return given


def recipe_spec(cell: Cell, profile: HardwareProfile, workload: Workload, model: str) -> Any:
    """The worker's spec of the cell with the user's model in place of the prepared assets (no data: the recipe's
    dataset is the user's)."""
    from bench.assets.prepare import PreparedAssets
    from bench.run.launch import DEEPSPEED_FILE
    from bench.worker.spec import WorkerSpec

    deepspeed = backend_spec(cell.backend).deepspeed is not None
    # as plan_launch: a launcher that reads no accelerate.yaml gets the DeepSpeed file through DPOConfig(deepspeed=)
    through_trainer = deepspeed and not launcher_spec(cell.launcher).reads_accelerate_config
    return WorkerSpec(
        cell=cell,
        profile=profile,
        workload=workload,
        assets=PreparedAssets(model=model, tokenizer=model, dataset=DATASET_PLACEHOLDER),
        out_dir="",
        deepspeed_config=DEEPSPEED_FILE if through_trainer else None,
    )


def _renamed(kwargs: dict[str, Any], keys: dict[str, str], what: str) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(keys))
    if unknown:
        raise ValueError(f"TRL's ModelConfig has no field for {what} {', '.join(unknown)}: export needs dpo_recipe.py")
    return {keys[k]: v for k, v in kwargs.items()}


def model_arguments(spec: Any) -> dict[str, Any]:
    """TRL ModelConfig's fields for the cell: the model, its dtype, the LoRA adapter, the quantization."""
    from bench.worker.models import DTYPE_NAMES, lora_kwargs, quantization_kwargs

    dtype = DTYPE_NAMES[spec.profile.precision]
    fields: dict[str, Any] = {"model_name_or_path": spec.assets.model, "dtype": dtype}
    if init_spec(spec.cell.init).adapters:
        fields |= {"use_peft": True, **_renamed(lora_kwargs(spec), LORA_KEYS, "LoraConfig's")}
    quant = quantization_kwargs(spec.cell.quant, dtype, spec.recipe.settings)
    if quant is not None:
        compute = quant.pop("bnb_4bit_compute_dtype", dtype)
        if compute != dtype:
            raise ValueError(f"TRL computes 4-bit weights in ModelConfig.dtype ({dtype}), the cell in {compute}")
        fields |= _renamed(quant, QUANT_KEYS, "BitsAndBytesConfig's")
    return fields


def trl_config(spec: Any) -> dict[str, Any]:
    """dpo.yaml's keys: TRL's ScriptArguments (the dataset), DPOConfig (the worker's trainer_arguments, measuring
    settings replaced by TRAINING_NOT_MEASURING) and ModelConfig."""
    from bench.worker.trainer_args import trainer_arguments

    trainer = {k: v for k, v in (trainer_arguments(spec) | TRAINING_NOT_MEASURING).items() if v is not None}
    return {"dataset_name": DATASET_PLACEHOLDER, **model_arguments(spec), **trainer}


def script_reasons(spec: Any) -> list[str]:
    """What TRL's DPO script cannot build as the cell measured it (empty: dpo.yaml and TRL's script are the recipe)."""
    from bench.worker.placement import device_map_setting
    from bench.worker.trainer_args import precompute_ref_log_probs

    reasons = []
    reference = init_spec(spec.cell.init).reference
    if reference == "ref_adapter":
        reasons.append(
            "two adapters: DPOTrainer is handed a PeftModel with adapter `default` (TRL adds its frozen copy `ref` as "
            "the reference); TRL's script passes a model id"
        )
    placement = device_map_setting(spec)
    if placement is not None:
        reasons.append(
            f"from_pretrained's device_map `{placement}` (the recipe {', '.join(spec.recipe.entries) or 'of the cell'}"
            "); TRL's script takes its own (`auto` in one process, none under DDP or DeepSpeed)"
        )
    if reference == "separate_model" and precompute_ref_log_probs(spec) and spec.recipe.settings.reference is None:
        reasons.append(
            "a separate reference model beside precomputed log-probs: TRL's script would load no reference model"
        )
    return reasons


def launch_command(spec: Any, script: bool) -> list[str]:
    """The cell's launcher line (the launcher table's argv, as `run` builds it) running TRL's DPO script, or
    dpo_recipe.py, on dpo.yaml."""
    from bench.run.launch import ACCELERATE_FILE

    cell, profile = spec.cell, spec.profile
    launcher = launcher_spec(cell.launcher)
    inputs = LaunchInputs(
        python="python",
        processes=world_size(cell, profile),
        port=EXAMPLE_PORT,
        worker=("-m", SCRIPT_MODULE if script else TRL_MODULE, "--config", CONFIG_FILE),
        accelerate_config=ACCELERATE_FILE if launcher.reads_accelerate_config else None,
        gpus=profile.device == "cuda",
    )
    return launcher.command(inputs, "python")


SCRIPT = '''"""DPO of {model} as the dpo-bench cell `{cell_id}` trains it, with TRL's DPOTrainer: the settings are
dpo.yaml's (TRL's ScriptArguments, DPOConfig and ModelConfig); this script, not TRL's `trl dpo`, because
{reasons}.

Written by `python -m bench advise --export`; run it with launch.sh."""

{typing}import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer, ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config

REFERENCE = {reference!r}
"""Where DPO's reference lives: `separate_model`, `adapter_disabled` (LoRA via peft_config) or `ref_adapter` (a
PeftModel with adapter `default`; TRL adds a frozen copy `ref`)."""
KEEP_REFERENCE_MODEL = {keep_reference!r}
"""separate_model: load the reference model and pass it (False: TRL computes the reference log-probs first)."""
DEVICE_MAP = {device_map!r}
"""from_pretrained's device_map: `local_rank` (each process its own device), `balanced_io_first` (the layers over
the devices, the embedding and the LM head on the first), `auto`, `balanced`, or None."""
{helpers}

def device_map(model_args):
    if DEVICE_MAP == "local_rank":
        from accelerate import PartialState

        return {{"": PartialState().local_process_index}}
    if DEVICE_MAP == "balanced_io_first":
        return balanced_io_first_map(model_args.model_name_or_path, getattr(torch, model_args.dtype))
    return DEVICE_MAP


def load(model_args):
    return AutoModelForCausalLM.from_pretrained(
        model_args.model_name_or_path,
        dtype=getattr(torch, model_args.dtype),
        quantization_config=get_quantization_config(model_args),
        device_map=device_map(model_args),
    )


def main():
    parser = TrlParser((ScriptArguments, DPOConfig, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)[script_args.dataset_train_split]
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model, ref_model, peft_config = load(model_args), None, None
    if REFERENCE == "separate_model":
        ref_model = load(model_args) if KEEP_REFERENCE_MODEL else None
    elif REFERENCE == "adapter_disabled":
        peft_config = get_peft_config(model_args)
    else:
        from peft import get_peft_model, prepare_model_for_kbit_training

        if model_args.load_in_4bit or model_args.load_in_8bit:
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=training_args.gradient_checkpointing
            )
        model = get_peft_model(model, get_peft_config(model_args))
    trainer = DPOTrainer(
        model=model,
        ref_model=ref_model,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    main()
'''


def recipe_script(spec: Any, reasons: list[str]) -> str:
    """dpo_recipe.py: bench/worker/models.py `build_models` over dpo.yaml; a recipe's balanced_io_first map is the
    worker's own functions, copied in."""
    from bench.worker import models
    from bench.worker.placement import device_map_setting

    placement = device_map_setting(spec)
    helpers = ""
    if placement == "balanced_io_first":
        functions = (models.io_first, models.io_module_names, models.balanced_io_first_map)
        helpers = "\n\n" + "\n\n".join(inspect.getsource(f) for f in functions)
    keep = init_spec(spec.cell.init).reference == "separate_model" and spec.recipe.settings.reference != "precomputed"
    return SCRIPT.format(
        model=spec.assets.model,
        cell_id=spec.cell.id,
        reasons="; ".join(reasons),
        reference=init_spec(spec.cell.init).reference,
        keep_reference=keep,
        device_map=placement,
        helpers=helpers,
        typing="from typing import Any\n\n" if helpers else "",
    )


MODEL_NOTE = (
    "model_name_or_path is the workload's name (the benchmark trained its architecture with random weights): put the "
    "Hub id or the folder of your model there"
)
"""Without --model: what the recipe says of the model it names."""


def _yaml(config: dict[str, Any], model_named: bool) -> str:
    head = [
        *([] if model_named else [f"# {MODEL_NOTE}."]),
        "# TRL's DPO settings (ScriptArguments, DPOConfig, ModelConfig), from the benchmark's own trainer arguments.",
        f"# dataset_name {DATASET_PLACEHOLDER} is a placeholder: put a Hub dataset, or the absolute path of a",
        "# folder of prompt/chosen/rejected rows (a train.jsonl); launch.sh will not start until it is replaced.",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False)


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


def _launch_sh(command: list[str], launcher: str, devices: str | None) -> str:
    exports = [] if devices is None else [devices]
    if launcher == "mpirun":  # mpirun forwards these to the ranks (-x); torch's rendezvous reads them
        exports += [
            "export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}",
            f"export MASTER_PORT=${{MASTER_PORT:-{EXAMPLE_PORT}}}",
        ]
    return "\n".join(
        [
            "#!/usr/bin/env bash",
            "# Trains the model in dpo.yaml as the advised setup; extra arguments go to the training script",
            "# (TRL's flags, e.g. --max_steps 100). Written by `python -m bench advise --export`.",
            "set -euo pipefail",
            'cd "$(dirname "$0")"',
            f"if grep -q '{DATASET_PLACEHOLDER}' {CONFIG_FILE}; then",
            f'  echo "{CONFIG_FILE}: replace dataset_name {DATASET_PLACEHOLDER} with your dataset first" >&2',
            "  exit 2",
            "fi",
            *exports,
            f'exec {shlex.join(command)} "$@"',
            "",
        ]
    )


def _readme(
    spec: Any, command: list[str], files: list[str], reasons: list[str], change: str | None, model_named: bool
) -> str:
    cell = spec.cell
    lines = [
        f"# DPO recipe: `{spec.assets.model}` as `{cell.id}` on {spec.profile.name}",
        "",
        "Written by `python -m bench advise --export`. This trains your model on your data. The `python -m bench run"
        " ... --filter` line `advise` prints is a check of this setup on random weights and synthetic data (a few "
        "steps), not training your model.",
        "",
        *([f"The setup did not fit as it was; this recipe applies: {change}.", ""] if change else []),
        "1. In `dpo.yaml`, replace `dataset_name: " + DATASET_PLACEHOLDER + "` with a Hub dataset or the absolute "
        "path of a folder of prompt/chosen/rejected rows (e.g. `train.jsonl`)."
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
        "Arguments after `launch.sh` go to the training script (TRL's flags override dpo.yaml: `--max_steps 100`, "
        "`--output_dir /data/run1`). The model (for adapters: the adapter) is saved to `output/`.",
        "",
        "Files:",
        "",
        *[f"- `{name}`" + (f": {FILE_ROLES[name]}" if name in FILE_ROLES else "") for name in files],
    ]
    if reasons:
        lines += ["", f"`{SCRIPT_FILE}` runs instead of TRL's `trl dpo` because:", "", *[f"- {r}" for r in reasons]]
    else:
        lines += [
            "",
            f"`{TRL_MODULE}` is the script `trl dpo --config {CONFIG_FILE}` runs (through `accelerate launch`); "
            "launch.sh runs it with this setup's own launcher.",
        ]
    lines += [
        "",
        "The settings are the ones the benchmark measured (PREDICTED to fit by `advise`), except one epoch instead of "
        "the benchmark's few steps, a log line every 10 steps and a checkpoint every 500.",
        "",
    ]
    return "\n".join(lines)


FILE_ROLES = {
    LAUNCH_FILE: "the launcher line",
    CONFIG_FILE: "TRL's settings (dataset, model, LoRA, quantization, DPOConfig)",
    SCRIPT_FILE: "DPOTrainer built as the benchmark builds it, from dpo.yaml",
    "accelerate.yaml": "accelerate's config for this setup",
    "deepspeed.json": "DeepSpeed's config for this setup (batch and precision `auto`: from dpo.yaml)",
}


def export_files(
    cell: Cell,
    profile: HardwareProfile,
    workload: Workload,
    model: str,
    native: dict[str, str],
    change: str | None = None,
) -> dict[str, str]:
    """File name -> content of the recipe. `native`: the accelerate / DeepSpeed files (command.py native_files)."""
    if cell.method not in EXPORT_METHODS:
        check_method((cell.method,))
    if profile.nodes != 1:
        raise BenchError(f"--export writes one-node recipes; {profile.name} has {profile.nodes} nodes")
    spec = recipe_spec(cell, profile, workload, model)
    reasons = script_reasons(spec)
    command = launch_command(spec, script=bool(reasons))
    model_named = not (model == workload.name and workload.model.weights == "random")
    files = {CONFIG_FILE: _yaml(trl_config(spec), model_named)}
    if reasons:
        files[SCRIPT_FILE] = recipe_script(spec, reasons)
    files |= native
    files[LAUNCH_FILE] = _launch_sh(command, str(cell.launcher), visible_devices(spec))
    files[README_FILE] = _readme(spec, command, list(files), reasons, change, model_named)
    return files


def write_export(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / LAUNCH_FILE).chmod(0o755)
