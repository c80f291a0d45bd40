"""The flags of what a command is about: the hardware (`--hw` profile, or `--gpu NAME:COUNT` [`--nodes N`] from the
GPU catalog) and the workload (`--workload`, or `--model` with the training-setting flags over its defaults), read
into a `TargetRequest` that bench/advise/target.py resolves."""

import argparse
import dataclasses
from pathlib import Path

from bench.advise.target import DEFAULT_SETTINGS_WORKLOAD, TargetRequest, resolve_target
from bench.cli.generation_flags import add_generation_arguments
from bench.matrix.precision import MODES
from bench.matrix.profiles import ATTENTIONS, OPTIMIZERS, HardwareProfile, Workload
from bench.matrix.settings import ALL_LINEAR, PRECISION_ALIASES


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
        "--gpu-memory",
        type=float,
        default=None,
        metavar="GB",
        help="with --gpu: the memory per device of a card the catalog does not list (a custom card: speed unknown)",
    )
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
        help="optimizer steps (more batch lengths: more oneDNN kernels with AVX-512 BF16 or AMX, more GPU segments)",
    )
    settings.add_argument("--lora-r", type=int, default=None, help="LoRA rank (alpha keeps the workload's alpha/r)")
    settings.add_argument("--lora-targets", default=None, help=f"comma-separated module names, or {ALL_LINEAR}")
    settings.add_argument("--gradient-checkpointing", type=on_off, default=None, metavar="on|off")
    settings.add_argument("--optim", choices=OPTIMIZERS, default=None)
    settings.add_argument(
        "--precision",
        choices=(*MODES, *PRECISION_ALIASES),
        default=None,
        help="mixed (bf16 compute, fp32 master where the backend keeps one), pure-bf16 (no fp32 copy), fp16-mixed "
        "(fp32 weights, fp16 autocast: cards without bf16), fp32; bf16 and fp16 name mixed and fp16-mixed "
        "(default: the card's)",
    )
    settings.add_argument("--precompute-ref", type=on_off, default=None, metavar="on|off")
    settings.add_argument(
        "--attention", choices=ATTENTIONS, default=None, help="attn_implementation (default: transformers', sdpa)"
    )
    settings.add_argument(
        "--liger", type=on_off, default=None, metavar="on|off", help="Liger kernels (use_liger_kernel)"
    )
    settings.add_argument("--torch-compile", type=on_off, default=None, metavar="on|off", help="torch_compile")
    add_generation_arguments(parser)


def target_request(args: argparse.Namespace) -> TargetRequest:
    """The target flags as given (and the scenario folder `--scenarios` names, where the command has one)."""
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(TargetRequest)}
    scenarios = None if given["scenarios"] is None else Path(given["scenarios"])
    return TargetRequest(**given | {"nodes": getattr(args, "nodes", 1), "scenarios": scenarios})


def target(args: argparse.Namespace) -> tuple[HardwareProfile, Workload]:
    """The profile and the workload the flags name, the settings applied."""
    return resolve_target(target_request(args))


def runnable_target(args: argparse.Namespace) -> tuple[HardwareProfile, Workload]:
    """`target` for a command that runs on the hardware: a catalog card this suite cannot run on (`runnable: false`,
    AMD's ROCm), or a kernel flag the profile cannot load (bench/cli/run_settings.py), is one line, not a run that
    fails later; advise and predict still estimate it."""
    from bench.cli.run_settings import generation_refusal, kernel_refusal
    from bench.errors import BenchError
    from bench.matrix.gpus import gpu

    profile, workload = target(args)
    if why := kernel_refusal(profile, workload) or generation_refusal(workload):
        raise BenchError(why)
    if profile.gpu is not None and not gpu(profile.gpu).runnable:
        raise BenchError(
            f"--gpu {args.gpu}: this suite cannot run on {profile.gpu} (scenarios/gpus.yaml runnable: false: its "
            "images and launchers are CUDA's); `advise` and `predict` estimate it"
        )
    return profile, workload
