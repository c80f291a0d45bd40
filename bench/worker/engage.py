"""Observe what the trainer really runs: launcher world, accelerate's distributed type, wrappers,
ZeRO stage and partitioning, quantized layer classes, adapters, reference model, and where offloaded state really
lives (the optimizer's state and the parameters' own storage), the trainer's class, and the training settings
as they run (attention, compilation, autocast, parameter dtypes)."""

from collections import Counter
from typing import Any

from bench.results.schema import Engagement


def _unwrap(model: Any) -> Any:
    inner = getattr(model, "module", None)
    return _unwrap(inner) if inner is not None and inner is not model else model


def _is_partitioned(param: Any) -> bool:
    if hasattr(param, "ds_numel"):
        return True
    if type(param).__name__ in ("DTensor", "FlatParameter"):
        return True
    return type(getattr(param, "data", None)).__name__ == "DTensor"


def _fsdp_module_count(model: Any) -> int:
    names = ("FullyShardedDataParallel", "FSDPModule")
    return sum(1 for m in model.modules() if any(base.__name__ in names for base in type(m).__mro__))


def _optimizer_offload(wrapped: Any) -> str | None:
    """The device DeepSpeed's ZeRO optimizer really keeps its state on, when it runs the offload path."""
    optimizer = getattr(wrapped, "optimizer", None)
    if not (getattr(optimizer, "offload_optimizer", False) or getattr(optimizer, "cpu_offload", False)):
        return None
    device = wrapped.zero_offload_optimizer().device
    return str(getattr(device, "value", device))


def _param_offload(wrapped: Any) -> str | None:
    """Where the engine keeps the parameters between uses when it offloads them: DeepSpeed ZeRO-3's offload_param
    as its optimizer runs it, or FSDP2's CPUOffloadPolicy on the wrapped modules (`cpu`)."""
    optimizer = getattr(wrapped, "optimizer", None)
    if getattr(optimizer, "offload_param", False):
        device = wrapped.zero_offload_param().device
        return str(getattr(device, "value", device))
    modules = wrapped.modules() if hasattr(wrapped, "modules") else ()
    for module in modules:
        state = module._get_fsdp_state() if hasattr(module, "_get_fsdp_state") else None
        for group in fsdp_param_groups(state):
            if type(group.offload_policy).__name__ == "CPUOffloadPolicy":
                return "cpu"
    return None


def fsdp_param_groups(state: Any) -> list[Any]:
    """An FSDP2 state's parameter groups: `_fsdp_param_groups` (a list, torch >= 2.12), or the one
    `_fsdp_param_group` of earlier releases (torch 2.11's FSDPState, on this project's lent GPU machines); none for a
    module FSDP2 does not manage."""
    if state is None:
        return []
    if hasattr(state, "_fsdp_param_groups"):
        return list(state._fsdp_param_groups or ())
    group = getattr(state, "_fsdp_param_group", None)
    return [group] if group is not None else []


def _stepping_optimizer(optimizer: Any) -> Any:
    """The optimizer that really steps: accelerate's wrapper and DeepSpeed's ZeRO optimizer unwrapped."""
    seen: set[int] = set()
    while getattr(optimizer, "optimizer", None) is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        optimizer = optimizer.optimizer
    return optimizer


def _optimizer_state_devices(optimizer: Any) -> list[str]:
    """Devices of everything the stepping optimizer updates and keeps: its parameters (under ZeRO, the fp32 master
    partitions) and its state (Adam's moments), after the first step."""
    if optimizer is None:
        return []
    tensors = [p for group in getattr(optimizer, "param_groups", ()) for p in group["params"]]
    for state in getattr(optimizer, "state", {}).values():
        # AdamW's `step` counter is a 0-dim tensor kept on the CPU wherever the moments are: not state that moves
        tensors += [v for v in state.values() if hasattr(v, "device") and getattr(v, "dim", lambda: 0)() > 0]
    return sorted({str(t.device) for t in tensors if t.device.type != "meta"})


def _param_storage_bytes(model: Any) -> dict[str, int]:
    """Bytes of the parameters' own data per device: each ZeRO-3 partition (ds_tensor), each FSDP2 shard (a
    DTensor's local tensor), else the parameter itself."""
    found: dict[str, int] = {}
    for param in model.parameters():
        data = getattr(param, "ds_tensor", None)
        data = getattr(param, "_local_tensor", None) if data is None else data
        data = param if data is None else data
        if data.device.type != "meta":
            found[str(data.device)] = found.get(str(data.device), 0) + data.numel() * data.element_size()
    return found


def _attention(model: Any) -> str | None:
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None)


def _dtypes(model: Any, trainable: bool) -> list[str]:
    return sorted({str(p.dtype) for p in model.parameters() if p.requires_grad == trainable})


def _compiled(wrapped: Any) -> bool:
    """torch.compile's wrapper around the stepped model (accelerate's `is_compiled_module`), or DeepSpeed's engine
    compiled in place (`engine.compile()`, what accelerate calls under DeepSpeed)."""
    return hasattr(wrapped, "_orig_mod") or bool(getattr(wrapped, "is_compiled", False))


def settings_seen(trainer: Any, model: Any) -> dict[str, Any]:
    """The training settings as they run: the policy's (and a separate reference's) attention after loading,
    torch.compile's wrapper, accelerate's autocast, the parameters' dtypes."""
    ref = getattr(trainer, "ref_model", None)
    return {
        "attn_implementation": _attention(model),
        "ref_attn_implementation": _attention(_unwrap(ref)) if ref is not None else None,
        "torch_compiled": _compiled(trainer.model_wrapped),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "trainable_dtypes": _dtypes(model, True),
        "frozen_dtypes": _dtypes(model, False),
    }


def observe(trainer: Any) -> Engagement:
    accelerator = trainer.accelerator
    wrapped = getattr(trainer.model_wrapped, "_orig_mod", trainer.model_wrapped)  # torch.compile's wrapper seen past
    model = _unwrap(trainer.model)
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    zero_stage = plugin.zero_stage if plugin is not None else None
    if hasattr(wrapped, "zero_optimization_stage"):
        zero_stage = wrapped.zero_optimization_stage()
    quantized = Counter(type(m).__name__ for m in model.modules() if type(m).__module__.startswith("bitsandbytes"))
    peft_config = getattr(model, "peft_config", None) or {}
    devices = sorted({str(p.device) for p in model.parameters() if p.device.type != "meta"})
    ref = getattr(trainer, "ref_model", None)
    stepping = _stepping_optimizer(getattr(trainer, "optimizer", None))
    return Engagement(
        world_size=accelerator.num_processes,
        distributed_type=str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type)),
        wrapper=type(wrapped).__name__,
        zero_stage=zero_stage,
        partitioned_params=any(_is_partitioned(p) for p in model.parameters()),
        fsdp_modules=_fsdp_module_count(wrapped),
        quantized_layers=dict(quantized),
        adapters=sorted(peft_config),
        ref_model=type(ref).__name__ if ref is not None else None,
        devices=devices,
        precompute_ref_log_probs=bool(getattr(trainer.args, "precompute_ref_log_probs", False)),
        optimizer_offload=_optimizer_offload(wrapped),
        param_offload=_param_offload(wrapped),
        optimizer=type(stepping).__name__ if stepping is not None else None,
        optimizer_state_devices=_optimizer_state_devices(stepping),
        param_storage_bytes=_param_storage_bytes(model),
        trainer=type(trainer).__name__,
        frozen_parameters=sum(1 for p in model.parameters() if not p.requires_grad),
        **settings_seen(trainer, model),
    )
