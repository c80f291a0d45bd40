"""What the online methods (GRPO, RLOO: bench/matrix/methods.py `generates`) add to the matrix: how many steps one
generation serves, and their not-applicable rules (listed in bench/matrix/scenario.py RULES). Pure but for
`vllm_available`, which asks the import system: running a cell here needs vLLM importable, while a prediction for
a target (predict, advise: `TARGET_RULES`) needs only what vLLM itself requires of the target, a CUDA GPU (vLLM's
installation docs: "vLLM supports ... NVIDIA CUDA"; its wheels are built for CUDA, and ROCm has its own build this
suite does not run, bench/matrix/gpus.py `runnable`)."""

import importlib.util

from bench.matrix.axes import Device, Option
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import HardwareProfile, Workload

ONLINE_OPTIONS = (Option.VLLM, Option.REWARD_MODEL)
VLLM = "vllm"


def steps_per_generation(per_device_batch: int, world_size: int, num_generations: int, accumulation: int = 1) -> int:
    """TRL's `steps_per_generation`: the fewest optimizer micro-steps, a multiple of the gradient accumulation (TRL's
    default), whose completions (per_device_batch x world_size each) hold whole groups of num_generations
    (GRPOConfig and RLOOConfig refuse a generation batch that does not divide into them). Each rank generates
    per_device_batch x steps_per_generation completions at once."""
    steps = accumulation
    while (per_device_batch * world_size * steps) % num_generations:
        steps += accumulation
    return steps


def vllm_available(profile: HardwareProfile) -> bool:
    """vLLM is declared by the profile's image (`provides`) or importable here."""
    return VLLM in profile.provides or importlib.util.find_spec(VLLM) is not None


def online_option_needs_generation(on: CellOnProfile) -> str | None:
    cell = on.cell
    asked = [str(o) for o in cell.options if o in ONLINE_OPTIONS]
    if asked and not method_spec(cell.method).generates:
        return f"{asked[0]} applies to the online methods (grpo, rloo); {cell.method} generates nothing"
    return None


def vllm_on_target(on: CellOnProfile) -> str | None:
    """A `+vllm` row on a target that is no CUDA GPU: vLLM cannot generate there whatever is installed."""
    cell, profile = on.cell, on.profile
    if Option.VLLM in cell.options and profile.device != Device.CUDA:
        return f"vLLM generates on CUDA GPUs; profile {profile.name} trains on {profile.device}"
    return None


def vllm_needs_vllm(on: CellOnProfile) -> str | None:
    """Running a `+vllm` row here: a CUDA profile, and vLLM importable here or declared by the profile's image."""
    cell, profile = on.cell, on.profile
    if Option.VLLM not in cell.options:
        return None
    if (off_cuda := vllm_on_target(on)) is not None:
        return off_cuda
    if not vllm_available(profile):
        return f"vLLM is not importable here and profile {profile.name} does not declare it (provides: [vllm])"
    return None


def generation_cannot_precompute(on: CellOnProfile) -> str | None:
    cell = on.cell
    if Option.PRECOMPUTE_REF in cell.options and method_spec(cell.method).generates:
        return f"{cell.method} samples new completions each step: there are no reference log-probs to precompute"
    return None


RULES = (online_option_needs_generation, vllm_needs_vllm, generation_cannot_precompute)


def vllm_left_out(cell: Cell, workload: Workload) -> str | None:
    """A `+vllm` row where the workload's generation says `--vllm none`: the reason it is not predicted."""
    if Option.VLLM in cell.options and workload.generation.vllm == "none":
        return "--vllm none: generation by transformers' generate, so the +vllm row is left out"
    return None


TARGET_RULES = {vllm_needs_vllm: vllm_on_target}
"""The rules a prediction for the target hardware judges in place of the run path's (bench/matrix/scenario.py
`target_reason`)."""
