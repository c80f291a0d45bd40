"""Cell + hardware profile + workload -> a typed Prediction: per-device bytes at load and in training, the breakdown
by term, usable memory, verdict (fits / predicted_oom) and margin. Configs only; no weights, no device."""

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from bench.estimate import VERSION, terms
from bench.estimate.shapes import ModelShapes, shapes_for
from bench.matrix.axes import Backend, Option
from bench.matrix.backends import Placement, backend_spec
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import MethodSpec, method_spec
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.quants import quant_spec
from bench.matrix.recipes import resolve
from bench.matrix.scenario import not_applicable_reason, world_size

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


class DeviceConstants(BaseModel):
    """Per device kind; `fitted` names the constants calibrate.py fitted on measurements (the rest are priors)."""

    head_tiles: float
    """Logits tiles live in the LM head's backward (derived: 1 on GPU/Triton; CPU torch fallback: see docs)."""
    runtime_bytes: float = 0.0
    """Per rank, everything the training process holds beyond the modelled terms (CPU: data, tokenizer, autograd and
    allocator retention; fitted)."""
    multi_process_bytes: float = 0.0
    """Extra per rank of a multi-process run (process group, sampler; fitted on CPU)."""
    deepspeed_bytes: float = 0.0
    """Extra per rank of a DeepSpeed engine (fitted on CPU)."""
    context_bytes: float = 0.0
    """Outside the measured peak: CUDA context (~0.5 GiB), or the library baseline on CPU."""
    deepspeed_context_bytes: float | None = None
    """The same for a DeepSpeed cell when it differs (CPU: deepspeed's imports)."""
    allocator_slack: float = 0.0
    """Fraction on top of the measured peak that the allocator reserves (PyTorch caching allocator on GPU)."""
    fitted: list[str] = []


class Calibration(BaseModel):
    version: str
    devices: dict[str, DeviceConstants]
    fitted_on: list[str] = []
    """Which records (run dir / cell) the fitted constants came from."""


def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    return Calibration.model_validate_json(path.read_text(encoding="utf-8"))


class Prediction(BaseModel):
    cell_id: str
    method: str = "dpo"
    init: str = ""
    quant: str = ""
    backend: str = ""
    """The cell's axes, so that a reader of the CSV can place it in a matrix without parsing the id."""
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
    train_bytes: float | None = None
    """Per device peak in training: what a record's model_memory_bytes (CPU) / CUDA max allocated (GPU) measures."""
    terms: dict[str, float] = {}
    """Breakdown of train_bytes."""
    host_bytes: float = 0.0
    """Per rank in host memory, not on the device: the sum of host_terms on an accelerator; 0 on CPU, where the host
    is the device and the offloaded state is the `offloaded_to_host` term of train_bytes."""
    host_terms: dict[str, float] = {}
    """What an offload backend keeps in host memory per rank (params, gradients, optimizer_states,
    reference_model)."""
    overhead_bytes: float | None = None
    """Outside the measured peak: context / library baseline + allocator slack."""
    total_bytes: float | None = None
    usable_bytes: float | None = None
    verdict: Literal["fits", "predicted_oom", "unknown"] | None = None
    margin_bytes: float | None = None
    """usable - total (negative: short by that much)."""
    notes: list[str] = []


def _effective_backend(cell: Cell, profile: HardwareProfile) -> tuple[Backend, list[str]]:
    if backend_spec(cell.backend).fsdp_version and profile.device == "cpu":
        return Backend.DDP, ["FSDP through accelerate/TRL runs as DDP on CPU (silent fallback): predicted as DDP"]
    return cell.backend, []


def usable_bytes(profile: HardwareProfile) -> float | None:
    if profile.device == "cpu":
        return None if profile.memory_budget_bytes is None else float(profile.memory_budget_bytes)
    return None if profile.memory_per_device_gb is None else profile.memory_per_device_gb * 1e9


def predict_cell(
    cell: Cell, profile: HardwareProfile, workload: Workload, calibration: Calibration | None = None
) -> Prediction:
    """The per-device memory of `cell` on `profile` with `workload`: the entry point a runner can call."""
    base = {
        "cell_id": cell.id,
        "method": str(cell.method),
        "init": str(cell.init),
        "quant": str(cell.quant),
        "backend": str(cell.backend),
        "hardware": profile.name,
        "workload": workload.name,
    }
    reason = not_applicable_reason(cell, profile)
    if reason is not None:
        return Prediction(**base, status="not_applicable", reason=reason)
    calibration = calibration or load_calibration()
    const = calibration.devices[profile.device]
    shapes = shapes_for(workload)
    backend, notes = _effective_backend(cell, profile)
    world = world_size(cell, profile)
    terms_, load, host_terms = train_terms(cell, backend, profile, workload, shapes, const, world)
    host = sum(host_terms.values())
    train = sum(terms_.values())
    deepspeed = backend_spec(backend).deepspeed is not None
    context = const.deepspeed_context_bytes if deepspeed and const.deepspeed_context_bytes is not None else None
    context = const.context_bytes if context is None else context
    overhead = context + const.allocator_slack * train
    if profile.device == "cpu":
        train += host  # offloaded state is in the same (host) memory
        terms_["offloaded_to_host"] = host
        host = 0.0
    total = train + overhead
    usable = usable_bytes(profile)
    verdict = None if usable is None else ("fits" if total <= usable else "predicted_oom")
    return Prediction(
        **base,
        status="predicted",
        backend_run=str(backend),
        world_size=world,
        load_bytes=load,
        train_bytes=train,
        terms={k: v for k, v in terms_.items() if v},
        host_bytes=host,
        host_terms={k: v for k, v in host_terms.items() if v},
        overhead_bytes=overhead,
        total_bytes=total,
        usable_bytes=usable,
        verdict=verdict or "unknown",
        margin_bytes=None if usable is None else usable - total,
        notes=notes,
    )


def train_terms(
    cell: Cell,
    backend: Backend,
    profile: HardwareProfile,
    workload: Workload,
    shapes: ModelShapes,
    const: DeviceConstants,
    world: int,
) -> tuple[dict[str, float], float, dict[str, float]]:
    """(training breakdown, load bytes) per device, and what an offload backend keeps in host memory per rank."""
    spec = backend_spec(backend)
    sharding = spec.sharding
    devices = profile.device_count
    b = 4 if profile.precision == "fp32" else 2
    stage = spec.zero_stage
    offload = spec.deepspeed is not None and spec.deepspeed.offload_optimizer is not None
    offload_params = sharding.params == Placement.OFFLOADED
    precompute = Option.PRECOMPUTE_REF in cell.options
    checkpointing = workload.train.gradient_checkpointing and Option.NO_GRADIENT_CHECKPOINTING not in cell.options
    quant = str(cell.quant)
    method = method_spec(cell.method)
    linear = shapes.linear_weights
    # A reward model has a one-output score head where the causal LM has its LM head (an untied one is V x H).
    total = shapes.total - shapes.lm_head + shapes.hidden if method.output == "scalar" else shapes.total
    other = total - linear

    # Weights: quantized models get their non-quantized params upcast to fp32 by prepare_model_for_kbit_training
    # (two_adapters, bench/worker/models.py); FSDP2 with mixed precision upcasts all params to fp32 (accelerate).
    quantized = quant_spec(cell.quant).quantized
    init = init_spec(cell.init)
    keep = 4 if (quantized and init.reference == "ref_adapter") else b
    full = terms.weight_bytes(linear, shapes.linear_rows, other, quant, b, keep)
    fsdp_upcast = spec.fsdp_version is not None and b != 4 and not quantized
    if fsdp_upcast:
        full = total * 4
    param_b = 4 if fsdp_upcast else b

    # Trainable parameters and their dtype.
    if not init.adapters:
        trainable, train_b = total, param_b
        head_trainable = True
    else:
        trainable = shapes.lora_params(workload.lora.r, workload.lora.target_modules)
        head_trainable = False
        if quantized:
            train_b = 2  # TRL 1.16 casts the adapter of a quantized model to bf16 (QLoRA recipe)
        elif stage == 3:
            train_b = b  # TRL passes autocast_adapter_dtype=False under ZeRO-3
        else:
            train_b = 4  # PEFT's autocast_adapter_dtype=True: adapters in fp32
    adapters = trainable * train_b * init.adapter_copies

    out: dict[str, float] = {}
    host: dict[str, float] = {}
    zero2_grads = 0.0
    if stage is not None:
        # DeepSpeed: ZeRO-Offload moves the fp32 gradient partitions, master weights and Adam moments (16 T/N) to
        # the host and steps there; ZeRO-3's offload_param moves the parameter partitions too.
        out["weights"] = full if stage < 3 else 0.0 if offload_params else full / world
        out["adapters"] = adapters if stage < 3 else 0.0 if offload_params else adapters / world
        if offload_params:
            host["params"] = (full + adapters) / world
        if stage == 3:
            out["zero3_gathered_layer"] = 2 * param_b * shapes.largest_layer
        if offload:
            host["optimizer_states"] = terms.zero_offloaded_host(trainable, world)
        elif stage < 3:
            out["optimizer_master"] = terms.zero2_resident_states(trainable, world)
            zero2_grads = terms.zero2_gradient_partitions(trainable, train_b, world)
        else:
            out["grads_optimizer_master"] = 16 * trainable / world
    else:
        out["weights"] = terms.placed(full, sharding.params, world, devices)
        out["adapters"] = terms.placed(adapters, sharding.params, world, devices)
        host["params"] = terms.offloaded(full + adapters, sharding.params, world)
        adam = terms.adam_bytes(trainable, train_b)
        out["optimizer"] = terms.placed(adam, sharding.optimizer, world, devices)
        host["optimizer_states"] = terms.offloaded(adam, sharding.optimizer, world)
    # The reference model: a second copy of the weights for two_models, placed as the backend places it. TRL keeps a
    # passed ref_model also with precompute_ref (dpo_trainer.py: it only drops one it would have created itself).
    # The recipe may replace it by precomputed log-probs (scenarios/recipes.yaml, `reference: precomputed`).
    if init.reference == "separate_model" and resolve(cell, profile.device).settings.reference != "precomputed":
        reference = full if not fsdp_upcast else total * b
        out["reference_model"] = terms.placed(reference, sharding.reference, world, devices)
        host["reference_model"] = terms.offloaded(reference, sharding.reference, world)
    load = sum(v for k, v in out.items() if k in ("weights", "adapters", "reference_model", "zero3_gathered_layer"))

    # Communication buffers.
    if backend == Backend.DDP:
        out["ddp_buckets"] = terms.ddp_buckets(trainable, train_b)
    elif stage == 3:
        out["zero_buckets"] = terms.zero_buckets(trainable, train_b, stage, touched_only=profile.device == "cpu")
    elif spec.fsdp_version:
        out["fsdp_gather"] = terms.fsdp_gather(shapes.largest_block, b)

    # The step's peak: the LM head's backward (logits tiles + accumulators + saved activations) or the end of
    # backward (every gradient), whichever is larger.
    rows = method.rows_per_example * workload.train.per_device_train_batch_size
    seq = workload.train.max_length
    tokens = rows * seq
    per_layer = terms.layer_activations(
        tokens,
        rows,
        seq,
        shapes.hidden,
        shapes.kv_heads * shapes.head_dim,
        shapes.intermediate,
        shapes.heads,
        b,
        materialised_scores=profile.device == "cpu",
    )
    acts = terms.activations(shapes.layers, per_layer, tokens, shapes.hidden, b, checkpointing)
    split = devices if spec.splits_layers else 1
    head_name, head = output_head(method, rows, seq, tokens, shapes, b, const.head_tiles, head_trainable)
    grads_full = trainable * train_b
    # ZeRO-3: gradients go through the reduce bucket into the partitions counted above.
    grads = terms.placed(grads_full, sharding.grads, world, devices) if stage is None else 0.0
    if stage is None:
        host["gradients"] = terms.offloaded(grads_full, sharding.grads, world)
    phase_head = acts / split + head
    phase_end = grads
    bucket_at_head = 0.0
    if stage in (1, 2):
        # The reduce bucket is allocated at each backward's start (setup_buckets) and released at its end, before
        # the step; the gradient partitions live from the end of backward through the step. On the CPU only the
        # bucket's touched pages count, and none are touched yet while the LM head's backward runs.
        bucket = terms.zero_buckets(trainable, train_b, stage, touched_only=profile.device == "cpu")
        bucket_at_head = 0.0 if profile.device == "cpu" else bucket
        phase_head += bucket_at_head
        # With the optimizer offloaded the reduced partition goes straight from the bucket to the host.
        phase_end = bucket if offload else max(bucket + trainable * train_b / world, zero2_grads)
    # KTO's KL batch: forwards without gradient before the step's own (bench/estimate/terms.no_grad_forward); its
    # peak is below the head's backward whenever anything is checkpointed, and then it adds no term.
    phase_kl = terms.no_grad_forward(per_layer, tokens, shapes.vocab, b) / split if method.extra_forwards else 0.0
    if phase_kl > max(phase_head, phase_end):
        out["kl_batch_forward"] = phase_kl
    elif phase_head >= phase_end:
        out["activations"] = acts / split
        out[head_name] = head
        if bucket_at_head:
            out["zero_buckets"] = bucket_at_head
    elif stage in (1, 2):
        out["zero2_end_of_backward"] = phase_end
    else:
        out["gradients"] = grads
    if quantized:
        out["dequant_buffer"] = shapes.largest_linear * b
    out["runtime"] = const.runtime_bytes
    if spec.multi_process:
        out["multi_process"] = const.multi_process_bytes
    if stage is not None:
        out["deepspeed_runtime"] = const.deepspeed_bytes
    shm = terms.deepspeed_cpu_shm(profile.device, str(cell.launcher), world)
    if shm:
        out["deepspeed_shm_allreduce"] = shm
    if precompute:
        out["reference_log_probs_note"] = 0.0
    return out, load, host


FULL_LOGITS_KEPT = {"orpo": 1.5, "simpo": 1.0}
"""[R, L, V] logits-sized tensors alive when the backward of a full-logits loss starts, read from
trl/experimental/orpo/orpo_trainer.py and cpo/cpo_trainer.py (concatenated_forward): both keep the model's logits
(R = 2B rows: 1); ORPO's NLL on the chosen half keeps its log-softmax (B rows: +0.5) for the backward, CPO's with
cpo_alpha=0 (SimPO) computes no NLL. The log-prob gather (selective_log_softmax) keeps only views and one value
per token. The backward then builds the logits' gradient: one more [R, L, V] (output_head adds it)."""


def output_head(
    method: MethodSpec,
    rows: int,
    seq: int,
    tokens: int,
    shapes: ModelShapes,
    compute_bytes: int,
    tiles: float,
    head_trainable: bool,
) -> tuple[str, float]:
    """(term name, bytes) of what reading the model's output holds at the step's peak, per the method's
    `output` (bench/matrix/methods.py)."""
    if method.output == "scalar":
        return "scalar_head", terms.scalar_head(rows, seq, compute_bytes)
    if method.output == "full_logits":
        kept = FULL_LOGITS_KEPT[method.name] + 1.0
        return "full_logits", terms.full_logits(rows, seq, shapes.vocab, compute_bytes, kept)
    return "lm_head_backward", terms.head_backward(
        tokens, shapes.hidden, shapes.vocab, compute_bytes, tiles, head_trainable
    )


def write_calibration(calibration: Calibration, path: Path = CALIBRATION_FILE) -> None:
    path.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n", encoding="utf-8")
