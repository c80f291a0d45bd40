"""Process memory readings. Host: Linux VmHWM/VmRSS (peak resettable via /proc/self/clear_refs).
CUDA: torch's allocator statistics."""

from pathlib import Path

import torch

from bench.results.schema import RssParts

STATUS = Path("/proc/self/status")


def _status_fields(text: str) -> dict[str, int]:
    """The `Name:  <n> kB` lines of a /proc/<pid>/status text, in KiB."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name] = int(parts[0])
    return fields


def _status_kib(field: str) -> int | None:
    try:
        return _status_fields(STATUS.read_text()).get(field)
    except OSError:
        return None


def parts_of(status_text: str) -> RssParts | None:
    """RSS by what backs it, from a /proc/<pid>/status text; None where the kernel does not split it (before 4.5)."""
    fields = _status_fields(status_text)
    if not all(k in fields for k in ("RssAnon", "RssFile", "RssShmem")):
        return None
    return RssParts(
        anon_bytes=fields["RssAnon"] * 1024, file_bytes=fields["RssFile"] * 1024, shmem_bytes=fields["RssShmem"] * 1024
    )


def rss_parts() -> RssParts | None:
    """This process's RSS by what backs it now (one read of /proc/self/status); None without /proc."""
    try:
        return parts_of(STATUS.read_text())
    except OSError:
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
