"""Which training-setting flags `run` can apply on a profile: Liger kernels and FlashAttention-2 are CUDA kernels
from packages of their own (liger-kernel, flash-attn); asked for where they cannot load, the run is refused in one
line naming the flag, not a worker that crashes in every cell. Attention eager/sdpa, torch_compile and the
precision modes run anywhere (the worker applies them: bench/worker/models.py, bench/worker/trainer_args.py)."""

import importlib.util

from bench.matrix.axes import Device
from bench.matrix.profiles import HardwareProfile, Workload

KERNELS = {
    "--liger on": ("liger_kernel", "liger-kernel"),
    "--attention flash_attention_2": ("flash_attn", "flash-attn"),
}
"""Each flag that needs a CUDA kernel package: (its module, its package)."""


def asked_kernels(workload: Workload) -> list[str]:
    """The kernel flags among the workload's settings."""
    train = workload.train
    asked = ["--liger on"] if train.use_liger_kernel else []
    return asked + (["--attention flash_attention_2"] if train.attn_implementation == "flash_attention_2" else [])


def kernel_refusal(profile: HardwareProfile, workload: Workload) -> str | None:
    """Why `run` cannot apply a kernel flag on `profile` (None: it can): the profile does not train on CUDA, or the
    package is neither declared by its image (`provides`) nor importable here."""
    for flag in asked_kernels(workload):
        module, package = KERNELS[flag]
        if profile.device != Device.CUDA:
            return f"{flag}: {package} runs CUDA kernels; profile {profile.name} trains on {profile.device}"
        if package not in profile.provides and importlib.util.find_spec(module) is None:
            return f"{flag}: {package} is not installed (pip install {package}) nor provided by {profile.name}'s image"
    return None


def generation_refusal(workload: Workload) -> str | None:
    """Why `run` cannot apply the asked vLLM mode (None: it can): its worker generates with vLLM colocated on the
    `+vllm` cells (TRL's `vllm_mode="colocate"`) and starts no `trl vllm-serve`, so `server`, and `none` (which in
    `advise`/`predict` leaves the `+vllm` rows out), are estimates only; `--filter` chooses the cells a run takes."""
    mode = workload.generation.vllm
    if mode in ("server", "none"):
        return (
            f"--vllm {mode}: run generates with vLLM colocated on the +vllm cells and starts no vLLM server; "
            "advise and predict estimate it (choose cells with --filter)"
        )
    return None
