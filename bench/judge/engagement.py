"""What really ran, and whether it is what the cell asked for. A mismatch makes the cell `silent_fallback`."""

from dataclasses import dataclass

from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.precision import trains_pure_bf16
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.quants import quant_spec
from bench.results.schema import Engagement
from bench.units import MiB


@dataclass(frozen=True)
class AskedSettings:
    """The training settings a flag gave the run that the worker applies and the engagement reads back (None: not
    given, nothing to hold)."""

    attention: str | None = None
    torch_compile: bool | None = None
    pure_bf16: bool = False

    @classmethod
    def of(cls, profile: HardwareProfile, workload: Workload) -> "AskedSettings":
        train = workload.train
        pure = trains_pure_bf16(profile.precision, train.master_weights)
        return cls(attention=train.attn_implementation, torch_compile=train.torch_compile, pure_bf16=pure)


def mismatches(cell: Cell, expected_world_size: int, seen: Engagement, asked: AskedSettings | None = None) -> list[str]:
    """Every way `seen` differs from what `cell` (and the settings `asked`) asked for; empty when the cell ran as
    requested."""
    found: list[str] = settings_mismatches(asked, cell, seen) if asked is not None else []
    if seen.world_size != expected_world_size:
        found.append(f"world size {seen.world_size}, expected {expected_world_size}")
    found += _backend_mismatches(cell.backend, seen)
    found += _quant_mismatches(cell.quant, seen)
    found += _init_mismatches(cell.init, seen)
    found += _trainer_mismatches(cell, seen)
    return found


def _trainer_mismatches(cell: Cell, seen: Engagement) -> list[str]:
    expected = method_spec(cell.method).trainer_class
    if seen.trainer == expected:
        return []
    return [f"{cell.method} requested, trainer {seen.trainer or 'not reported'} ran; expected {expected}"]


def _backend_mismatches(backend: Backend, seen: Engagement) -> list[str]:
    rule = backend_spec(backend).engagement
    kind, wrapper = seen.distributed_type, seen.wrapper
    ran = f"ran as {kind} with wrapper {wrapper}"
    if kind not in rule.distributed_types:
        return [f"{backend} requested, {ran}; expected distributed type {' or '.join(rule.distributed_types)}"]
    found = []
    if rule.wrapper is not None and wrapper != rule.wrapper:
        found.append(f"{backend} requested, {ran}; expected wrapper {rule.wrapper}")
    if rule.zero_stage is not None and seen.zero_stage != rule.zero_stage:
        found.append(f"ZeRO-{rule.zero_stage} requested, ran with ZeRO stage {seen.zero_stage}")
    if rule.partitioned_params and not seen.partitioned_params:
        found.append(f"{backend} requested, but no parameter is partitioned")
    if rule.fsdp_modules and seen.fsdp_modules == 0:
        found.append(f"{backend} requested, {ran} and no FSDP module")
    if rule.min_model_devices > 1 and len(seen.devices) < rule.min_model_devices:
        found.append(
            f"model on {len(seen.devices)} device(s) {seen.devices}, expected layers split over "
            f">={rule.min_model_devices}"
        )
    if rule.optimizer_offload is not None and seen.optimizer_offload != rule.optimizer_offload:
        found.append(
            f"optimizer offload to {rule.optimizer_offload} requested, engine reports {seen.optimizer_offload}"
        )
    if rule.param_offload is not None and seen.param_offload != rule.param_offload:
        found.append(f"parameter offload to {rule.param_offload} requested, engine reports {seen.param_offload}")
    if rule.state_on is not None:
        found += _offloaded_state_mismatches(rule.state_on, rule.param_offload is not None, seen)
    return found


def _device_kind(device: str) -> str:
    return device.split(":")[0]


def _offloaded_state_mismatches(where: str, params: bool, seen: Engagement) -> list[str]:
    """Where the offloaded tensors really are. On a GPU this tells an offload from a run that kept its state on the
    device; on a CPU profile every tensor is on `cpu` anyway, and the engine's own reports above decide."""
    found = []
    elsewhere = [d for d in seen.optimizer_state_devices if _device_kind(d) != where]
    if not seen.optimizer_state_devices:
        found.append(f"optimizer state on {where} requested, but no optimizer state was seen")
    elif elsewhere:
        found.append(f"optimizer state on {where} requested, found on {', '.join(elsewhere)}")
    if params:
        total = sum(seen.param_storage_bytes.values())
        there = sum(n for d, n in seen.param_storage_bytes.items() if _device_kind(d) == where)
        # DeepSpeed keeps the small "persistent" parameters (below stage3_param_persistence_threshold) on the device
        # also when it offloads the others, so "most", not "all".
        if there * 2 <= total or not total:
            found.append(
                f"parameters on {where} requested, but {there / MiB:,.1f} of {total / MiB:,.1f} MiB of their "
                f"partitions are there"
            )
    return found


def _quant_mismatches(quant: Quant, seen: Engagement) -> list[str]:
    layer = quant_spec(quant).layer_class
    if layer is None:
        return [f"unexpected quantized layers {seen.quantized_layers}"] if seen.quantized_layers else []
    if not seen.quantized_layers.get(layer):
        return [f"{quant} requested, no {layer} layer found (found {seen.quantized_layers or 'none'})"]
    return []


def _init_mismatches(init: Init, seen: Engagement) -> list[str]:
    adapters = set(seen.adapters)
    saw = f"saw adapters={sorted(adapters)}, ref={seen.ref_model}"
    if not init_spec(init).adapters and seen.frozen_parameters:
        found = f"{seen.frozen_parameters} frozen parameter tensor(s)"
        return [f"{init} trains every weight, but the policy has {found}; {saw}"]
    if init == Init.FULL and (adapters or seen.ref_model is not None):
        return [f"full expects one model, no adapter and no reference model; {saw}"]
    if init == Init.TWO_MODELS:
        # With precomputed reference log-probs TRL may drop the reference model after the precompute pass.
        has_reference = seen.ref_model is not None or seen.precompute_ref_log_probs
        if adapters or not has_reference:
            return [f"two_models expects a reference model and no adapter; {saw}"]
    expected = init_spec(init).adapter_names
    if expected and (adapters != expected or seen.ref_model is not None):
        names = " and ".join(f"'{name}'" for name in sorted(expected))
        return [f"{init} expects adapters {names} and no ref model; {saw}"]
    return []


def settings_mismatches(asked: AskedSettings, cell: Cell, seen: Engagement) -> list[str]:
    """The attention the models run, torch.compile's wrapper and pure bf16's dtypes and autocast, against the flags
    that asked for them: a library that falls back (an attention it cannot load, a compile it skips) is caught."""
    found = []
    for who, ran in (("policy", seen.attn_implementation), ("reference", seen.ref_attn_implementation)):
        if asked.attention is not None and ran is not None and ran != asked.attention:
            found.append(f"--attention {asked.attention} requested, the {who} runs {ran}")
    if asked.attention is not None and seen.attn_implementation is None:
        found.append(f"--attention {asked.attention} requested, the policy's attention was not read")
    if asked.torch_compile is not None and bool(seen.torch_compiled) != asked.torch_compile:
        state = "is" if seen.torch_compiled else "is not"
        found.append(f"--torch-compile {'on' if asked.torch_compile else 'off'} requested, the model {state} compiled")
    if asked.pure_bf16 and not _pure_bf16_engaged(cell, seen):
        weights = seen.frozen_dtypes if init_spec(cell.init).adapters else seen.trainable_dtypes
        found.append(
            f"--precision pure-bf16 requested, the {'base' if init_spec(cell.init).adapters else 'trained'} weights "
            f"are {', '.join(weights) or 'unknown'} under autocast {seen.mixed_precision}; expected torch.bfloat16 "
            "without autocast"
        )
    return found


def _pure_bf16_engaged(cell: Cell, seen: Engagement) -> bool:
    """No autocast, and: a full fine-tune trains bf16 weights only (no fp32 copy); an adapter cell's base was loaded
    bf16 (PEFT keeps the adapters fp32, quantized layers hold integers, and k-bit preparation upcasts the norms)."""
    if seen.mixed_precision != "no":
        return False
    if init_spec(cell.init).adapters:
        return "torch.bfloat16" in seen.frozen_dtypes
    return seen.trainable_dtypes == ["torch.bfloat16"]
