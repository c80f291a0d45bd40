"""What really ran, and whether it is what the cell asked for. A mismatch makes the cell `silent_fallback`."""

from pydantic import BaseModel

from bench.scenario import Backend, Cell, Init, Quant


class Engagement(BaseModel):
    world_size: int
    distributed_type: str
    wrapper: str
    zero_stage: int | None = None
    partitioned_params: bool = False
    fsdp_modules: int = 0
    quantized_layers: dict[str, int] = {}
    adapters: list[str] = []
    ref_model: str | None = None
    devices: list[str] = []
    precompute_ref_log_probs: bool = False


QUANT_LAYER = {Quant.INT8: "Linear8bitLt", Quant.NF4: "Linear4bit"}


def mismatches(cell: Cell, expected_world_size: int, seen: Engagement) -> list[str]:
    """Every way `seen` differs from what `cell` asked for; empty when the cell ran as requested."""
    found: list[str] = []
    if seen.world_size != expected_world_size:
        found.append(f"world size {seen.world_size}, expected {expected_world_size}")
    found += _backend_mismatches(cell.backend, seen)
    found += _quant_mismatches(cell.quant, seen)
    found += _init_mismatches(cell.init, seen)
    return found


def _backend_mismatches(backend: Backend, seen: Engagement) -> list[str]:
    kind = seen.distributed_type
    if backend in (Backend.SINGLE, Backend.DEVICE_MAP) and kind != "NO":
        return [f"distributed type {kind}, expected none"]
    if backend == Backend.DEVICE_MAP and len(seen.devices) < 2:
        return [f"model on {len(seen.devices)} device(s) {seen.devices}, expected layers split over >=2"]
    if backend == Backend.DDP and (not kind.startswith("MULTI_") or seen.wrapper != "DistributedDataParallel"):
        return [f"ran as {kind} with wrapper {seen.wrapper}, expected MULTI_* with DistributedDataParallel"]
    if backend == Backend.FSDP and (kind != "FSDP" or seen.fsdp_modules == 0):
        return [f"FSDP requested, ran as {kind} with wrapper {seen.wrapper} and {seen.fsdp_modules} FSDP modules"]
    if backend in (Backend.ZERO2, Backend.ZERO3):
        stage = 2 if backend == Backend.ZERO2 else 3
        if kind != "DEEPSPEED" or seen.zero_stage != stage or seen.wrapper != "DeepSpeedEngine":
            return [
                f"ZeRO-{stage} requested, ran as {kind} with wrapper {seen.wrapper} and ZeRO stage {seen.zero_stage}"
            ]
        if stage == 3 and not seen.partitioned_params:
            return ["ZeRO-3 requested, but no parameter is partitioned"]
    return []


def _quant_mismatches(quant: Quant, seen: Engagement) -> list[str]:
    if quant == Quant.NONE:
        return [f"unexpected quantized layers {seen.quantized_layers}"] if seen.quantized_layers else []
    layer = QUANT_LAYER[quant]
    if not seen.quantized_layers.get(layer):
        return [f"{quant} requested, no {layer} layer found (found {seen.quantized_layers or 'none'})"]
    return []


def _init_mismatches(init: Init, seen: Engagement) -> list[str]:
    adapters = set(seen.adapters)
    saw = f"saw adapters={sorted(adapters)}, ref={seen.ref_model}"
    if init == Init.TWO_MODELS:
        # With precomputed reference log-probs TRL may drop the reference model after the precompute pass.
        has_reference = seen.ref_model is not None or seen.precompute_ref_log_probs
        if adapters or not has_reference:
            return [f"two_models expects a reference model and no adapter; {saw}"]
    if init == Init.ONE_ADAPTER and (adapters != {"default"} or seen.ref_model is not None):
        return [f"one_adapter expects adapter 'default' only and no ref model; {saw}"]
    if init == Init.TWO_ADAPTERS and (adapters != {"default", "ref"} or seen.ref_model is not None):
        return [f"two_adapters expects adapters 'default' and 'ref'; {saw}"]
    return []
