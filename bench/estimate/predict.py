"""Cell + hardware profile + workload -> a typed Prediction: per-device bytes at load and in training, the breakdown
by term, usable memory, verdict (fits, likely_fits, likely_oom, oom) and margin. Configs only; no weights, no device."""

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from bench.assets.prepare import LARGE_MODEL_PARAMS
from bench.estimate import VERSION, cpu_kernels, cpu_terms, gpu_terms, terms, uncertainty, vllm_terms
from bench.estimate import generation_terms as generation
from bench.estimate.knobs import Knobs, knobs_of
from bench.estimate.shapes import (
    Linear,
    ModelShapes,
    last_gemm_dropout,
    layer_saves,
    shapes_for,
)
from bench.estimate.uncertainty import MemoryVerdict
from bench.files import write_whole
from bench.matrix import precision as precisions
from bench.matrix.axes import Backend, Option
from bench.matrix.backends import BackendSpec, Placement, backend_spec
from bench.matrix.cell import Cell, CellAxes
from bench.matrix.inits import InitSpec, init_spec
from bench.matrix.methods import MethodSpec, method_spec
from bench.matrix.plan import Plan, plan_for
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.quants import quant_spec
from bench.matrix.reference import ReferencePlan, reference_plan
from bench.paths import DERIVED_DIR
from bench.results.cpu_features import CpuFeatures
from bench.units import GB, MiB

CALIBRATION_FILE = DERIVED_DIR / "calibration.json"


class DeviceConstants(BaseModel):
    """Per device kind, what is outside the modelled terms and cannot be derived; `fitted` names those calibrate.py
    fitted on measurements (the rest are priors). CUDA devices need none: bench/estimate/gpu_terms.py derives their
    context, workspaces, buffers and allocator overhead."""

    context_bytes: float = 0.0
    """Outside the measured peak: the library baseline on CPU (fitted), the device runtime's context elsewhere."""
    deepspeed_context_bytes: float | None = None
    """The same for a DeepSpeed cell when it differs (CPU: deepspeed's imports)."""
    allocator_slack: float = 0.0
    """Fraction on top of the peak that the device's allocator reserves (a prior where no mechanism is modelled)."""
    fitted: list[str] = []


class Calibration(BaseModel):
    version: str
    devices: dict[str, DeviceConstants]
    fitted_on: list[str] = []
    """Which records (run dir / cell) the fitted constants came from."""


def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    return Calibration.model_validate_json(path.read_text(encoding="utf-8"))


class Prediction(CellAxes):
    hardware: str
    workload: str
    estimator_version: str = VERSION
    status: Literal["predicted", "not_applicable"]
    reason: str = ""
    backend_run: str | None = None
    """The backend that will really run (FSDP on CPU runs as DDP)."""
    world_size: int = 1
    load_bytes: float | None = None
    """Per device after loading and preparing, before the first step."""
    memory_kind: Literal["cgroup", "rss", "cuda_allocated", "device"] | None = None
    """What train_bytes predicts: a CPU rank's cgroup or RSS peak above its library baseline (bench/judge/metrics.py),
    torch.cuda.max_memory_allocated, or the device's own figure (HPU)."""
    train_bytes: float | None = None
    """Per device peak in training, the figure `memory_kind` names."""
    terms: dict[str, float] = {}
    """Breakdown of train_bytes."""
    host_bytes: float = 0.0
    """Per rank in host memory, not on the device: the sum of host_terms on an accelerator; 0 on CPU, where the host
    is the device and the offloaded state is the `offloaded_to_host` term of train_bytes."""
    host_terms: dict[str, float] = {}
    """What an offload backend keeps in host memory per rank (params, gradients, optimizer_states, offload_buffers,
    reference_model)."""
    reserved_bytes: float | None = None
    """GPU: torch.cuda.max_memory_reserved (allocated + the caching allocator's rounding and fragmentation)."""
    nvidia_smi_bytes: float | None = None
    """GPU: the process's device memory as nvidia-smi / NVML show it (reserved + CUDA context + NCCL buffers + paged
    optimizer state)."""
    paged_bytes: float = 0.0
    """GPU: bitsandbytes' paged optimizer state (CUDA managed memory, evicted to the host under pressure)."""
    overhead_bytes: float | None = None
    """total - train: the library baseline (CPU); allocator, context, NCCL and paged state (GPU)."""
    total_bytes: float | None = None
    """What is held against usable memory: train + baseline (CPU); on a GPU the nvidia-smi figure less the paged
    optimizer state, which CUDA evicts to the host rather than fail an allocation."""
    range_low_bytes: float | None = None
    range_high_bytes: float | None = None
    """The stated interval (bench/estimate/uncertainty.LEVEL) of the measured total, from the errors of the pool
    `range_kind`: this kind of cell's (`error_kind`), or a wider one where it has too few rows."""
    error_kind: str | None = None
    range_kind: str | None = None
    range_rows: int | None = None
    usable_bytes: float | None = None
    fit_probability: float | None = None
    """The share of the pool's errors under which the measured total stays within usable memory."""
    verdict: MemoryVerdict | None = None
    """fits, likely_fits, likely_oom, oom (from fit_probability, bench/estimate/uncertainty.verdict), unknown."""
    margin_bytes: float | None = None
    """usable - total (negative: short by that much)."""
    notes: list[str] = []


def effective_backend(plan: Plan) -> tuple[Backend, list[str]]:
    """The backend that really runs, with a note where it is not the cell's (FSDP on CPU runs as DDP)."""
    if plan.backend.fsdp_version and plan.device == "cpu":
        return Backend.DDP, ["FSDP through accelerate/TRL runs as DDP on CPU (silent fallback): predicted as DDP"]
    return plan.cell.backend, []


def usable_bytes(profile: HardwareProfile) -> float | None:
    if profile.device == "cpu":
        return None if profile.memory_budget_bytes is None else float(profile.memory_budget_bytes)
    return None if profile.memory_per_device_gb is None else profile.memory_per_device_gb * GB


PAGED = "paged_optimizer_state"
"""A train_terms key outside the allocated figure: bitsandbytes' paged states live in CUDA managed memory."""


def predict_cell(
    cell: Cell,
    profile: HardwareProfile,
    workload: Workload,
    calibration: Calibration | None = None,
    knobs: Knobs | None = None,
    spreads: uncertainty.Spreads | None = None,
    cpu: CpuFeatures | None = None,
) -> Prediction:
    """`predict` of `cell` on `profile` with `workload`, resolved here: for a caller that holds the three."""
    return predict(plan_for(cell, profile, workload), calibration, knobs, spreads, cpu)


def predict(
    plan: Plan,
    calibration: Calibration | None = None,
    knobs: Knobs | None = None,
    spreads: uncertainty.Spreads | None = None,
    cpu: CpuFeatures | None = None,
) -> Prediction:
    """The per-device memory of the planned cell. `cpu`: the CPU features of the machine the cell runs on (env.json
    `cpu_features`), which choose the kernels of a CPU cell's bf16 matmuls (bench/estimate/cpu_kernels.py); None:
    the CPU the CPU figures were validated on (AMD EPYC)."""
    profile, workload = plan.profile, plan.workload
    base = CellAxes.of(plan.cell) | {"hardware": profile.name, "workload": workload.name}
    if (reason := plan.not_applicable_on_target) is not None:
        return Prediction(**base, status="not_applicable", reason=reason)
    calibration = calibration or load_calibration()
    const = calibration.devices.get(str(profile.device), DeviceConstants())
    backend, notes = effective_backend(plan)
    knobs = knobs or knobs_of(workload)
    precision, master = precisions.in_effect(knobs.precision, profile.precision, knobs.master_weights)
    if (precision, master) != (profile.precision, knobs.master_weights):
        plan = replace(plan, profile=profile.model_copy(update={"precision": precision}))
        knobs = knobs.model_copy(update={"master_weights": master})
    s = _setting(plan, backend, shapes_for(workload), knobs)
    terms_, load, host_terms = train_terms(s, cpu)
    notes += _vllm(s, terms_)
    note = precisions.note(knobs.precision, precision, master)
    notes += [note] if note else []
    if profile.device == "cpu" and _cpu_bf16_matmuls(s):
        notes.append(_kernels_note(cpu, terms_.get("onednn_bf16_kernels", 0.0)))
    host = sum(host_terms.values())
    paged = terms_.pop(PAGED, 0.0)
    gpu = _cuda_figures(profile, notes)
    if gpu is not None:
        terms_["cublas_workspaces"] = gpu_terms.cublas_workspaces(gpu)
    t = _totals(s, const, gpu, terms_, host, paged)
    judged = _judged(s, t, spreads)
    return Prediction(
        **base,
        status="predicted",
        backend_run=str(backend),
        world_size=plan.world,
        load_bytes=load,
        memory_kind=t.kind,
        train_bytes=t.train,
        terms={k: v for k, v in terms_.items() if v},
        host_bytes=t.host,
        host_terms={k: v for k, v in host_terms.items() if v},
        reserved_bytes=t.reserved,
        nvidia_smi_bytes=t.smi,
        paged_bytes=paged,
        overhead_bytes=t.total - t.train,
        total_bytes=t.total,
        **judged,
        notes=notes,
    )


def _cuda_figures(profile: HardwareProfile, notes: list[str]) -> gpu_terms.CudaFigures | None:
    """The profile's GPU's CUDA figures (None off CUDA: only NVIDIA catalog entries have them); a CUDA profile whose
    GPU has none is taken as the reference GPU, with a note."""
    gpu = gpu_terms.gpu_of(profile)
    if profile.device == "cuda" and gpu is None:
        notes.append(
            f"GPU of profile {profile.name} ({profile.gpu}) has no CUDA figures: taken as {gpu_terms.REFERENCE_GPU}"
        )
        gpu = gpu_terms.gpu_named(gpu_terms.REFERENCE_GPU)
    return gpu


def _judged(s: "_Setting", t: "_Totals", spreads: uncertainty.Spreads | None) -> dict[str, object]:
    """The prediction's range, probability of fitting, verdict and margin, from the errors of comparable cells
    (bench/estimate/uncertainty.py)."""
    usable = s.usable
    setup = uncertainty.setup_kind(s.init.adapters, s.quantized)
    error_kind = uncertainty.cell_kind(s.device, t.kind, str(s.backend), s.method.name, setup)
    pool = uncertainty.spread_for(error_kind, spreads if spreads is not None else uncertainty.load_spreads())
    spread = None if pool is None else pool[1]
    # a CPU cell's errors are of its model memory (train), the library baseline added after
    figure, baseline = (t.train, t.total - t.train) if s.device == "cpu" else (t.total, 0.0)
    bounds = uncertainty.measured_range(figure, spread, baseline)
    probability = (
        None if spread is None or usable is None else uncertainty.fit_probability(figure, usable, spread, baseline)
    )
    return {
        "range_low_bytes": None if bounds is None else bounds[0],
        "range_high_bytes": None if bounds is None else bounds[1],
        "error_kind": error_kind,
        "range_kind": None if pool is None else pool[0],
        "range_rows": None if spread is None else spread.rows,
        "usable_bytes": usable,
        "fit_probability": probability,
        "verdict": uncertainty.verdict(t.total, usable, probability),
        "margin_bytes": None if usable is None else usable - t.total,
    }


@dataclass(frozen=True)
class _Totals:
    """What the device's own figure adds up to: `train` the training peak (on CPU with the offloaded state, which
    lives in the same memory), `total` what is held against usable memory, `reserved` and `smi` the CUDA caching
    allocator's and nvidia-smi's figures, `host` what stays in host memory per rank."""

    kind: str
    train: float
    total: float
    reserved: float | None
    smi: float | None
    host: float


def _totals(
    s: "_Setting",
    const: DeviceConstants,
    gpu: gpu_terms.CudaFigures | None,
    terms_: dict[str, float],
    host: float,
    paged: float,
) -> _Totals:
    """The device's figures from the terms: on CPU the process above its library baseline (the offloaded state
    included), on CUDA allocated, reserved and the nvidia-smi figure, elsewhere allocated plus the device's slack.
    On CPU `terms_` gains the offloaded state as a term."""
    world = s.world
    train = sum(terms_.values())
    if s.device == "cpu":
        deepspeed = s.spec.deepspeed is not None
        context = const.deepspeed_context_bytes if deepspeed and const.deepspeed_context_bytes is not None else None
        train += host  # offloaded state is in the same (host) memory
        terms_["offloaded_to_host"] = host
        total = train + (const.context_bytes if context is None else context)
        return _Totals(cpu_terms.memory_kind(s.memory_budget_bytes), train, total, None, None, 0.0)
    if gpu is not None:
        transient = max(terms_.get(k, 0.0) for k in (*OUTPUT_TERMS, "recomputed_layer", "dequant_buffer"))
        reserved = train + gpu_terms.allocator_overhead(_large_tensors(s), transient, s.knobs.expandable_segments)
        nccl = gpu_terms.nccl_buffers(gpu, world) + gpu_terms.nccl_communicator(world, s.spec.deepspeed is not None)
        outside = gpu_terms.cuda_context(gpu) + gpu_terms.training_kernels(gpu) + nccl
        reserved = _card_bounded(reserved, _length_history(s), s.usable, gpu, outside)
        total = reserved + outside
        # managed memory yields: CUDA pages it out to the host before an allocation fails
        return _Totals("cuda_allocated", train, total, reserved, total + paged, host)
    total = train + const.context_bytes + const.allocator_slack * train
    return _Totals("device", train, total, None, None, host)


def _card_bounded(
    reserved: float, history: float, usable: float | None, gpu: gpu_terms.CudaFigures, outside: float
) -> float:
    """reserved with what earlier steps left cached added, no higher than what the card (the profile's usable
    memory, else its GPU's in the catalog) leaves beside what is held outside the allocator: where cudaMalloc fails,
    the caching allocator releases every unused cached segment and retries (CUDACachingAllocator.cpp
    `release_cached_blocks`)."""
    card = gpu.memory_bytes if usable is None else usable
    return max(reserved, min(reserved + history, card - outside))


def _large_tensors(s: "_Setting") -> int:
    """Resident tensors above the caching allocator's 10 MiB large-segment threshold: weight matrices (and the
    reference's), with a full fine-tune also each one's gradient and two optimizer states."""
    matrices = [r * c for r, c in s.shapes.full_tensors() if c > 1]
    large = sum(1 for n in matrices if n * s.b > 10 * MiB)
    init = s.init
    reference = init.reference == "separate_model" and s.method.reference
    copies = 1 + reference + 3 * (not init.adapters)
    return large * copies


def method_of(cell: Cell, knobs: Knobs) -> MethodSpec:
    """The training method: the knob where set, else the cell's (bench/matrix/methods.py)."""
    return method_spec(knobs.method or cell.method)


@dataclass(frozen=True)
class _Setting:
    """What every section of train_terms reads, taken off the Plan once (`_setting`): the cell, the profile's figures
    the terms need, where its backend places each kind of state, its precision, method and model."""

    cell: Cell
    workload: Workload
    world: int
    device: str
    """The profile's device kind (cuda, rocm, hpu, cpu)."""
    precision: str
    """The profile's precision in effect (fp32, bf16, fp16)."""
    device_count: int
    memory_budget_bytes: int | None
    """A CPU rank's memory budget (the profile's), None: none."""
    usable: float | None
    """A device's usable bytes (`usable_bytes`)."""
    backend: Backend
    """The backend that really runs (effective_backend)."""
    shapes: ModelShapes
    knobs: Knobs
    spec: BackendSpec
    b: int
    """Bytes of a parameter in the compute dtype."""
    stage: int | None
    """DeepSpeed's ZeRO stage; None off DeepSpeed."""
    offload: bool
    """ZeRO-Offload: DeepSpeed steps the optimizer on the host."""
    offload_params: bool
    params_at: Placement
    optimizer_at: Placement
    grads_at: Placement
    reference_at: Placement
    checkpointing: bool
    liger: bool
    method: MethodSpec
    reference: ReferencePlan
    init: InitSpec
    quantized: bool
    linear: int
    total: int
    """Parameters of the model the method trains (a reward model's score head in place of the LM head)."""
    other: int


def _placements(spec: BackendSpec, knobs: Knobs) -> tuple[bool, tuple[Placement, Placement, Placement, Placement]]:
    """(parameters on the host, where the parameters, optimizer state, gradients and reference live). Parameters are
    on the host by the backend's own placement (zero3_offload_param, fsdp_offload) or the knob (ZeRO-3's
    offload_param, FSDP's CPUOffloadPolicy: parameters, gradients, optimizer state and a sharded reference)."""
    sharding = spec.sharding
    fsdp_offload = spec.fsdp_version is not None and knobs.offload_params
    on_host = sharding.params == Placement.OFFLOADED or (knobs.offload_params and spec.zero_stage == 3) or fsdp_offload
    if fsdp_offload:
        return on_host, (Placement.OFFLOADED,) * 4
    return on_host, (sharding.params, sharding.optimizer, sharding.grads, sharding.reference)


def _setting(plan: Plan, backend: Backend, shapes: ModelShapes, knobs: Knobs) -> _Setting:
    cell, profile, workload = plan.cell, plan.profile, plan.workload
    spec = backend_spec(backend)
    b = precisions.DTYPE_BYTES[precisions.COMPUTE_DTYPE[profile.precision]]
    stage = spec.zero_stage
    offload = spec.deepspeed is not None and spec.deepspeed.offload_optimizer is not None
    offload_params, (params_at, optimizer_at, grads_at, reference_at) = _placements(spec, knobs)
    checkpointing = (
        workload.train.gradient_checkpointing and Option.NO_GRADIENT_CHECKPOINTING not in cell.options
        if knobs.gradient_checkpointing is None
        else knobs.gradient_checkpointing
    )
    liger = Option.LIGER in cell.options if knobs.liger is None else knobs.liger
    method = method_of(cell, knobs)
    linear = shapes.linear_weights
    # A reward model has a one-output score head where the causal LM has its LM head (an untied one is V x H).
    total = shapes.total - shapes.lm_head + shapes.hidden if method.output == "scalar" else shapes.total
    other = total - linear
    return _Setting(
        cell=cell,
        workload=workload,
        world=plan.world,
        device=str(profile.device),
        precision=profile.precision,
        device_count=profile.device_count,
        memory_budget_bytes=profile.memory_budget_bytes,
        usable=usable_bytes(profile),
        backend=backend,
        shapes=shapes,
        knobs=knobs,
        spec=spec,
        b=b,
        stage=stage,
        offload=offload,
        offload_params=offload_params,
        params_at=params_at,
        optimizer_at=optimizer_at,
        grads_at=grads_at,
        reference_at=reference_at,
        checkpointing=checkpointing,
        liger=liger,
        method=method,
        reference=_reference(plan, method.name),
        init=plan.init,
        quantized=plan.quant.quantized,
        linear=linear,
        total=total,
        other=other,
    )


def _reference(plan: Plan, method: str) -> ReferencePlan:
    """The planned cell's reference were it trained by `method` (the method knob may change it)."""
    if method == plan.cell.method:
        return plan.reference
    return reference_plan(plan.cell.model_copy(update={"method": method}), plan.settings, plan.workload)


@dataclass(frozen=True)
class _Weights:
    full: float
    """The model's weights as stored on the device before any sharding."""
    keep: int
    """Bytes of a non-quantized parameter as kept (fp32 where prepare_model_for_kbit_training upcasts it)."""
    fsdp_upcast: bool
    param_b: int
    """Bytes of a trained parameter."""
    stored: int
    """Bytes of an unquantized weight as loaded (terms.stored_weight_bytes)."""


def _weights(s: _Setting) -> _Weights:
    """Weights: quantized models get their non-quantized params upcast to fp32 by prepare_model_for_kbit_training
    (two_adapters, bench/worker/models.py), which DeepSpeed's engine casts back to its 16-bit dtype with every other
    floating-point param (`stored`); FSDP2 with mixed precision upcasts all params to fp32 (accelerate)."""
    b, knobs, quantized, init, spec = s.b, s.knobs, s.quantized, s.init, s.spec
    linear, other, total, shapes, quant = s.linear, s.other, s.total, s.shapes, str(s.cell.quant)
    engine_casts = spec.deepspeed is not None
    stored = terms.stored_weight_bytes(s.precision, quantized, engine_casts)
    upcast = quantized and init.reference == "ref_adapter" and knobs.master_weights and not engine_casts
    keep = 4 if upcast else stored
    head = shapes.lm_head if quantized and knobs.quantized_head else 0
    full = terms.weight_bytes(linear + head, shapes.linear_rows, other - head, quant, stored, keep)
    fsdp_upcast = spec.fsdp_version is not None and b != 4 and not quantized and knobs.master_weights
    if fsdp_upcast:
        full = total * 4
    param_b = 4 if fsdp_upcast else stored
    return _Weights(full=full, keep=keep, fsdp_upcast=fsdp_upcast, param_b=param_b, stored=stored)


@dataclass(frozen=True)
class _Trainable:
    tensors: list[tuple[int, int]]
    """(rows, columns) of every trained tensor."""
    params: int
    bytes: int
    """Bytes of a trained parameter."""
    head: bool
    """The LM head is trained (a full fine-tune)."""
    adapters: float
    """The adapters' bytes, with two_adapters' frozen `ref` copy."""
    optimizer: terms.OptimizerState


def _trainable(s: _Setting, weights: _Weights) -> _Trainable:
    """The trainable parameters, their dtype and their optimizer's state."""
    init, method, shapes, total, knobs, stage, b = s.init, s.method, s.shapes, s.total, s.knobs, s.stage, s.b
    quantized, workload, param_b = s.quantized, s.workload, weights.param_b
    if not init.adapters:
        trainable, train_b = total, param_b
        tensors = shapes.full_tensors()
        if method.output == "scalar":
            # the score head in place of the LM head; an untied LM head has the embedding's shape: drop one of the two
            if shapes.lm_head:
                tensors.remove((shapes.vocab, shapes.lm_head // shapes.vocab))
            tensors.append((shapes.hidden, 1))
        head_trainable = True
    else:
        tensors = shapes.lora_tensors(workload.lora.r, workload.lora.target_modules)
        trainable = sum(r * c for r, c in tensors)
        head_trainable = False
        if not knobs.master_weights:
            train_b = b  # pure 16-bit training: adapters in the compute dtype
        elif quantized:
            train_b = 2 if _bf16_adapters(method, s.cell, s.precision) else 4
        elif stage == 3:
            train_b = b  # TRL passes autocast_adapter_dtype=False under ZeRO-3
        else:
            train_b = 4  # PEFT's autocast_adapter_dtype=True: adapters in fp32
    reference = method.reference
    adapters = trainable * train_b * (init.adapter_copies if reference else min(init.adapter_copies, 1))
    optimizer = terms.optimizer_state(knobs.optimizer, tensors, train_b, s.device)
    return _Trainable(tensors, trainable, train_b, head_trainable, adapters, optimizer)


def _zero_state(s: _Setting, weights: _Weights, t: _Trainable, out: dict[str, float], host: dict[str, float]) -> float:
    """DeepSpeed: ZeRO-Offload moves the fp32 gradient partitions, master weights and Adam moments (16 T/N) to the
    host and steps there; ZeRO-3's offload_param moves the parameter partitions too. Returns the gradient partitions
    a ZeRO-1/2 engine keeps through the step (0 elsewhere)."""
    stage, world, offload, offload_params, shapes = s.stage, s.world, s.offload, s.offload_params, s.shapes
    full, adapters, param_b = weights.full, t.adapters, weights.param_b
    trainable, train_b, tensors = t.params, t.bytes, t.tensors
    zero2_grads = 0.0
    out["weights"] = full if stage < 3 else 0.0 if offload_params else full / world
    out["adapters"] = adapters if stage < 3 else 0.0 if offload_params else adapters / world
    if offload_params:
        host["params"] = (full + adapters) / world
    if stage == 3:
        out["zero3_gathered_layer"] = 2 * param_b * shapes.largest_layer
    if offload:
        host["optimizer_states"] = terms.zero_offloaded_host(trainable, world)
        if stage < 3:
            # the largest tensor the optimizer steps: the embedding for a full fine-tune, a LoRA matrix else
            largest = max(r * c for r, c in tensors)
            host["offload_buffers"], out["offload_staging"] = terms.zero2_offload_buffers(
                trainable, train_b, world, largest
            )
    elif stage < 3:
        out["optimizer_master"] = terms.zero2_resident_states(trainable, world)
        zero2_grads = terms.zero2_gradient_partitions(trainable, train_b, world)
    else:
        out["grads_optimizer_master"] = 16 * trainable / world
    return zero2_grads


def _placed_state(s: _Setting, weights: _Weights, t: _Trainable, out: dict[str, float], host: dict[str, float]) -> None:
    """Any other backend: weights, adapters and optimizer state where its sharding places them."""
    params_at, optimizer_at, world, devices = s.params_at, s.optimizer_at, s.world, s.device_count
    full, adapters, optimizer = weights.full, t.adapters, t.optimizer
    out["weights"] = terms.placed(full, params_at, world, devices)
    out["adapters"] = terms.placed(adapters, params_at, world, devices)
    host["params"] = terms.offloaded(full + adapters, params_at, world)
    out["optimizer"] = terms.placed(optimizer.resident, optimizer_at, world, devices)
    host["optimizer_states"] = terms.offloaded(optimizer.resident, optimizer_at, world)


def _reference_model(s: _Setting, weights: _Weights, out: dict[str, float], host: dict[str, float]) -> None:
    """The reference model: a second copy of the weights for two_models, placed as the backend places it. TRL keeps a
    passed ref_model also with precompute_ref; the recipe may replace it by precomputed log-probs
    (bench/matrix/reference.py)."""
    full, fsdp_upcast, total, stored = weights.full, weights.fsdp_upcast, s.total, weights.stored
    reference_at, world, devices = s.reference_at, s.world, s.device_count
    if s.method.reference and s.reference.separate_model:
        reference_bytes = full if not fsdp_upcast else total * stored
        out["reference_model"] = terms.placed(reference_bytes, reference_at, world, devices)
        host["reference_model"] = terms.offloaded(reference_bytes, reference_at, world)


def _buckets(s: _Setting, t: _Trainable) -> dict[str, float]:
    """Communication buffers."""
    backend, stage, spec, shapes, b = s.backend, s.stage, s.spec, s.shapes, s.b
    trainable, train_b = t.params, t.bytes
    if backend == Backend.DDP:
        return {"ddp_buckets": terms.ddp_buckets(trainable, train_b)}
    elif stage == 3:
        return {"zero_buckets": terms.zero_buckets(trainable, train_b, stage, touched_only=s.device == "cpu")}
    elif spec.fsdp_version:
        return {"fsdp_gather": terms.fsdp_gather(shapes.largest_block, b)}
    return {}


def _peak_phase(
    s: _Setting, t: _Trainable, zero2_grads: float, host: dict[str, float]
) -> tuple[dict[str, float], float]:
    """The step's peak, the largest of its phases: the LM head's backward (the head's temporaries + accumulators +
    the activations saved so far), a decoder layer's backward (its recompute where checkpointed, its temporaries),
    the end of backward (every gradient) and the optimizer step (gradients + the step's temporaries). Returns the
    peak phase's terms and the bytes of every gradient."""
    knobs, shapes, b = s.knobs, s.shapes, s.b
    checkpointing, spec, stage, world, offload = s.checkpointing, s.spec, s.stage, s.world, s.offload
    grads_at, devices = s.grads_at, s.device_count
    trainable, train_b, tensors, optimizer, head_trainable = t.params, t.bytes, t.tensors, t.optimizer, t.head
    rows, seq, per_layer = _layer_activations(s)
    tokens = rows * seq
    saved = terms.saved_activations(shapes.layers, per_layer, tokens, shapes.hidden, b, checkpointing)
    lora_layer = _lora_copies(s, t, tokens)
    lora_saved = 0.0 if checkpointing else shapes.layers * lora_layer
    split = devices if spec.splits_layers else 1
    at_head, at_recompute, kept_previous = _quantized_saved(s, tokens, split)
    head_name, head = _loss_head(s, rows, seq, head_trainable, train_b)
    grads_full = trainable * train_b
    # ZeRO-3: gradients go through the reduce bucket into the partitions counted above; offloaded ones to the host.
    grads = terms.placed(grads_full, grads_at, world, devices) if stage is None else 0.0
    if stage is None:
        host["gradients"] = terms.offloaded(grads_full, grads_at, world)
    if knobs.optimizer_in_backward:
        grads = min(grads, max(r * c for r, c in tensors) * train_b)
    bucket_at_head = 0.0
    phase_end = grads
    if stage in (1, 2):
        # The reduce bucket is allocated at each backward's start (setup_buckets) and released at its end, before
        # the step; the gradient partitions live from the end of backward through the step. On the CPU only the
        # bucket's touched pages count, and none are touched yet while the LM head's backward runs.
        bucket = terms.zero_buckets(trainable, train_b, stage, touched_only=s.device == "cpu")
        bucket_at_head = 0.0 if s.device == "cpu" else bucket
        # With the optimizer offloaded the reduced partition goes straight from the bucket to the host.
        phase_end = bucket if offload else max(bucket + trainable * train_b / world, zero2_grads)
    phases = {
        "head": {
            "activations": saved / split,
            "lora_input_copies": lora_saved / split,
            **at_head,
            head_name: head,
            "zero_buckets": bucket_at_head,
        },
        "recompute": {
            "activations": saved / split,
            "lora_input_copies": (lora_layer if checkpointing else lora_saved / split),
            **at_recompute,
            "recomputed_layer": per_layer if checkpointing else 0.0,
            "layer_backward": _layer_backward(s, tokens),
            "gradients": grads,
            "zero_buckets": bucket_at_head,
        },
        "end": {"zero2_end_of_backward": phase_end} if stage in (1, 2) else {"gradients": grads},
        "step": {"gradients": grads, "optimizer_step_temporaries": optimizer.step_temporaries},
    }
    phases |= _no_grad_phases(s, per_layer, tokens, split)
    if kept_previous:
        phases["next_forward"] = _next_forward(phases["head"], head_name, kept_previous, s)
    return max(phases.values(), key=lambda phase: sum(phase.values())), grads_full


def _layer_backward(s: _Setting, tokens: int) -> float:
    """A decoder layer's backward temporaries (terms.layer_backward_temporaries) over the step's tokens."""
    shapes = s.shapes
    return terms.layer_backward_temporaries(tokens, shapes.hidden, shapes.intermediate, s.b, shapes.gated_mlp)


def _quantized_saved(s: _Setting, tokens: int, split: int) -> tuple[dict[str, float], dict[str, float], float]:
    """What a quantized model saves beyond `layer_activations`: (terms at the LM head's backward, terms during a
    recomputed layer, the previous step's kept inputs alive through the next forward, 0 with checkpointing)."""
    kept_layer, kept_previous = _bnb_kept_inputs(s, tokens)
    layers = s.shapes.layers
    kept = 0.0 if s.checkpointing else layers * kept_layer / split
    fp32_inputs = _fp32_residual(s) and s.checkpointing  # without checkpointing the norms keep them (norm_bytes)
    fp32 = {"fp32_layer_inputs": _fp32_layer_inputs(s, tokens) / split} if fp32_inputs else {}
    at_head = ({"bnb_kept_inputs": kept} if kept else {}) | fp32
    at_recompute = ({"bnb_kept_inputs": kept_layer if s.checkpointing else kept} if kept_layer else {}) | fp32
    return at_head, at_recompute, 0.0 if s.checkpointing else kept_previous * layers / split


def _bnb_kept_inputs(s: _Setting, tokens: int) -> tuple[float, float]:
    """(one layer's inputs the step's 4-bit linears keep, one layer's of the previous step still held) under
    Knobs.bnb_kept_inputs (terms.bnb_kept_inputs); 0 for a model not quantized to 4 bits."""
    kept = s.knobs.bnb_kept_inputs
    if kept == "none" or not s.quantized or s.cell.quant != "nf4":
        return 0.0, 0.0
    shapes = s.shapes
    layer = terms.bnb_kept_inputs(tokens, shapes.hidden, shapes.intermediate, s.b)
    return layer, layer if kept == "previous_step" else 0.0


def _fp32_residual(s: _Setting) -> bool:
    """A 4-bit LayerNorm model under CUDA's autocast (terms.fp32_layer_inputs)."""
    return s.cell.quant == "nf4" and _autocast(s) and s.shapes.layer_norm


def _autocast(s: _Setting) -> bool:
    """The step runs under CUDA's autocast (precision.cuda_autocast)."""
    deepspeed = s.spec.deepspeed is not None
    return precisions.cuda_autocast(s.device, s.precision, s.knobs.master_weights, deepspeed)


def _fp32_layer_inputs(s: _Setting, tokens: int) -> float:
    return terms.fp32_layer_inputs(s.shapes.layers, tokens, s.shapes.hidden, s.b)


def _next_forward(head: dict[str, float], head_name: str, previous: float, s: _Setting) -> dict[str, float]:
    """The end of the next step's forward while the previous step's graph is still referenced (LitGPT's loop
    replaces `logits` only once the forward returns): the head phase's activations with the previous step's kept
    inputs, and the new logits in the compute dtype in place of the loss's head."""
    rows, seq, _ = _layer_activations(s)
    logits = rows * seq * s.shapes.vocab * s.b if s.knobs.loss != "fused" else 0.0
    phase = {k: v for k, v in head.items() if k != head_name}
    return phase | {"bnb_previous_step_inputs": previous, "next_forward_logits": logits}


def _loss_head(s: _Setting, rows: int, seq: int, head_trainable: bool, train_b: int) -> tuple[str, float]:
    """(term name, bytes) of the step's output head: `output_head`, or a loss over materialised logits."""
    if s.knobs.loss != "fused" and s.method.output == "fused_logprobs":
        return _materialised_head(s, rows * seq, train_b * head_trainable)
    return output_head(s.method, rows, seq, s.shapes, s.b, s.device, head_trainable)


def _length_history(s: _Setting) -> float:
    """What earlier, shorter record steps leave reserved (gpu_terms.earlier_records): the output head's transient
    (without the head's weight gradient) at each class of lengths, its largest tensor taken as one [rows, length,
    vocabulary] logits tensor in the compute dtype. 0 where the rows are of one length, where expandable segments
    reuse any freed range, or where the lengths are generated."""
    spread = s.knobs.length_spread
    if spread is None or s.knobs.expandable_segments or s.method.generates:
        return 0.0
    rows, seq, _ = _layer_activations(s)
    lengths = gpu_terms.length_buckets(rows * s.shapes.vocab * s.b, seq)
    return gpu_terms.earlier_records(spread, rows, [(n, _loss_head(s, rows, n, False, 0)[1]) for n in lengths])


def _materialised_head(s: _Setting, tokens: int, head_gradient_bytes: int) -> tuple[str, float]:
    """(term name, bytes) of a loss over the full vocabulary (`Knobs.loss` other than TRL's fused head): the logits
    as the loss keeps them, or with Liger on a GPU its fused linear cross-entropy's chunk; + the head's weight
    gradient (`head_gradient_bytes` per weight)."""
    shapes, b = s.shapes, s.b
    gradient = shapes.vocab * shapes.hidden * head_gradient_bytes
    if s.liger and s.device == "cuda":
        return "liger_fused_linear_ce", terms.liger_fused_linear_ce(tokens, shapes.hidden, shapes.vocab, b) + gradient
    per_logit = terms.logits_bytes_per_element(s.knobs.loss, b, s.knobs.torch_compile)
    return "lm_head_backward", tokens * shapes.vocab * per_logit + gradient


def _row_length(s: _Setting) -> int:
    """A training row's most tokens: max_length, or for an online method a prompt and one sampled completion."""
    knobs, workload = s.knobs, s.workload
    if s.method.generates:
        return generation.generation_of(workload, s.world, knobs.batch_size, knobs.max_length).sequence
    return knobs.max_length or workload.train.max_length


def _layer_activations(s: _Setting) -> tuple[int, int, float]:
    """(rows, sequence length, one decoder layer's activations) of a step's micro-batch."""
    method, knobs, workload, shapes = s.method, s.knobs, s.workload, s.shapes
    rows = method.rows_per_example * (knobs.batch_size or workload.train.per_device_train_batch_size)
    seq = _row_length(s)
    attention = knobs.attention or "sdpa"
    kv_dim = shapes.kv_heads * shapes.head_dim
    per_layer = terms.layer_activations(
        rows * seq,
        rows,
        seq,
        shapes.hidden,
        kv_dim,
        shapes.intermediate,
        shapes.heads,
        s.b,
        attention=_attention_kernel(attention, s.device),
        clamped=knobs.eager_clamp,
        saved=_layer_saved(s),
    )
    if knobs.litgpt_model:
        padded = _padded_qkv_outputs(shapes.lora_targets(workload.lora.target_modules)) if s.init.adapters else 0
        per_layer += terms.litgpt_attention(rows * seq, shapes.hidden, kv_dim, padded // shapes.layers, s.b)
    return rows, seq, per_layer


def _attention_kernel(attention: str, device: str) -> terms.AttentionKernel:
    """The kernel an attention implementation runs: eager as transformers writes it; sdpa on a CPU its math path
    (validated so), else a fused kernel."""
    if attention == "eager":
        return "eager"
    return "math" if attention == "sdpa" and device == "cpu" else "fused"


def _layer_saved(s: _Setting) -> terms.LayerSaved:
    """The model's LayerSaves in the step's dtype, with the trained linears' inputs where the base trains: the
    attention's, o_proj's and the MLP's (3H), the down projection's (I), and for RMSNorm its normalised output in
    the compute dtype, kept for its weight's gradient (H; measured on Llama-2-7B's shapes: 4H + I in all); and the
    masks of an architecture's two residual dropouts (after attention and after the MLP) where they stay active
    (shapes.LAST_GEMM_DROPOUT): a bool mask on a GPU, on a CPU the scaled noise in the compute dtype (measured)."""
    saves = layer_saves(s.workload, s.b, _autocast(s), native_activation=s.knobs.litgpt_model)
    hidden, intermediate = s.shapes.hidden, s.shapes.intermediate
    trained = 0 if s.init.adapters else (3 + (not s.shapes.layer_norm)) * hidden + intermediate
    litgpt = s.knobs.litgpt_model  # LitGPT's blocks have no dropout besides LoRA's
    masks = 2 if not litgpt and s.method.dropout_active(*last_gemm_dropout(s.workload)) else 0
    return terms.LayerSaved(
        norms=saves.norms,
        norm_bytes=saves.norm_bytes,
        mlp_bytes=saves.mlp_bytes - s.b if s.liger and saves.gated else saves.mlp_bytes,
        trained_inputs=trained,
        dropout_mask_bytes=masks * (1 if s.device == "cuda" else s.b),
    )


def _lora_copies(s: _Setting, t: _Trainable, tokens: int) -> float:
    """One decoder layer's LoRA input copies saved for backward on a GPU (terms.lora_input_copies). Not on CPU, whose
    figures are validated without it: fp32 adapters over fp32 activations make no copy there; the bf16 adapters of
    quantized CPU cells would, a copy not measured on CPU."""
    if not s.init.adapters or s.device != "cuda":
        return 0.0
    lora, layers = s.workload.lora, s.shapes.layers
    adapted = s.shapes.lora_targets(lora.target_modules)
    inputs = _lora_inputs(adapted, FUSED_QKV if s.knobs.litgpt_model else ()) // layers
    distinct = _lora_inputs(adapted, SHARED_INPUTS) // layers
    ranks = lora.r * len(adapted) // layers
    dropout = s.method.dropout_active(lora.dropout)
    return terms.lora_input_copies(tokens, inputs, distinct, ranks, t.bytes, s.b, dropout)


FUSED_QKV = ("q_proj", "k_proj", "v_proj")
"""The linears a fused QKV holds (Knobs.litgpt_model)."""
SHARED_INPUTS = (*FUSED_QKV, "gate_proj", "up_proj")
"""Linears that read one tensor with the siblings of their module that are named here: attention's query, key and
value, the MLP's gate and up projections."""


def _lora_inputs(adapted: list[Linear], shared: tuple[str, ...]) -> int:
    """in_features summed over the adapted linears, each module's linears named in `shared` counted once as one input
    (FUSED_QKV: Knobs.litgpt_model's fused QKV; SHARED_INPUTS: every distinct input; (): none joined). Pure."""
    joined = [lin for lin in adapted if lin.name.rsplit(".", 1)[1] in shared]
    groups = {(lin.name.rsplit(".", 1)[0], lin.name.rsplit(".", 1)[1] in FUSED_QKV): lin.in_features for lin in joined}
    names = {lin.name for lin in joined}
    return sum(lin.in_features for lin in adapted if lin.name not in names) + sum(groups.values())


def _padded_qkv_outputs(adapted: list[Linear]) -> int:
    """out_features summed over adapted query/key/value linears in the modules that adapt some but not all three
    (LitGPT's zero_pad, terms.litgpt_attention). Pure."""
    modules: dict[str, list[Linear]] = {}
    for lin in adapted:
        parent, name = lin.name.rsplit(".", 1)
        if name in FUSED_QKV:
            modules.setdefault(parent, []).append(lin)
    return sum(sum(lin.out_features for lin in lins) for lins in modules.values() if len(lins) < len(FUSED_QKV))


def _no_grad_phases(s: _Setting, per_layer: float, tokens: int, split: int) -> dict[str, dict[str, float]]:
    """The phases of forwards without gradient: KTO's KL batch; online RL's generation and its scoring forward."""
    method, shapes, b = s.method, s.shapes, s.b
    phases: dict[str, dict[str, float]] = {}
    if method.extra_forwards:
        # KTO's KL batch: forwards without gradient before the step's own; below the head's backward whenever
        # anything is checkpointed, and then it adds no term.
        phases["kl_batch"] = {"kl_batch_forward": terms.no_grad_forward(per_layer, tokens, shapes.vocab, b) / split}
    if method.generates:
        gen = generation.generation_of(s.workload, s.world, s.knobs.batch_size, s.knobs.max_length)
        kv = (shapes.layers, shapes.kv_heads, shapes.head_dim, shapes.vocab, b)
        if _vllm_use(s) is None:  # vLLM's KV cache lives in its own share (vllm_reserved)
            phases["generation"] = {k: v / split for k, v in generation.generation_phase(gen, *kv).items()}
        phases["scoring"] = {"scoring_forward": generation.scoring_forward(per_layer, tokens, shapes.vocab, b) / split}
    return phases


def _vllm_use(s: _Setting) -> vllm_terms.VllmUse | None:
    """vLLM where it generates for an online cell on a CUDA profile (vLLM's GPUs); None: transformers' generate."""
    if not s.method.generates or s.device != "cuda":
        return None
    return vllm_terms.vllm_use(s.cell, s.workload)


def _vllm(s: _Setting, terms_: dict[str, float]) -> list[str]:
    """vLLM's share of each training card (colocate) added to `terms_`; the notes saying it, or the server's GPUs."""
    use, card = _vllm_use(s), s.usable
    if use is None or card is None:
        return []
    shapes = s.shapes
    sequence = generation.generation_of(s.workload, s.world, s.knobs.batch_size, s.knobs.max_length).sequence
    kv_per_token = generation.kv_cache(1, 1, shapes.layers, shapes.kv_heads, shapes.head_dim, s.b)
    found = vllm_terms.vllm_terms(use, card, shapes.total * s.b, kv_per_token, sequence)
    terms_.update(found.device)
    return found.notes


def _cpu_process(s: _Setting, grads_full: float, cpu: CpuFeatures | None) -> dict[str, float]:
    """CPU: what the process holds besides the model's tensors (bench/estimate/cpu_terms.py), DeepSpeed's shared
    memory all-reduce, and the oneDNN kernels of bf16 adapter matmuls."""
    cell, workload, shapes = s.cell, s.workload, s.shapes
    spec, stage, world = s.spec, s.stage, s.world
    out: dict[str, float] = {}
    seq = _row_length(s)
    kind = cpu_terms.memory_kind(s.memory_budget_bytes)
    out.update(cpu_terms.process_terms(kind, spec.deepspeed is not None, stage, s.method.generates))
    shm = terms.deepspeed_cpu_shm("cpu", str(cell.launcher), world, kind == "cgroup", grads_full)
    if shm:
        out["deepspeed_shm_allreduce"] = shm
    if _cpu_bf16_matmuls(s):
        micro_steps = workload.train.steps * (workload.train.gradient_accumulation_steps or 1)
        linears = [(lin.in_features, lin.out_features) for lin in shapes.lora_targets(workload.lora.target_modules)]
        kernels = cpu_kernels.adapter_kernels(cpu, linears, workload.lora.r, micro_steps, seq)
        if kernels:
            out["onednn_bf16_kernels"] = kernels
    return out


def train_terms(s: _Setting, cpu: CpuFeatures | None = None) -> tuple[dict[str, float], float, dict[str, float]]:
    """(training breakdown, load bytes) per device, and what an offload backend keeps in host memory per rank: the
    weights, the trained state where the backend places it (ZeRO or the others), the reference model, the
    communication buffers, the step's peak phase and, on CPU, the process's own terms."""
    cell, shapes, world = s.cell, s.shapes, s.world
    weights = _weights(s)
    trainable = _trainable(s, weights)
    out: dict[str, float] = {}
    host: dict[str, float] = {}
    zero2_grads = 0.0
    if s.stage is not None:
        zero2_grads = _zero_state(s, weights, trainable, out, host)
    else:
        _placed_state(s, weights, trainable, out, host)
    _reference_model(s, weights, out, host)
    if Option.REWARD_MODEL in cell.options:
        reward = weights.full - (shapes.lm_head - shapes.hidden) * weights.keep
        out["reward_model"] = reward / world if s.stage == 3 else reward
    if s.device == "cpu":
        mapped = s.linear * s.b * (not s.quantized) + s.other * weights.keep
        _charge_mapped_weights(out, s, mapped)
    loaded = ("weights", "adapters", "reference_model", "reward_model", "zero3_gathered_layer")
    load = sum(v for k, v in out.items() if k in loaded)
    out.update(_buckets(s, trainable))
    peak, grads_full = _peak_phase(s, trainable, zero2_grads, host)
    for name, value in peak.items():
        out[name] = out.get(name, 0.0) + value
    if s.quantized:
        out["dequant_buffer"] = _dequant_buffer(s)
    if s.device == "cpu":
        out.update(_cpu_process(s, grads_full, cpu))
    if trainable.optimizer.paged:
        out[PAGED] = trainable.optimizer.paged
    if s.reference.precomputed:
        out["reference_log_probs_note"] = 0.0
    return out, load, host


def _dequant_buffer(s: _Setting) -> float:
    """The largest quantized linear dequantised for its matmul, in the compute dtype; with Knobs.fp16_quant_state
    (and a compute dtype other than fp16) also its fp16 dequantisation, alive during the cast: b + 2 per weight."""
    knobs, shapes = s.knobs, s.shapes
    largest = max(shapes.largest_linear, shapes.lm_head if knobs.quantized_head else 0)
    fp16_copy = 2 if knobs.fp16_quant_state and s.precision != "fp16" else 0
    return largest * (s.b + fp16_copy)


def _cpu_bf16_matmuls(s: _Setting) -> bool:
    """An fp32 cell with fp32 master weights whose only bf16 matmuls are its bf16 adapters'."""
    precision = s.precision
    return s.knobs.master_weights and precision == "fp32" and _bf16_adapters(s.method, s.cell, precision)


def _bf16_adapters(method: MethodSpec, cell: Cell, precision: str) -> bool:
    """A quantized model's adapters that its trainer casts to bf16 (MethodSpec.qlora_cast). On a CPU in fp32
    their matmuls are the cell's only bf16 ones: measured on tiny (Xeon, AMX), the stable trainers' quantized cells
    kept ~100 MiB of oneDNN kernels, the experimental ORPO and CPO trainers' (adapters left in fp32) none."""
    quantized = quant_spec(cell.quant).quantized
    return init_spec(cell.init).adapters and method.bf16_adapters(quantized, str(cell.quant), precision)


def _kernels_note(cpu: CpuFeatures | None, kernels: float) -> str:
    if cpu is None:
        return (
            "CPU features not given: the bf16 adapter matmuls are predicted as on the CPU first validated (AMD EPYC: "
            "torch's own kernels, nothing kept); with AVX-512 BF16 or AMX oneDNN keeps ~0.67 MiB per matmul shape "
            "(docs/estimator.md, CPUs)"
        )
    path = cpu_kernels.bf16_path(cpu)
    return f"bf16 adapter matmuls on the given CPU: {path} path ({kernels / MiB:.0f} MiB of oneDNN kernels kept)"


OUTPUT_TERMS = ("lm_head_backward", "full_logits", "scalar_head")
"""output_head's term names: what reading the model's output holds at the step's peak."""


def output_head(
    method: MethodSpec, rows: int, seq: int, shapes: ModelShapes, compute_bytes: int, device: str, head_trainable: bool
) -> tuple[str, float]:
    """(term name, bytes) of what reading the model's output holds at the step's peak, per the method's `output`
    (bench/matrix/methods.py): a scalar score head, full logits, or TRL's fused LM head (its CPU fallback or its
    Triton kernel)."""
    if method.output == "scalar":
        return "scalar_head", terms.scalar_head(rows, seq, compute_bytes)
    if method.output == "full_logits":
        return "full_logits", terms.full_logits(rows, seq, shapes.vocab, compute_bytes, method.logits_units)
    head_backward = terms.cpu_head_backward if device == "cpu" else terms.gpu_head_backward
    return "lm_head_backward", head_backward(rows * seq, shapes.hidden, shapes.vocab, compute_bytes, head_trainable)


def _charge_mapped_weights(out: dict[str, float], s: _Setting, mapped_bytes: float) -> None:
    """CPU: what of `weights`, `reference_model` and `reward_model` the measured figure charges
    (cpu_terms.weights_charged). The checkpoint is mapped where it is stored in the compute dtype. A full fine-tune
    writes its weights at every step. Under DDP every rank copies every model it places (`cpu_copies_placed_models`);
    a ZeRO-1/2 engine overwrites the policy with rank 0's on the other ranks (`_broadcast_model`), and the stage-0
    engine TRL makes of a reference too. ZeRO-3 copies parameters into its own partitions (nothing mapped)."""
    cell, backend, world = s.cell, s.backend, s.world
    if checkpoint_bytes(s.workload, s.shapes) != s.b:
        return
    spec = s.spec
    kind = cpu_terms.memory_kind(s.memory_budget_bytes)
    copied = cpu_copies_placed_models(backend, world)
    broadcast = world > 1 and spec.zero_stage in (1, 2)
    if spec.zero_stage != 3:
        written = mapped_bytes if (copied or broadcast or not init_spec(cell.init).adapters) else 0.0
        out["weights"] = cpu_terms.weights_charged(out["weights"], mapped_bytes, written, kind)
        if "reference_model" in out:
            written = mapped_bytes if copied or broadcast else 0.0
            out["reference_model"] = cpu_terms.weights_charged(out["reference_model"], mapped_bytes, written, kind)
        if "reward_model" in out:
            # mapped too, but for its one-output head (H elements)
            reward = out["reward_model"]
            out["reward_model"] = cpu_terms.weights_charged(reward, reward, reward if copied else 0.0, kind)


def cpu_copies_placed_models(backend: Backend, world: int) -> bool:
    """Whether a CPU cell's processes copy the models they load out of the checkpoint's mapping. accelerate runs
    several CPU processes as MULTI_CPU and gives each `torch.device("cpu", 0)` (PartialState.set_device), and
    `Tensor.to` copies between "cpu" and "cpu:0": the Trainer's `_move_model_to_device` copies the policy, and
    `prepare_model` the reference and a reward model, on every rank (seen in /proc/self/maps):
    nothing of them stays mapped. A DeepSpeed engine places the policy itself, and one process runs on "cpu".
    Pure."""
    return world > 1 and backend == Backend.DDP


def checkpoint_bytes(workload: Workload, shapes: ModelShapes) -> int:
    """Bytes per element of the checkpoint's floating-point tensors: random weights are written in fp32 up to
    LARGE_MODEL_PARAMS and in bf16 above (bench/assets/prepare.py); a pretrained checkpoint is taken as bf16 (the
    published ones are)."""
    if workload.model.weights == "random" and shapes.total <= LARGE_MODEL_PARAMS:
        return 4
    return 2


def write_calibration(calibration: Calibration, path: Path = CALIBRATION_FILE) -> None:
    write_whole(path, json.dumps(calibration.model_dump(), indent=2) + "\n")
