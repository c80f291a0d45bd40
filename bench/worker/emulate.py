"""--emulate inside the worker: cap this process's CUDA caching allocator at the profile's memory per device,
before the model is loaded. The runner computes the fraction (profile memory / real device memory) and passes
it in the launch environment; the visible devices are limited there too (CUDA_VISIBLE_DEVICES). A cell in slots of
one GPU (`run --gpu-slots`, bench/run/memory_slots.py) is capped the same way, at its slots' share.

The cap covers what torch allocates, not the CUDA context (~0.3-0.6 GB per device), so an emulated run is
that much more optimistic than the real smaller card.
"""

import os

from bench.launchers import rank_from_env
from bench.matrix.axes import Launcher

MEMORY_FRACTION_ENV = "BENCH_EMULATE_MEMORY_FRACTION"


def fraction_from_env(environ: dict[str, str] | os._Environ = os.environ) -> float | None:
    value = environ.get(MEMORY_FRACTION_ENV)
    if not value:
        return None
    fraction = float(value)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"{MEMORY_FRACTION_ENV}={value}: must be in (0, 1]")
    return fraction


def apply_memory_cap(
    all_devices: bool, launcher: Launcher, cuda: object = None, environ: dict[str, str] | None = None
) -> float | None:
    """Cap the devices this process uses: its local rank's (as `launcher` tells it), or every visible one
    (device_map). Touching another rank's device would create a CUDA context there, so only this process's
    devices are capped. Returns the fraction applied, None when not emulating or without CUDA."""
    environ = dict(os.environ) if environ is None else environ
    fraction = fraction_from_env(environ)
    if fraction is None:
        return None
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        return None
    devices = range(cuda.device_count()) if all_devices else [rank_from_env(launcher, environ)[1]]
    for index in devices:
        cuda.set_per_process_memory_fraction(fraction, index)
    return fraction
