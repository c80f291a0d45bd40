"""Process memory readings. Host: Linux VmHWM/VmRSS (peak resettable via /proc/self/clear_refs).
CUDA: torch's allocator statistics."""

from pathlib import Path

import torch


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes() -> int | None:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> bool:
    """Linux: writing 5 to clear_refs resets VmHWM to the current RSS. False where unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def cuda_used() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _devices(devices: list[int] | None) -> list[int]:
    return list(range(torch.cuda.device_count())) if devices is None else devices


def cuda_peaks(devices: list[int] | None = None) -> tuple[int, int]:
    """(max allocated, max reserved) over `devices` (default: every visible one)."""
    allocated = reserved = 0
    for index in _devices(devices):
        allocated = max(allocated, torch.cuda.max_memory_allocated(index))
        reserved = max(reserved, torch.cuda.max_memory_reserved(index))
    return allocated, reserved


def reset_cuda_peaks(devices: list[int] | None = None) -> None:
    for index in _devices(devices):
        torch.cuda.reset_peak_memory_stats(index)


def cuda_allocated_now(devices: list[int] | None = None) -> int:
    return max((torch.cuda.memory_allocated(i) for i in _devices(devices)), default=0)
