"""What a command is about: the hardware (`--hw` profile, or `--gpu NAME:COUNT` [`--nodes N`] from the GPU
catalog) and the workload (`--workload`, or `--model` with the training-setting flags over its defaults)."""

import argparse
import functools
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.profiles import (
    OPTIMIZERS,
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


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")
    return text == "on"


def add_target_arguments(parser: argparse.ArgumentParser, hw_default: str | None = None) -> None:
    """`hw_default`: the profile when neither --hw nor --gpu is given (None: one of them is required)."""
    where = parser.add_mutually_exclusive_group(required=hw_default is None)
    where.add_argument("--hw", default=hw_default, help="hardware profile (scenarios/hardware/<HW>.yaml)")
    where.add_argument("--gpu", help="GPUs from the catalog (scenarios/gpus.yaml), NAME:COUNT per node, e.g. A10:2")
    parser.add_argument("--nodes", type=int, default=1, help="with --gpu: machines of COUNT GPUs (default: 1)")
    parser.add_argument(
        "--workload",
        default=None,
        help=f"workload (default: the profile's; with --gpu: {DEFAULT_SETTINGS_WORKLOAD}); with --model, where the "
        "settings not given come from",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model instead of the workload's: a Hub id (config.json only is downloaded), a folder holding "
        "config.json, a config.json, or a config shipped under scenarios/models/ (e.g. qwen2.5-7b)",
    )
    settings = parser.add_argument_group("training settings (default: the workload's)")
    settings.add_argument("--max-length", type=int, default=None)
    settings.add_argument("--batch-size", type=int, default=None, help="per device")
    settings.add_argument("--grad-accum", type=int, default=None, help="gradient accumulation steps")
    settings.add_argument(
        "--steps",
        type=int,
        default=None,
        help="optimizer steps (on a CPU with AVX-512 BF16 or AMX, more batch lengths)",
    )
    settings.add_argument("--lora-r", type=int, default=None, help="LoRA rank (alpha keeps the workload's alpha/r)")
    settings.add_argument("--lora-targets", default=None, help=f"comma-separated module names, or {ALL_LINEAR}")
    settings.add_argument("--gradient-checkpointing", type=on_off, default=None, metavar="on|off")
    settings.add_argument("--optim", choices=OPTIMIZERS, default=None)
    settings.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None)
    settings.add_argument("--precompute-ref", type=on_off, default=None, metavar="on|off")


def settings_of(args: argparse.Namespace) -> TrainingSettings:
    """The training-setting flags given; a value the schema refuses is one line naming its flag."""
    from pydantic import ValidationError

    targets = None if args.lora_targets is None else tuple(t.strip() for t in args.lora_targets.split(",") if t)
    values = {
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "steps": args.steps,
        "lora_r": args.lora_r,
        "lora_targets": targets,
        "gradient_checkpointing": args.gradient_checkpointing,
        "optim": args.optim,
        "precision": args.precision,
        "precompute_ref": args.precompute_ref,
    }
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return TrainingSettings.model_validate(given)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0])
        flag, shown = f"--{name.replace('_', '-')}", getattr(args, name, err.get("input"))
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


def target(args: argparse.Namespace) -> tuple[HardwareProfile, Workload]:
    """The profile and the workload the arguments name, the settings applied."""
    scenarios = Path(getattr(args, "scenarios", None) or scenarios_dir())
    settings = settings_of(args)
    if args.gpu is not None:
        profile = gpu_profile(args.gpu, args.nodes, args.workload or DEFAULT_SETTINGS_WORKLOAD, settings.precision)
    else:
        if args.nodes != 1:
            raise BenchError("--nodes goes with --gpu; a profile states its own nodes")
        profile = apply_to_profile(load_profile(args.hw, scenarios), settings)
    workload = load_workload(args.workload or profile.workload, scenarios)
    checked_steps(settings, workload)
    if args.model is None:
        return profile, apply_to_workload(workload, _expanded(settings, workload.model.config_file))
    from bench.assets.model_config import resolve_model

    model = resolve_model(args.model)
    chosen = apply_to_workload(workload, _expanded(settings, model.config_file), model.config_file, model.name)
    return profile, _fitted_to_model(chosen, settings.lora_targets is not None, model.config_file)


def _fitted_to_model(workload: Workload, targets_given: bool, config_file: Path) -> Workload:
    """The workload with LoRA targets the model has: the ones given must all exist (one line naming the model's
    linear layers otherwise); the workload's own, where the model has none of them under those names (Phi-3 fuses
    q/k/v into `qkv_proj`), become the model's attention projections. A max length beyond the model's positions is
    warned about."""
    import json

    from bench.estimate.shapes import shapes_from_config

    positions = json.loads(config_file.read_text()).get("max_position_embeddings")
    if positions is not None and workload.train.max_length > positions:
        _say_once(
            f"warning: max length {workload.train.max_length} is over {workload.name}'s max_position_embeddings "
            f"({positions}): the model was not trained on positions that far"
        )
    shapes = shapes_from_config(str(config_file))
    paths, names = [lin.name for lin in shapes.linears], shapes.linear_names()
    targets = workload.lora.target_modules
    missing = [t for t in targets if t not in names]
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
    _say_once(
        f"notice: {workload.name} has no {', '.join(missing)}; LoRA targets its attention projections "
        f"{', '.join(attention)} (--lora-targets to choose)"
    )
    lora = workload.lora.model_copy(update={"target_modules": attention})
    return workload.model_copy(update={"lora": lora})


@functools.cache
def _say_once(line: str) -> None:
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


def target_flags(args: argparse.Namespace) -> list[str]:
    """The hardware, workload, model and settings flags as given: what a command repeating this one needs."""
    flags: list[str] = []
    for name in (
        "gpu" if args.gpu is not None else "hw",
        "workload",
        "model",
        "max_length",
        "batch_size",
        "grad_accum",
        "lora_r",
        "lora_targets",
    ):
        value = getattr(args, name)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    if args.nodes != 1:
        flags += ["--nodes", str(args.nodes)]
    for name in ("gradient_checkpointing", "precompute_ref"):
        value = getattr(args, name)
        if value is not None:
            flags += [f"--{name.replace('_', '-')}", "on" if value else "off"]
    for name in ("optim", "precision"):
        value = getattr(args, name)
        if value is not None:
            flags += [f"--{name}", value]
    return flags
