"""A planned cell (bench/matrix/plan.py) -> PREDICTED seconds per step and tokens/s, term by term (docs/estimator.md,
"Speed").

`setup_for` reads the cell's configuration into a `StepSetup` (the matrix tables, the model's shape);
`step_terms` turns it into seconds per term with pure functions (work.py, comm.py, offload.py); `predict_speed`
adds them up with the device class's constants (calibration.py)."""

import math
from dataclasses import dataclass, replace

from pydantic import BaseModel

from bench.estimate.knobs import DEFAULT_OPTIMIZER
from bench.estimate.predict import Prediction, effective_backend, predict
from bench.estimate.shapes import ModelShapes, config_path, last_gemm_dropout, shapes_for
from bench.estimate.speed import comm, decode, offload, work
from bench.estimate.speed.calibration import ClassConstants, SpeedCalibration, constants_for, load_speed_calibration
from bench.estimate.speed.devices import DeviceFigures, device_figures
from bench.estimate.speed.knob_factors import knob_seconds, liger_on, step_factor
from bench.estimate.trace.cache import traced_for
from bench.judge.mfu import ModelShape, model_shape
from bench.matrix.axes import Option
from bench.matrix.backends import BackendSpec, Placement, backend_spec
from bench.matrix.methods import MethodSpec
from bench.matrix.plan import Plan
from bench.matrix.precision import COMPUTE_DTYPE, DTYPE_BYTES
from bench.matrix.profiles import Workload
from bench.units import GB


@dataclass(frozen=True)
class StepSetup:
    step: work.StepShape
    backend: BackendSpec
    world: int
    compute_bytes: int
    """Bytes of a parameter and a gradient in the compute dtype (4 fp32, 2 bf16/fp16)."""
    quantized_params: int
    quantized_linears: int
    """Quantized linear layers (each dequantized per call)."""
    quant_bytes: float
    policy_bytes: float
    """The policy's parameters as stored (quantized weights at their stored size)."""
    reference_gathered: bool
    """The forwards without gradient gather sharded parameters too (the reference lives in the policy, or is a
    separate model sharded with it)."""
    param_modules: int
    gather_units: int
    trl: bool = True
    """A TRL trainer runs the step (every cell of this project; the published rows ran other stacks)."""
    flops_scale: float = 1.0
    """Traced over analytic FLOPs of the cell's real step (scenarios/derived/traced_flops.json, `dpo-bench trace`);
    1 where the cell has no trace."""
    device: str = "cuda"
    """The profile's device kind (cuda, rocm, hpu, cpu): whether the settings' GPU factors apply (knob_factors.py)."""
    online: decode.OnlineCell | None = None
    """An online cell's generation (decode.py); None for an offline cell."""
    optimizer: str = DEFAULT_OPTIMIZER
    trained_tensors: tuple[tuple[int, int], ...] = ()
    """(rows, cols) of each trained tensor, for the optimizer's bytes (work.optimizer_param_bytes); empty: fused
    AdamW's fp32 bytes."""
    trained_bytes: int = 4
    """A trained parameter's and its gradient's bytes: the compute dtype's in pure 16-bit training."""
    paged: offload.PagedState = offload.NO_PAGED_STATE
    """A paged optimizer's state beside the rest of the process on the card (offload.evicted_paged_bytes)."""


def method_shape(shape: ModelShape, output: str) -> ModelShape:
    """A reward model's scalar head replaces the LM head (bench/judge/mfu.py's convention)."""
    if output != "scalar":
        return shape
    return replace(shape, matmul_params=shape.matmul_params - shape.lm_head_params + shape.hidden, lm_head_params=0)


def setup_for(plan: Plan, seq_len: float | None = None, online_row: bool = False) -> StepSetup:
    """`seq_len`: tokens per sequence (default the workload's max_length: full sequences; with `online_row`, an
    online cell's prompt and completion)."""
    cell, profile, workload = plan.cell, plan.profile, plan.workload
    method, init, quant = plan.method, plan.init, plan.quant
    online = _online(plan)
    if not seq_len and online_row and online is not None:
        seq_len = online.training_row
    backend, _ = effective_backend(plan)
    spec = backend_spec(backend)
    shapes = shapes_for(workload)
    found = model_shape(str(config_path(workload).parent))
    if found is None:
        raise ValueError(f"workload {workload.name}: no config.json to read the model's shape from")
    shape = method_shape(found, method.output)
    precomputed = plan.reference.precomputed
    checkpointing = workload.train.gradient_checkpointing and Option.NO_GRADIENT_CHECKPOINTING not in cell.options
    trainable = shapes.lora_params(workload.lora.r, workload.lora.target_modules) if init.adapters else shapes.total
    b = DTYPE_BYTES[COMPUTE_DTYPE[profile.precision]]
    lora_r = workload.lora.r if init.adapters else 0
    step = work.StepShape(
        shape=shape,
        seq_len=float(seq_len or workload.train.max_length),
        sequences=workload.train.per_device_train_batch_size * method.rows_per_example,
        trainable_params=trainable,
        adapters=init.adapters,
        checkpointing=checkpointing,
        no_grad_forwards=plan.no_grad_forwards,
        vocab=shapes.vocab,
        output=method.output,
        layer_bytes=work.model_layer_bytes(shapes, b, plan.cuda_autocast),
        adapter_bytes=_adapter_bytes(workload, method, shapes, b) if init.adapters else 0.0,
        head_recompute=method.output == "fused_logprobs",
        unrecomputed_params=unrecomputed_params(shapes, lora_r, workload.lora.target_modules, spec.zero_stage)
        if checkpointing and not _dropout_after_last_gemm(workload, method)
        else 0,
        adapter_no_grad_forwards=adapter_no_grad_forwards(method, init.reference, precomputed) if init.adapters else 0,
    )
    quantized = shapes.linear_weights if quant.quantized else 0
    q = quant.bytes_per_weight
    separate = init.reference == "separate_model" and not precomputed
    return StepSetup(
        step=step,
        backend=spec,
        world=plan.world,
        compute_bytes=b,
        quantized_params=quantized,
        quantized_linears=len(shapes.linears) if quant.quantized else 0,
        quant_bytes=q,
        policy_bytes=(shapes.total - quantized) * b + quantized * q,
        reference_gathered=not separate or spec.sharding.reference == Placement.SHARDED,
        param_modules=param_modules(len(shapes.linears), shapes.layers),
        gather_units=gather_units(shapes.layers),
        flops_scale=traced.ratio if (traced := traced_for(plan)) is not None else 1.0,
        device=plan.device,
        online=online,
        trained_bytes=b if plan.pure_bf16 else 4,
        **_optimizer_fields(plan, shapes, spec),
    )


def _optimizer_fields(plan: Plan, shapes: ModelShapes, spec: BackendSpec) -> dict:
    """StepSetup's optimizer, trained tensors and paged state (where the optimizer steps on the device: with an
    offloaded optimizer DeepSpeed's or torch's step runs on the host)."""
    optimizer = plan.workload.train.optim or DEFAULT_OPTIMIZER
    on_device = spec.sharding.optimizer != Placement.OFFLOADED
    trained = (
        shapes.lora_tensors(plan.workload.lora.r, plan.workload.lora.target_modules)
        if plan.init.adapters
        else shapes.full_tensors()
    )
    return {
        "optimizer": optimizer,
        "trained_tensors": tuple(trained),
        "paged": _paged_state(plan) if optimizer.startswith("paged_") and on_device else offload.NO_PAGED_STATE,
    }


def _paged_state(plan: Plan) -> offload.PagedState:
    """The planned cell's paged optimizer state beside the rest of its memory prediction (none off CUDA: no managed
    memory)."""
    return paged_state_of(predict(plan)) if plan.device == "cuda" else offload.NO_PAGED_STATE


def paged_state_of(memory: Prediction) -> offload.PagedState:
    """A memory prediction's paged optimizer state, what the rest of the process holds and the usable memory."""
    return offload.PagedState(memory.paged_bytes, memory.total_bytes or 0.0, memory.usable_bytes)


def param_modules(linears: int, layers: int) -> int:
    """Modules holding parameters that ZeRO-3 fetches one by one: the linears, two norms per layer, the embedding,
    the final norm and the head."""
    return linears + 2 * layers + 3


def gather_units(layers: int) -> int:
    """FSDP's wrapped units: one per decoder layer, and the root with the rest."""
    return layers + 1


def _online(plan: Plan) -> decode.OnlineCell | None:
    """What an online cell's generation depends on; None for an offline cell."""
    if not plan.method.generates:
        return None
    from bench.estimate.generation_terms import generation_of
    from bench.estimate.vllm_terms import vllm_use

    return decode.OnlineCell(
        workload=plan.workload,
        world=plan.world,
        generation=generation_of(plan.workload, plan.world),
        vllm=vllm_use(plan.cell, plan.workload) if plan.device == "cuda" else None,
        card_bytes=(plan.profile.memory_per_device_gb or 0) * 1e9,
    )


def step_terms(
    setup: StepSetup, device: DeviceFigures, constants: ClassConstants, host_bytes_s: float
) -> dict[str, float]:
    """Seconds per step by term, on one rank. `host_bytes_s`: the host's memory rate (CPU Adam of the offload
    backends: the update is memory-bound)."""
    step, spec, world = setup.step, setup.backend, setup.world
    sharding = spec.sharding
    optimizer_sharded = sharding.optimizer in (Placement.SHARDED, Placement.OFFLOADED) and world > 1
    updated = step.trainable_params / (world if optimizer_sharded else 1)
    optimizer_on_host = sharding.optimizer == Placement.OFFLOADED
    flops = work.step_flops(step) * setup.flops_scale
    attention_s = 0.0
    if device.attention_fraction < 1.0:
        flops = work.matmul_flops(step) * setup.flops_scale
        attention_s = work.attention_flops(step) * setup.flops_scale / (device.peak_flops * device.attention_fraction)
    compute_s = flops / (device.peak_flops * device.matmul_fraction * constants.efficiency)
    passes = work.weight_passes(step)
    dequant = work.dequant_bytes(setup.quantized_params, setup.quant_bytes, setup.compute_bytes, passes)
    terms = {
        "compute": compute_s,
        **({"attention": attention_s} if attention_s else {}),
        "logprob_tiles": work.logprob_bytes(step) / device.memory_bytes_s,
        "dequant": dequant / device.memory_bytes_s + quant_calls(setup) * constants.quant_call_s,
    }
    if constants.activation_traffic:
        terms["elementwise"] = work.activation_bytes(step) / device.memory_bytes_s
    sharded_engine = spec.deepspeed is not None or bool(spec.fsdp_version)
    master = setup.compute_bytes if sharded_engine and setup.compute_bytes < 4 else 0
    # DeepSpeed's CPU Adam steps an offloaded optimizer: fused AdamW's bytes at the host's rate
    per_param = None if optimizer_on_host else _optimizer_pass_bytes(setup)
    adam_s = work.optimizer_bytes(updated, master, per_param) / (
        host_bytes_s if optimizer_on_host else device.memory_bytes_s
    )
    terms["optimizer_cpu_adam" if optimizer_on_host else "optimizer"] = adam_s
    gathers = gathering_passes(setup)
    grad_bytes = step.trainable_params * setup.compute_bytes
    traffic = traffic_of(setup)
    comm_s = traffic.bytes / device.interconnect_bytes_s + traffic.calls * constants.collective_latency_s
    backward_s = (compute_s + attention_s) * work.backward_share(step)
    hideable = {"backward": backward_s, "forward_backward": compute_s + attention_s}.get(traffic.overlappable, 0.0)
    terms["communication"] = comm.exposed_seconds(comm_s, hideable, constants.overlap)
    if constants.overlap > 0 and traffic.overlappable == "forward_backward" and world > 1:
        terms["communication"] += first_fetch_seconds(setup, device)
    if spec.offloads:
        host = offload.optimizer_offload_bytes(grad_bytes / world, updated * setup.compute_bytes)
        if sharding.params == Placement.OFFLOADED:
            host += offload.param_offload_bytes(setup.policy_bytes / world, gathers)
        terms["offload_transfer"] = host / device.host_link_bytes_s
    if evicted := offload.evicted_paged_bytes(setup.paged):
        terms["paged_migration"] = offload.paged_migration_bytes(evicted) / device.host_link_bytes_s
    terms["overhead"] = (
        constants.step_overhead_s
        + (constants.multi_process_step_s if world > 1 else 0.0)
        + (constants.offload_step_s if spec.offloads else 0.0)
        + (constants.trl_step_s if setup.trl else 0.0)
    )
    if constants.layer_pass_s:
        terms["layer_launches"] = constants.layer_pass_s * work.layer_passes(step)
    return terms


def _optimizer_pass_bytes(setup: StepSetup) -> float | None:
    """work.optimizer_param_bytes of the setup's optimizer; None (fused AdamW in fp32) where no tensors are given."""
    if not setup.trained_tensors:
        return None
    return work.optimizer_param_bytes(setup.optimizer, list(setup.trained_tensors), setup.trained_bytes)


def online_terms(
    online: decode.OnlineCell, setup: StepSetup, device: DeviceFigures, constants: ClassConstants
) -> dict[str, float]:
    """An online cell's share of its generation per step (decode.py): the policy as stored, and each quantized
    weight's dequantized copy written and read, per decoding step, on this device's rates."""
    dequant = 2 * setup.quantized_params * setup.compute_bytes
    read = (setup.policy_bytes, dequant, setup.step.shape.matmul_params, setup.compute_bytes)
    rates = (device.memory_bytes_s, device.peak_flops * device.matmul_fraction * constants.efficiency)
    return decode.online_terms(online, read, (*rates, constants.layer_pass_s))


def first_fetch_seconds(setup: StepSetup, device: DeviceFigures) -> float:
    """What prefetching cannot hide under ZeRO-3 and FSDP: the first unit's gather of every gathering pass, which
    nothing computes beside (DeepSpeed's and FSDP's prefetch fetch the next unit while the current one computes)."""
    units = setup.gather_units if setup.backend.fsdp_version else setup.param_modules
    unit_bytes = setup.policy_bytes / max(1, units)
    return gathering_passes(setup) * comm.ring_gather_or_scatter(unit_bytes, setup.world) / device.interconnect_bytes_s


def quant_calls(setup: StepSetup) -> int:
    """Quantized linear calls per step: every quantized layer in every pass over the weights."""
    return setup.quantized_linears * work.weight_passes(setup.step)


def gathering_passes(setup: StepSetup) -> int:
    """Passes that gather sharded parameters: forward, backward, recompute, and the forwards without gradient
    where they run through sharded parameters."""
    step = setup.step
    return 2 + int(step.checkpointing) + (step.no_grad_forwards if setup.reference_gathered else 0)


def traffic_of(setup: StepSetup) -> comm.Traffic:
    grad_bytes = setup.step.trainable_params * setup.compute_bytes
    return comm.step_traffic(
        setup.backend,
        setup.world,
        grad_bytes,
        setup.policy_bytes,
        gathering_passes(setup),
        setup.param_modules,
        setup.gather_units,
    )


def unrecomputed_params(shapes: ModelShapes, lora_r: int, targets: list[str], zero_stage: int | None) -> int:
    """work.last_layer_gemms of the cell's model (`lora_r` 0 without adapters). Not where TRL turns the checkpoint
    reentrant (a PEFT model under ZeRO-3, trl/trainer/dpo_trainer.py: `gradient_checkpointing_kwargs["use_reentrant"]
    = True`), which recomputes all, nor for fused experts (not nn.Linear: the layer's last GEMM is not among them)."""
    if shapes.experts or (lora_r and zero_stage == 3):
        return 0
    linears = [(lin.name, lin.in_features, lin.out_features) for lin in shapes.linears]
    return work.last_layer_gemms(linears, lora_r, set(targets))


def _adapter_bytes(workload: Workload, method: MethodSpec, shapes: ModelShapes, b: int) -> float:
    """work.adapter_bytes of the workload's adapted linears, their dropout as the method's trainer leaves it."""
    adapted = [(lin.in_features, lin.out_features) for lin in shapes.lora_targets(workload.lora.target_modules)]
    return work.adapter_bytes(adapted, b, method.dropout_active(workload.lora.dropout))


def _dropout_after_last_gemm(workload: Workload, method: MethodSpec) -> bool:
    """A dropout still active in training after each decoder layer's last linear (shapes.last_gemm_dropout): it
    saves its mask for the backward, so the checkpoint's recompute runs through that linear again (no early stop
    before it). A module's is off where the method's trainer disables dropout (MethodSpec.disables_dropout)."""
    return method.dropout_active(*last_gemm_dropout(workload))


def adapter_no_grad_forwards(method: MethodSpec, reference: str, precomputed: bool) -> int:
    """Forwards without gradient through an active adapter: the method's extra ones (KTO's KL batch, through the
    policy) and the reference's where it is TRL's `ref` adapter (a disabled adapter costs nothing)."""
    through_ref = reference == "ref_adapter" and not precomputed
    return method.extra_forwards + (method.reference_forwards if through_ref else 0)


class SpeedPrediction(BaseModel):
    """PREDICTED, not measured: one cell's step time and throughput on one profile."""

    cell_id: str
    hardware: str
    status: str
    """`predicted`, `not_applicable`, or `not_modelled`: online RL's sampling (a prefill and one decoding step per
    completion token, memory-bound) is not in the step model, and a figure without it would be far too fast."""
    s_per_step: float | None = None
    s_per_step_low: float | None = None
    s_per_step_high: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_low: float | None = None
    tokens_per_s_high: float | None = None
    tokens_per_step: float | None = None
    """Over every rank: world x sequences x seq_len."""
    world_size: int = 1
    terms: dict[str, float] = {}
    """Seconds per step by term (one rank)."""
    mfu: float | None = None
    """The MFU the PREDICTED tokens/s implies (bench/judge/mfu.py's convention, the profile's peak), where
    matrix.speeds_for was asked for it and the profile has a peak."""


def predict_speed(
    plan: Plan,
    calibration: SpeedCalibration | None = None,
    seq_len: float | None = None,
    cpu: tuple[float, float, str] | None = None,
) -> SpeedPrediction:
    """`cpu`: (matmul GFLOP/s per thread, copy GB/s, where from) for a CPU profile; default: calibration's host."""
    cell, profile = plan.cell, plan.profile
    if plan.not_applicable_on_target is not None:
        return SpeedPrediction(cell_id=cell.id, hardware=profile.name, status="not_applicable")
    calibration = calibration or load_speed_calibration()
    host = calibration.host
    if cpu is None:
        cpu = (host.matmul_gflops, host.memory_gbps, f"this machine's microbenchmark, {host.measured_at}")
    device = device_figures(profile, cpu)
    constants = constants_for(calibration, device.device_class)
    setup = setup_for(plan, seq_len, online_row=True)
    factor = step_factor(setup.device, plan.workload.train)
    liger = liger_on(setup.device, plan.workload.train, cell.options)
    terms = knob_seconds(step_terms(setup, device, constants, host.memory_gbps * GB), factor, liger)
    if setup.online is not None:
        terms |= online_terms(setup.online, setup, device, constants)
    seconds = sum(terms.values())
    tokens = setup.world * setup.step.tokens
    low, high = seconds * math.exp(constants.log_error_low), seconds * math.exp(constants.log_error_high)
    return SpeedPrediction(
        cell_id=cell.id,
        hardware=profile.name,
        status="predicted",
        s_per_step=seconds,
        s_per_step_low=low,
        s_per_step_high=high,
        tokens_per_s=tokens / seconds,
        tokens_per_s_low=tokens / high,
        tokens_per_s_high=tokens / low,
        tokens_per_step=tokens,
        world_size=setup.world,
        terms=terms,
    )
