"""Observe what the trainer really runs: launcher world, accelerate's distributed type, wrappers,
ZeRO stage and partitioning, quantized layer classes, adapters, reference model, the trainer's class."""

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


def observe(trainer: Any) -> Engagement:
    accelerator = trainer.accelerator
    wrapped = trainer.model_wrapped
    model = _unwrap(trainer.model)
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    zero_stage = plugin.zero_stage if plugin is not None else None
    if hasattr(wrapped, "zero_optimization_stage"):
        zero_stage = wrapped.zero_optimization_stage()
    quantized = Counter(type(m).__name__ for m in model.modules() if type(m).__module__.startswith("bitsandbytes"))
    peft_config = getattr(model, "peft_config", None) or {}
    devices = sorted({str(p.device) for p in model.parameters() if p.device.type != "meta"})
    ref = getattr(trainer, "ref_model", None)
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
        trainer=type(trainer).__name__,
    )
