"""The model(s) one cell trains, per init mode: causal LM loading, quantization, placement and LoRA (TRL 1.16).

Shared by every trainer path (TRL, Gaudi) and the plain-TRL baseline (bench/selfbench/plain_dpo.py).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.matrix.axes import Quant
from bench.matrix.inits import init_spec
from bench.matrix.precision import load_dtype
from bench.matrix.quants import quant_spec
from bench.matrix.recipes import Settings, verify_installed
from bench.worker import phases
from bench.worker.placement import device_map_setting
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import gradient_checkpointing

if TYPE_CHECKING:
    import torch


def torch_dtype(precision: str, quantized: bool = False) -> "torch.dtype":
    """The dtype a profile's precision loads the weights in (bench/matrix/precision.py `load_dtype`: fp32 under fp16
    unless quantized), also bitsandbytes' compute dtype, as TRL's ModelConfig.dtype is both. torch is
    imported here, not with the module: the method stages import this module, and an exported recipe reads their
    arguments without torch (bench/advise/launch_files.py)."""
    import torch

    return getattr(torch, load_dtype(precision, quantized))


@dataclass
class Built:
    """What the trainer is given: the policy, a separate reference model or None, a LoRA config or None."""

    model: Any
    ref_model: Any
    peft_config: Any


def quantization_kwargs(quant: Quant, compute_dtype: Any, settings: Settings) -> dict[str, Any] | None:
    """BitsAndBytesConfig's keyword arguments for the cell (None: not quantized); `compute_dtype` a torch dtype, or
    its name for a config file (bench/advise/launch_files.py). Pure."""
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


def quantization_config(quant: Quant, compute_dtype: "torch.dtype", settings: Settings | None = None) -> Any:
    from transformers import BitsAndBytesConfig

    kwargs = quantization_kwargs(quant, compute_dtype, settings or Settings())
    return None if kwargs is None else BitsAndBytesConfig(**kwargs)


def io_first(device_map: dict[str, int | str], first: int | str, io_modules: list[str]) -> dict[str, int | str]:
    """`device_map` with the input embedding and the LM head (`io_modules`) on the `first` device. Pure.

    TRL 1.16 replaces `model.forward` with its fused LM head (trl/trainer/utils.py, `add_fused_lm_head`), which runs
    the backbone and moves its output to the LM head's device: the hook accelerate puts on the whole model to return
    outputs on the input's device (`AlignDevicesHook(io_same_device=True)`, accelerate/big_modeling.py) no longer
    runs. With the head on the last GPU, the log-probs meet the batch's masks on the first GPU and the step fails
    ("Expected all tensors to be on the same device", dpo_trainer.py `per_token_entropy * mask`). With the head on
    the device the batch lives on, every output is there."""
    pinned = dict(device_map)
    for name in io_modules:
        parents = [key for key in device_map if key and name.startswith(key + ".")]
        if parents:  # a module group holds it: the group moves (only the top-level model would be that coarse)
            raise ValueError(f"device_map places {name} as part of {parents[0]}; cannot move it alone")
        pinned[name] = first
    return pinned


def io_module_names(model: Any) -> list[str]:
    """Module names of the input embedding and the LM head (tied or not)."""
    wanted = {id(model.get_input_embeddings()), id(model.get_output_embeddings())}
    return [name for name, module in model.named_modules() if id(module) in wanted]


def balanced_io_first_map(model_ref: str, dtype: "torch.dtype", max_memory: dict[int | str, int] | None = None) -> dict:
    """accelerate's balanced split of the model over the visible GPUs (what device_map="balanced" computes), with
    the input embedding and the LM head on the first GPU (io_first). Built on the meta device: no weights, no
    GPU memory; `max_memory` defaults to each visible GPU's free memory."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from accelerate.utils import get_balanced_memory
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_ref)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    no_split = list(model._no_split_modules or [])
    memory = get_balanced_memory(model, max_memory=max_memory, no_split_module_classes=no_split, dtype=dtype)
    split = infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split, dtype=dtype)
    first = min(device for device in split.values() if isinstance(device, int))
    return io_first(split, first, io_module_names(model))


def device_map(spec: WorkerSpec) -> Any:
    """from_pretrained's device_map: None lets the trainer place the model; `local_rank` is this process's device."""
    chosen = device_map_setting(spec)
    if chosen == "local_rank":
        from accelerate import PartialState

        return {"": PartialState().local_process_index}
    if chosen == "balanced_io_first":
        return balanced_io_first_map(
            spec.assets.model, torch_dtype(spec.profile.precision, quant_spec(spec.cell.quant).quantized)
        )
    return chosen


DTYPE_KEYWORD_SINCE = "4.56.0"
"""transformers renamed from_pretrained's `torch_dtype` to `dtype` in 4.56.0 (PR #39782); older releases (the ones
optimum-habana pins for Gaudi) take `dtype=` as a config attribute and load float32."""


def dtype_keyword(transformers_version: str) -> str:
    """The keyword from_pretrained takes the load dtype by, in this transformers release. Pure."""
    from packaging.version import Version

    return "dtype" if Version(transformers_version) >= Version(DTYPE_KEYWORD_SINCE) else "torch_dtype"


def load_kwargs(spec: WorkerSpec) -> dict[str, Any]:
    """from_pretrained's keywords for the settings a flag gave: `attn_implementation` (none: transformers' default,
    sdpa). Every model of the cell loads with them; TRL builds a reference it loads itself with the policy's. Pure."""
    attention = spec.workload.train.attn_implementation
    return {} if attention is None else {"attn_implementation": attention}


def load_pretrained(
    spec: WorkerSpec, auto_class: str = "AutoModelForCausalLM", path: str | None = None, **kwargs: Any
) -> Any:
    """The workload's checkpoint (or the one at `path`) through a transformers Auto class, quantized and placed as
    the cell asks."""
    import transformers

    dtype = torch_dtype(spec.profile.precision, quant_spec(spec.cell.quant).quantized)
    return getattr(transformers, auto_class).from_pretrained(
        path or spec.assets.model,
        quantization_config=quantization_config(spec.cell.quant, dtype, spec.recipe.settings),
        device_map=device_map(spec),
        trust_remote_code=False,
        **{dtype_keyword(transformers.__version__): dtype},
        **(load_kwargs(spec) | kwargs),
    )


def load_causal_lm(spec: WorkerSpec) -> Any:
    return load_pretrained(spec)


def lora_kwargs(spec: WorkerSpec, task_type: str = "CAUSAL_LM") -> dict[str, Any]:
    """LoraConfig's keyword arguments for the cell (also what an exported recipe writes). Pure."""
    lora = spec.workload.lora
    return {
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": list(lora.target_modules),
        "task_type": task_type,
    }


def lora_config(spec: WorkerSpec, task_type: str = "CAUSAL_LM") -> Any:
    from peft import LoraConfig

    return LoraConfig(**lora_kwargs(spec, task_type))


def build_models(spec: WorkerSpec, load: Callable[[WorkerSpec], Any] | None = None, task: str = "CAUSAL_LM") -> Built:
    """The policy (`load`, default a causal LM), and the reference as the cell's init mode places it; `task` is the
    LoRA task type."""
    verify_installed(spec.recipe)  # a recipe on versions it was not documented for never runs as something else
    built = _build(spec, load or load_causal_lm, task)
    phases.mark("model_loaded")
    return built


def _build(spec: WorkerSpec, load: Callable[[WorkerSpec], Any], task: str) -> Built:
    model = load(spec)
    reference = init_spec(spec.cell.init).reference
    if reference == "none":  # full: every weight of the one model trained, no reference (reference-free methods)
        return Built(model=model, ref_model=None, peft_config=None)
    if reference == "separate_model":
        # The recipe's precomputed reference: TRL computes the log-probs with the initial policy and keeps no
        # reference model (bench/matrix/reference.py).
        separate = spec.reference.separate_model
        return Built(model=model, ref_model=load(spec) if separate else None, peft_config=None)
    if reference == "adapter_disabled":
        return Built(model=model, ref_model=None, peft_config=lora_config(spec, task))
    from peft import get_peft_model, prepare_model_for_kbit_training

    if quant_spec(spec.cell.quant).quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing(spec))
    # Adapter `default` is trained; TRL adds a frozen copy named `ref` and uses it as the reference.
    return Built(model=get_peft_model(model, lora_config(spec, task)), ref_model=None, peft_config=None)
