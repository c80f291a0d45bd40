"""NVML per-process GPU memory, sampled in a background thread: what `nvidia-smi` shows for this process
(allocator reserve + CUDA context + non-torch allocations), which torch's own counters miss.

Uses `pynvml` (nvidia-ml-py, in the cuda lock) where importable; else the field stays None. Only this process's
devices are read, mapped to NVML's numbering through CUDA_VISIBLE_DEVICES (the launch sets PCI_BUS_ID order). In a
container with its own PID namespace NVML reports host PIDs: when the only process NVML lists on the cell's device is
not in this namespace, the device is the cell's alone and that process is this one; otherwise the sample is skipped.
Cells in slots of one GPU run in this namespace and find their own entry, never the device-wide figure."""

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

INTERVAL_S = 0.05


def load_pynvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pynvml


def nvml_ids(visible: str | None, ordinals: list[int]) -> list[str]:
    """Pure: the NVML ids (index or GPU-UUID) of these CUDA ordinals under CUDA_VISIBLE_DEVICES=`visible`."""
    named = [item.strip() for item in (visible or "").split(",") if item.strip()]
    return [named[i] if named else str(i) for i in ordinals if not named or i < len(named)]


def handle_of(nvml: Any, device_id: str) -> Any | None:
    """The NVML handle of a CUDA_VISIBLE_DEVICES entry; None for what NVML cannot name alone (a MIG instance)."""
    if device_id.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(device_id)
    return nvml.nvmlDeviceGetHandleByIndex(int(device_id)) if device_id.isdigit() else None


def in_this_namespace(pid: int) -> bool:
    """Whether `pid` names a process this process can see (its PID namespace)."""
    return os.path.exists(f"/proc/{pid}")


def device_used_by(nvml: Any, handle: Any, pid: int, visible: Callable[[int], bool] = in_this_namespace) -> int | None:
    """This pid's used memory on one device: its own entry; else, when the device's only process is outside this
    PID namespace (this process, seen by its host PID from a container), that one's; else None."""
    processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    mine = [p for p in processes if p.pid == pid and getattr(p, "usedGpuMemory", None) is not None]
    if mine:
        return max(int(p.usedGpuMemory) for p in mine)
    if len(processes) != 1 or visible(processes[0].pid):
        return None
    used = getattr(processes[0], "usedGpuMemory", None)
    return int(used) if used is not None else int(nvml.nvmlDeviceGetMemoryInfo(handle).used)


def process_used_bytes(
    nvml: Any, handles: list[Any], pid: int, visible: Callable[[int], bool] = in_this_namespace
) -> int | None:
    """Max over this process's devices of its used memory; None when it is seen on none of them."""
    found = None
    for handle in handles:
        used = device_used_by(nvml, handle, pid, visible)
        if used is not None:
            found = max(found or 0, used)
    return found


class NvmlSampler:
    """Samples every `interval_s` until stop(); stop() returns the peak in bytes (None if never seen). `devices`:
    NVML ids of this process's devices (nvml_ids); None: every device NVML lists."""

    def __init__(
        self, nvml: Any, pid: int | None = None, interval_s: float = INTERVAL_S, devices: list[str] | None = None
    ) -> None:
        self.nvml = nvml
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        nvml.nvmlInit()
        if devices is None:
            devices = [str(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.handles = [h for h in (handle_of(nvml, d) for d in devices) if h is not None]

    @classmethod
    def start_if_available(cls, devices: list[str] | None = None) -> "NvmlSampler | None":
        nvml = load_pynvml()
        if nvml is None:
            return None
        try:
            sampler = cls(nvml, devices=devices)
        except Exception:  # no driver / no GPU: NVMLError subclasses differ between versions
            return None
        sampler._thread.start()
        return sampler

    def sample(self) -> None:
        used = process_used_bytes(self.nvml, self.handles, self.pid)
        if used is not None:
            self.peak = max(self.peak or 0, used)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a transient NVML error must not kill the training process
                self.sample()
            self._stop.wait(self.interval_s)

    def stop(self) -> int | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        with contextlib.suppress(Exception):
            self.sample()
            self.nvml.nvmlShutdown()
        return self.peak
