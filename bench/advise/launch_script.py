"""The training script the exported launch files run where TRL's own training script cannot build the cell as it was
measured (`<method>_train.py`): the method's trainer built as the worker builds it (bench/worker/models.py
`build_models`, bench/worker/trainers `assemble`), from the launch files' `<method>.yaml`."""

import inspect
from typing import Any

from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec


def script_reasons(spec: Any) -> list[str]:
    """What TRL's script for the method cannot build as the cell measured it (empty: the YAML and TRL's script are
    the launch files). A reference-free method's script reads only whether the init mode trains adapters."""
    from bench.worker.placement import device_map_setting
    from bench.worker.trainer_args import precompute_ref_log_probs

    method = method_spec(spec.cell.method)
    reasons = []
    if method.trl_script is None:
        reasons.append(f"TRL ships no script for {method.name} ({method.trainer} is experimental)")
    reference = init_spec(spec.cell.init).reference if method.reference else None
    if reference == "ref_adapter":
        reasons.append(
            f"two adapters: {method.trainer_class} is handed a PeftModel with adapter `default` (TRL adds its frozen "
            "copy `ref` as the reference); TRL's script passes a model id"
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


SCRIPT = '''"""{title} of {model} as the dpo-bench cell `{cell_id}` trains it, with TRL's {trainer}: the settings are
{config_file}'s (TRL's ScriptArguments, {config} and ModelConfig); this script, not TRL's own, because
{reasons}.

Written by `dpo-bench advise --export`; run it with launch.sh."""

{typing}import torch
import transformers
from datasets import load_dataset
from transformers import AutoTokenizer
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config
from {module} import {config}, {trainer}

MODEL_CLASS = {model_class!r}
MODEL_KWARGS = {model_kwargs!r}
"""The transformers Auto class the model is loaded with, and its extra from_pretrained keywords."""
REFERENCE = {reference!r}
"""Where the reference lives: `separate_model`, `adapter_disabled` (LoRA via peft_config) or `ref_adapter` (a
PeftModel with adapter `default`; TRL adds a frozen copy `ref`). None: the method has no reference (LoRA via
peft_config where {config_file} sets use_peft, else every weight trained)."""
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
    return getattr(transformers, MODEL_CLASS).from_pretrained(
        model_args.model_name_or_path,
        dtype=getattr(torch, model_args.dtype),
        attn_implementation=model_args.attn_implementation,
        quantization_config=get_quantization_config(model_args),
        device_map=device_map(model_args),
        **MODEL_KWARGS,
    )


def main():
    parser = TrlParser((ScriptArguments, {config}, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config)[script_args.dataset_train_split]
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model, reference, peft_config = load(model_args), {{}}, None
    if REFERENCE == "separate_model":
        reference = {{"ref_model": load(model_args) if KEEP_REFERENCE_MODEL else None}}
    elif REFERENCE == "ref_adapter":
        from peft import get_peft_model, prepare_model_for_kbit_training

        if model_args.load_in_4bit or model_args.load_in_8bit:
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=training_args.gradient_checkpointing
            )
        model = get_peft_model(model, get_peft_config(model_args))
    else:
        peft_config = get_peft_config(model_args)
    trainer = {trainer}(
        model=model,
        args=training_args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        **reference,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)


if __name__ == "__main__":
    main()
'''


def training_script(spec: Any, reasons: list[str], config_file: str) -> str:
    """`<method>_train.py` over `config_file`; a recipe's balanced_io_first map is the worker's own functions,
    copied in."""
    from bench.worker import models
    from bench.worker.placement import device_map_setting
    from bench.worker.trainers import model_class

    method = method_spec(spec.cell.method)
    placement = device_map_setting(spec)
    helpers = ""
    if placement == "balanced_io_first":
        functions = (models.io_first, models.io_module_names, models.balanced_io_first_map)
        helpers = "\n\n" + "\n\n".join(inspect.getsource(f) for f in functions)
    reference = init_spec(spec.cell.init).reference if method.reference else None
    keep = reference == "separate_model" and spec.recipe.settings.reference != "precomputed"
    auto_class, model_kwargs, _ = model_class(method.name)
    module, trainer = method.trainer.rsplit(".", 1)
    return SCRIPT.format(
        title=method.name.upper(),
        model=spec.assets.model,
        cell_id=spec.cell.id,
        trainer=trainer,
        config=method.config.rsplit(".", 1)[1],
        module=module,
        config_file=config_file,
        reasons="; ".join(reasons),
        model_class=auto_class,
        model_kwargs=model_kwargs,
        reference=reference,
        keep_reference=keep,
        device_map=placement,
        helpers=helpers,
        typing="from typing import Any\n\n" if helpers else "",
    )
