"""What a command is about: the hardware (a profile, or GPUs of the catalog on some nodes) and the workload (a
shipped one, or a model in its place), the training settings applied over their defaults, LoRA targets fitted to
the model. The command line fills a `TargetRequest` from its flags; the decision page fills one per point."""

import dataclasses
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.precision import precision_of
from bench.matrix.profiles import (
    ADVISED_TIMEOUT_S,
    TIMED_STEPS,
    HardwareProfile,
    Workload,
    gpu_profile,
    least_steps,
    load_profile,
    load_workload,
)
from bench.matrix.settings import ALL_LINEAR, TrainingSettings, apply_to_profile, apply_to_workload
from bench.paths import scenarios_dir

DEFAULT_SETTINGS_WORKLOAD = "mistral-7b"
"""Where `--gpu` without `--workload` takes its training defaults from: a 7B DPO run (2,048 tokens, batch 1, LoRA r16
on the attention projections, gradient checkpointing)."""


@dataclass(frozen=True)
class TargetRequest:
    """The hardware, workload, model and training settings asked for, each named as its command-line flag."""

    hw: str | None = None
    gpu: str | None = None
    """NAME:COUNT per node, from the GPU catalog (scenarios/gpus.yaml); instead of `hw`."""
    nodes: int = 1
    gpu_memory: float | None = None
    """GB per device of a card the catalog does not list (`--gpu MyCard:2 --gpu-memory 48`): a custom card."""
    workload: str | None = None
    model: str | None = None
    max_length: int | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    steps: int | None = None
    lora_r: int | None = None
    lora_targets: str | None = None
    """Comma-separated module names, or `all-linear`."""
    gradient_checkpointing: bool | None = None
    optim: str | None = None
    precision: str | None = None
    """A precision mode (mixed, pure-bf16, fp16-mixed, fp32) or a compute dtype (bf16, fp16)."""
    precompute_ref: bool | None = None
    attention: str | None = None
    liger: bool | None = None
    torch_compile: bool | None = None
    scenarios: Path | None = None
    """The scenario folder profiles and workloads are read from (None: the one in use)."""
    num_generations: int | None = None
    """The online methods' generation settings (bench/cli/generation_flags.py), over the workload's `generation`."""
    completion_length: int | None = None
    prompt_length: int | None = None
    vllm: str | None = None
    vllm_gpu_memory_utilization: float | None = None

    def without_settings(self) -> "TargetRequest":
        """The same hardware and workload with none of the training settings given: their defaults."""
        return dataclasses.replace(self, **dict.fromkeys(TrainingSettings.model_fields))

    def flags(self) -> list[str]:
        """The hardware, workload, model and settings flags as given: what a command repeating this one needs."""
        flags: list[str] = []
        for name in ("gpu" if self.gpu is not None else "hw", "workload", "model", *_VALUED):
            if (value := getattr(self, name)) is not None:
                flags += [_flag(name), str(value)]
        if self.nodes != 1:
            flags += ["--nodes", str(self.nodes)]
        if self.gpu_memory is not None:
            flags += ["--gpu-memory", f"{self.gpu_memory:g}"]
        for name in ("gradient_checkpointing", "precompute_ref", "liger", "torch_compile"):
            if (value := getattr(self, name)) is not None:
                flags += [_flag(name), "on" if value else "off"]
        for name in ("optim", "precision", "attention"):
            if (value := getattr(self, name)) is not None:
                flags += [_flag(name), value]
        for name in _GENERATION:
            if (value := getattr(self, name)) is not None:
                flags += [_flag(name), f"{value:g}" if isinstance(value, float) else str(value)]
        return flags


_VALUED = ("max_length", "batch_size", "grad_accum", "lora_r", "lora_targets")
"""The settings `flags` repeats by value, in this order."""

_GENERATION = ("num_generations", "completion_length", "prompt_length", "vllm", "vllm_gpu_memory_utilization")
"""The generation flags `flags` repeats, in this order; `with_generation` applies them."""


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def settings_of(request: TargetRequest) -> TrainingSettings:
    """The training settings given; a value the schema refuses is one line naming its flag."""
    from pydantic import ValidationError

    targets = None if request.lora_targets is None else tuple(t.strip() for t in request.lora_targets.split(",") if t)
    values = {name: getattr(request, name) for name in TrainingSettings.model_fields} | {"lora_targets": targets}
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return TrainingSettings.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0])
        flag, shown = _flag(name), getattr(request, name, err.get("input"))
        why = "names none" if err["type"] == "too_short" else err["msg"].replace("Input should", "must")
        raise BenchError(f"{flag} {shown!r}: {why}" if isinstance(shown, str) else f"{flag} {shown}: {why}") from None


def checked_steps(settings: TrainingSettings, workload: Workload) -> None:
    """`--steps` leaves the workload's warm-up and the steps tokens/s are timed over (one line naming both)."""
    least = least_steps(workload.train.warmup_steps)
    if settings.steps is not None and settings.steps < least:
        raise BenchError(
            f"--steps {settings.steps}: must be at least {least} (workload {workload.name} warms up for "
            f"{workload.train.warmup_steps} steps, its warmup_steps, and tokens/s are timed over {TIMED_STEPS} steps "
            "after them)"
        )


def checked_precision(settings: TrainingSettings, profile: HardwareProfile) -> None:
    """A card without bf16 (the catalog's T4, V100) is never given a bf16 mode: it could not train (one line naming
    the flag and what the card trains in)."""
    from bench.matrix.gpus import gpu

    mode = settings.mode()
    if mode is None or precision_of(mode) != "bf16" or profile.gpu is None:
        return
    entry = gpu(profile.gpu)
    if entry.bf16_tflops is None:
        raise BenchError(
            f"--precision {settings.precision}: {entry.name} has no bf16 (scenarios/gpus.yaml bf16_tflops: null); "
            "it trains in fp16-mixed (its default) or fp32"
        )


def resolve_target(request: TargetRequest) -> tuple[HardwareProfile, Workload]:
    """The profile and the workload the request names, the settings applied."""
    scenarios = request.scenarios or scenarios_dir()
    settings = settings_of(request)
    if request.gpu_memory is not None and request.gpu is None:
        raise BenchError("--gpu-memory goes with --gpu NAME:COUNT (a card the GPU catalog does not list)")
    if request.gpu is not None:
        workload_name = request.workload or DEFAULT_SETTINGS_WORKLOAD
        mode = settings.mode()
        profile = _gpu_or_custom(request, workload_name, None if mode is None else precision_of(mode))
    else:
        if request.nodes != 1:
            raise BenchError("--nodes goes with --gpu; a profile states its own nodes")
        profile = apply_to_profile(load_profile(request.hw, scenarios), settings)
    checked_precision(settings, profile)
    workload = with_generation(load_workload(request.workload or profile.workload, scenarios), request)
    checked_steps(settings, workload)
    if request.model is None:
        return profile, apply_to_workload(workload, _expanded(settings, workload.model.config_file))
    from bench.assets.model_config import resolve_model

    model = resolve_model(request.model)
    chosen = apply_to_workload(workload, _expanded(settings, model.config_file), model.config_file, model.name)
    return profile, _fitted_to_model(chosen, settings.lora_targets is not None, model.config_file)


def with_generation(workload: Workload, request: TargetRequest) -> Workload:
    """The workload with the generation flags given over its `generation` settings."""
    given = {
        "num_generations": request.num_generations,
        "max_completion_length": request.completion_length,
        "prompt_length": request.prompt_length,
        "vllm": request.vllm,
        "vllm_gpu_memory_utilization": request.vllm_gpu_memory_utilization,
    }
    update = {k: v for k, v in given.items() if v is not None}
    if not update:
        return workload
    generation = workload.generation.model_validate(workload.generation.model_dump() | update)
    return workload.model_copy(update={"generation": generation})


def _fitted_to_model(workload: Workload, targets_given: bool, config_file: Path) -> Workload:
    """The workload with LoRA targets the model has: the ones given must all exist (one line naming the model's
    linear layers otherwise); the workload's own, where the model has none of them under those names (Phi-3 fuses
    q/k/v into `qkv_proj`), become the model's attention projections. A max length beyond the model's positions is
    warned about."""
    from bench.estimate.shapes import shapes_from_config

    positions = json.loads(config_file.read_text()).get("max_position_embeddings")
    if positions is not None and workload.train.max_length > positions:
        say_once(
            f"warning: max length {workload.train.max_length} is over {workload.name}'s max_position_embeddings "
            f"({positions}): the model was not trained on positions that far"
        )
    shapes = shapes_from_config(str(config_file))
    paths, names = [lin.name for lin in shapes.linears], shapes.linear_names()
    missing = [t for t in workload.lora.target_modules if t not in names]
    if not missing:
        return workload
    if targets_given:
        raise BenchError(
            f"--lora-targets: {', '.join(missing)} not in {workload.name}; its linear layers: {', '.join(names)}"
        )
    attention = sorted({p.split(".")[-1] for p in paths if {"self_attn", "attn", "attention"} & set(p.split("."))})
    if not attention:
        raise BenchError(
            f"{workload.name} has no {', '.join(missing)}: name its LoRA targets with --lora-targets "
            f"(its linear layers: {', '.join(names)})"
        )
    say_once(
        f"notice: {workload.name} has no {', '.join(missing)}; LoRA targets its attention projections "
        f"{', '.join(attention)} (--lora-targets to choose)"
    )
    lora = workload.lora.model_copy(update={"target_modules": attention})
    return workload.model_copy(update={"lora": lora})


CUSTOM_PREFIX = "custom-"
"""The profile name of a custom card (`--gpu-memory`): never a catalog entry's nor a shipped profile's."""


def _gpu_or_custom(request: TargetRequest, workload: str, precision: str | None) -> HardwareProfile:
    """The catalog's card, or with `--gpu-memory` a card it does not list; an unknown name says --gpu-memory."""
    from bench.matrix.gpus import gpu, parse_gpu_argument

    name, count = parse_gpu_argument(request.gpu or "")
    if request.gpu_memory is None:
        try:
            return gpu_profile(request.gpu or "", request.nodes, workload, precision)
        except BenchError as exc:
            if not str(exc).startswith("unknown GPU"):
                raise
            raise BenchError(f"{exc}; or give an unlisted card's memory: --gpu-memory GB") from None
    try:
        listed = gpu(name)
    except BenchError:
        return custom_profile(name, count, request.nodes, request.gpu_memory, workload, precision)
    raise BenchError(
        f"--gpu-memory: {listed.name} is in the GPU catalog ({listed.memory_gb:g} GB); --gpu-memory is for a card it "
        "does not list"
    )


def custom_profile(
    name: str, count: int, nodes: int, memory_gb: float, workload: str, precision: str | None
) -> HardwareProfile:
    """A card the catalog does not list: its memory as given, no speed figure (tokens/s unknown), bf16 unless
    `precision` says otherwise, CUDA."""
    from pydantic import ValidationError

    from bench.matrix.yaml_schema import describe_validation_error

    where = f"{count} x {name}" + (f" on each of {nodes} nodes" if nodes > 1 else "")
    try:
        return HardwareProfile(
            name=f"{CUSTOM_PREFIX}{name}x{count}" + (f"-{nodes}nodes" if nodes > 1 else ""),
            description=f"{where}: a custom card, {memory_gb:g} GB from --gpu-memory, speed unknown",
            device="cuda",
            device_count=count,
            processes=count * nodes,
            nodes=nodes,
            precision=precision or "bf16",
            image_flavor="cuda",
            workload=workload,
            timeout_s=ADVISED_TIMEOUT_S,
            threads_per_process=4,
            memory_per_device_gb=memory_gb,
            card=f"{name} (custom card)",
        )
    except ValidationError as exc:
        raise BenchError(describe_validation_error(f"--gpu {name}:{count} --gpu-memory {memory_gb:g}", exc)) from None


@functools.cache
def say_once(line: str) -> None:
    """On standard error, once per process (the decision page asks for thousands of points)."""
    print(line, file=sys.stderr, flush=True)


def _expanded(settings: TrainingSettings, config_file: Path | None) -> TrainingSettings:
    """`--lora-targets all-linear` as the model's linear layer names (what PEFT's all-linear takes: every linear of the
    decoder, not the output head)."""
    if settings.lora_targets != (ALL_LINEAR,):
        return settings
    if config_file is None:
        raise BenchError(f"--lora-targets {ALL_LINEAR}: the workload has no local config.json to read the names from")
    from bench.estimate.shapes import shapes_from_config

    return settings.model_copy(update={"lora_targets": tuple(shapes_from_config(str(config_file)).linear_names())})
