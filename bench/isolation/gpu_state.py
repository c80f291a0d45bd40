"""What a process holds of the NVIDIA driver, read and released without initialising CUDA, for the fork server
(bench/isolation/fork_server_process.py): a CUDA context does not survive a fork, and the driver reads
CUDA_VISIBLE_DEVICES once, when CUDA initialises, so the server must leave both to its children.

Whether libcuda (the driver, loaded when CUDA initialises) is mapped; whether NVML (libnvidia-ml, which answers
questions about the devices without CUDA) is initialised, and shutting it down: NVML counts its initialisations,
and torch's NVML-based availability check initialises it at every call and never shuts it down; a device's compute
capability from NVML. Standard library only (ctypes); NVML is loaded only where asked for a capability.
"""

import ctypes
from pathlib import Path
from typing import Any

NVML = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
SHUTDOWN_LIMIT = 1024
"""At most this many shutdowns: each import that asked torch whether CUDA is there initialised NVML once."""


def maps() -> str:
    """This process's /proc/self/maps ('' where it cannot be read)."""
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def mapped(library: str, maps_text: str) -> bool:
    """Whether a file whose name begins with `library` (`libcuda.so`) is mapped."""
    paths = (line.rsplit(maxsplit=1)[-1] for line in maps_text.splitlines() if "/" in line)
    return any(Path(path).name.startswith(library) for path in paths)


def libcuda_mapped(maps_text: str | None = None) -> bool:
    return mapped("libcuda.so", maps() if maps_text is None else maps_text)


def _loaded_nvml(maps_text: str | None = None) -> Any:
    """NVML's library where this process has it loaded already; None where it has not (nothing to release)."""
    return ctypes.CDLL(NVML) if mapped("libnvidia-ml.so", maps() if maps_text is None else maps_text) else None


def nvml_initialised(lib: Any = None) -> bool:
    """Whether NVML is initialised here: a call that needs it answers otherwise than `uninitialised`."""
    lib = lib if lib is not None else _loaded_nvml()
    if lib is None:
        return False
    count = ctypes.c_uint()
    return lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != NVML_ERROR_UNINITIALIZED


def shutdown_nvml(lib: Any = None) -> int:
    """Shut NVML down as often as it was initialised; how many shutdowns that took (0: it was not)."""
    lib = lib if lib is not None else _loaded_nvml()
    if lib is None:
        return 0
    for done in range(SHUTDOWN_LIMIT):
        if lib.nvmlShutdown() != NVML_SUCCESS:
            return done
    return SHUTDOWN_LIMIT


def nvml_capability(index: int, lib: Any = None) -> tuple[int, int]:
    """The CUDA compute capability of NVML's device `index`, NVML initialised and shut down again around the
    question. RuntimeError where NVML cannot answer."""
    lib = lib if lib is not None else ctypes.CDLL(NVML)
    _check(lib.nvmlInit_v2(), "nvmlInit_v2")
    try:
        handle = ctypes.c_void_p()
        _check(lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)), "a device handle")
        major, minor = ctypes.c_int(), ctypes.c_int()
        _check(lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)), "capability")
        return major.value, minor.value
    finally:
        lib.nvmlShutdown()


def _check(code: int, what: str) -> None:
    if code != NVML_SUCCESS:
        raise RuntimeError(f"NVML could not answer {what} (NVML error {code})")
