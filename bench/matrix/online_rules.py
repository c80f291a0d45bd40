"""What the online methods (GRPO, RLOO: bench/matrix/methods.py `generates`) add to the matrix: how many steps one
generation serves, and their not-applicable rules (listed in bench/matrix/scenario.py RULES). Pure but for
`vllm_available`, which asks the import system."""

import importlib.util

from bench.matrix.axes import Device, Option
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import HardwareProfile

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


def vllm_needs_vllm(on: CellOnProfile) -> str | None:
    cell, profile = on.cell, on.profile
    if Option.VLLM not in cell.options:
        return None
    if profile.device != Device.CUDA:
        return f"vLLM generates on CUDA GPUs; profile {profile.name} trains on {profile.device}"
    if not vllm_available(profile):
        return f"vLLM is not importable here and profile {profile.name} does not declare it (provides: [vllm])"
    return None


def generation_cannot_precompute(on: CellOnProfile) -> str | None:
    cell = on.cell
    if Option.PRECOMPUTE_REF in cell.options and method_spec(cell.method).generates:
        return f"{cell.method} samples new completions each step: there are no reference log-probs to precompute"
    return None


RULES = (online_option_needs_generation, vllm_needs_vllm, generation_cannot_precompute)
