"""The model(s) one cell trains, per init mode: causal LM loading, quantization, placement and LoRA (TRL 1.16).

Shared by every trainer path (TRL, Gaudi) and the plain-TRL baseline (bench/selfbench/plain_dpo.py).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bench.matrix.axes import Quant
from bench.matrix.backends import backend_spec
from bench.matrix.inits import init_spec
from bench.matrix.quants import quant_spec
from bench.matrix.recipes import Settings, verify_installed
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import gradient_checkpointing

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Built:
    """What the trainer is given: the policy, a separate reference model or None, a LoRA config or None."""

    model: Any
    ref_model: Any
    peft_config: Any


def quantization_kwargs(quant: Quant, compute_dtype: torch.dtype, settings: Settings) -> dict[str, Any] | None:
    """BitsAndBytesConfig's keyword arguments for the cell (None: not quantized). Pure."""
    if quant == Quant.INT8:
        return {"load_in_8bit": True}
    if quant == Quant.NF4:
        kwargs: dict[str, Any] = {
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_compute_dtype": compute_dtype,
        }
        if settings.bnb_4bit_quant_storage == "compute_dtype":
            kwargs["bnb_4bit_quant_storage"] = compute_dtype
        return kwargs
    return None


def quantization_config(quant: Quant, compute_dtype: torch.dtype, settings: Settings | None = None) -> Any:
    from transformers import BitsAndBytesConfig

    kwargs = quantization_kwargs(quant, compute_dtype, settings or Settings())
    return None if kwargs is None else BitsAndBytesConfig(**kwargs)


def device_map_setting(spec: WorkerSpec) -> str | None:
    """`balanced` for a backend that splits layers, else the recipe's placement (None: no device_map). Pure."""
    if backend_spec(spec.cell.backend).splits_layers:
        return "balanced"
    chosen = spec.recipe.settings.device_map
    return None if chosen in (None, "none") else chosen


def device_map(spec: WorkerSpec) -> Any:
    """from_pretrained's device_map: None lets the trainer place the model; `local_rank` is this process's device."""
    chosen = device_map_setting(spec)
    if chosen == "local_rank":
        from accelerate import PartialState

        return {"": PartialState().local_process_index}
    return chosen


def load_pretrained(spec: WorkerSpec, auto_class: str = "AutoModelForCausalLM", **kwargs: Any) -> Any:
    """The workload's checkpoint through a transformers Auto class, quantized and placed as the cell asks."""
    import transformers

    dtype = DTYPES[spec.profile.precision]
    return getattr(transformers, auto_class).from_pretrained(
        spec.assets.model,
        dtype=dtype,
        quantization_config=quantization_config(spec.cell.quant, dtype, spec.recipe.settings),
        device_map=device_map(spec),
        trust_remote_code=False,
        **kwargs,
    )


def load_causal_lm(spec: WorkerSpec) -> Any:
    return load_pretrained(spec)


def lora_config(spec: WorkerSpec, task_type: str = "CAUSAL_LM") -> Any:
    from peft import LoraConfig

    lora = spec.workload.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type=task_type,
    )


def build_models(spec: WorkerSpec, load: Callable[[WorkerSpec], Any] | None = None, task: str = "CAUSAL_LM") -> Built:
    """The policy (`load`, default a causal LM), and the reference as the cell's init mode places it; `task` is the
    LoRA task type."""
    verify_installed(spec.recipe)  # a recipe on versions it was not documented for never runs as something else
    load = load or load_causal_lm
    model = load(spec)
    reference = init_spec(spec.cell.init).reference
    if reference == "separate_model":
        # A precomputed reference: TRL computes the log-probs with the initial policy and keeps no reference model.
        precomputed = spec.recipe.settings.reference == "precomputed"
        return Built(model=model, ref_model=None if precomputed else load(spec), peft_config=None)
    if reference == "adapter_disabled":
        return Built(model=model, ref_model=None, peft_config=lora_config(spec, task))
    from peft import get_peft_model, prepare_model_for_kbit_training

    if quant_spec(spec.cell.quant).quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing(spec))
    # Adapter `default` is trained; TRL adds a frozen copy named `ref` and uses it as the reference.
    return Built(model=get_peft_model(model, lora_config(spec, task)), ref_model=None, peft_config=None)
