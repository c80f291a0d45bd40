"""What the run's fork server imports once for every cell (bench/isolation/zygote.py): the worker's own modules and
the libraries every cell imports (bench/worker/build.py import_libraries). A cell's extras (deepspeed, another
method's trainer) are imported by its child, as a fresh worker would.

`from trl import DPOTrainer` costs seconds on CPU: peft imports bitsandbytes, whose default backend compiles its
kernels with torch.compile at import (torch._dynamo and _inductor, ~1.5 s); peft's constants import transformers'
generation code (~2 s); the trainer utilities, datasets and torch make the rest. None of it can be left out without
changing what the cell runs, so it is paid once per run here."""

import contextlib
from collections.abc import Iterator
from typing import Any

from bench.isolation import gpu_state


def cpu() -> None:
    import bench.worker.__main__  # noqa: F401  (its module: its main runs as __main__ only)
    from bench.isolation import cgroups, progress  # noqa: F401
    from bench.worker import build, engage, faults, measure, memory, models, nvml, placement, trainer_args  # noqa: F401
    from bench.worker.stages import dpo  # noqa: F401

    for name in ("transformers", "datasets", "trl", "peft", "accelerate"):
        __import__(name)
    from trl import DPOTrainer  # noqa: F401


def accelerator() -> None:
    """What every cell imports, as on CPU, without initialising CUDA or leaving NVML initialised (a CUDA context
    does not survive a fork, and each child's CUDA must read its own CUDA_VISIBLE_DEVICES). torch's availability
    check asks NVML here (bench/isolation/zygote.py sets PYTORCH_NVML_BASED_CUDA_CHECK, and shuts NVML down after).
    bitsandbytes, which peft imports, reads the devices' compute capability while it imports, to choose its CUDA
    library, through torch.cuda.get_device_capability, which initialises CUDA: it is imported first, with that
    question answered by NVML. What it sets then from the server's devices: whether more than one is visible
    (bitsandbytes/functional.py switches to the tensor's device before a kernel where so, which a child that sees
    one device does to no effect)."""
    import torch

    with capability_from_nvml(torch) as unanswered:
        import bitsandbytes  # noqa: F401
    if unanswered:
        raise RuntimeError(f"bitsandbytes' capability probe could not be answered without CUDA: {unanswered[0]}")
    cpu()


def hpu() -> None:
    """Only what imports without touching a Gaudi: bitsandbytes imports habana_frameworks.torch where it is installed,
    which is left to the child, as peft, trl and the worker's modules with it (not measured on a Gaudi)."""
    for name in ("torch", "transformers", "transformers.modeling_utils", "datasets", "accelerate"):
        __import__(name)


@contextlib.contextmanager
def capability_from_nvml(torch: Any) -> Iterator[list[str]]:
    """While the block runs, torch.cuda.get_device_capability answers from NVML where CUDA is not initialised
    (bench/isolation/gpu_state.py), as torch itself would once it is. Yields the questions NVML could not answer
    (bitsandbytes takes a failed probe for no GPU and loads its CPU library: the caller must not go on)."""
    real = torch.cuda.get_device_capability
    unanswered: list[str] = []

    def answer(device: Any = None) -> tuple[int, int]:
        if torch.cuda.is_initialized():
            return real(device)
        try:
            return gpu_state.nvml_capability(torch.cuda._get_nvml_device_index(device_index(torch, device)))
        except Exception as exc:
            unanswered.append(f"device {device}: {exc}")
            raise

    torch.cuda.get_device_capability = answer
    try:
        yield unanswered
    finally:
        torch.cuda.get_device_capability = real


def device_index(torch: Any, device: Any) -> int:
    """The index a device argument of torch.cuda's names, without asking CUDA for its current device (0 until a
    process sets another)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.cuda.device):
        return int(device.idx)
    if isinstance(device, torch.device):
        return device.index or 0
    return 0 if device is None else int(device)
