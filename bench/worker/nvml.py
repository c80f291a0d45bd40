"""NVML per-process GPU memory, sampled in a background thread: what `nvidia-smi` shows for this process
(allocator reserve + CUDA context + non-torch allocations), which torch's own counters miss.

Uses the `pynvml` module (package nvidia-ml-py) when importable; without it, or without a GPU, the sampler is
not started and the field stays None. Inside a container with its own PID namespace NVML reports host PIDs,
which never match: the peak is then None rather than wrong.
"""

import contextlib
import os
import threading
from typing import Any

INTERVAL_S = 0.05


def load_pynvml() -> Any | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    return pynvml


def process_used_bytes(nvml: Any, handles: list[Any], pid: int) -> int | None:
    """Max over devices of this pid's used memory; None when the pid is on no device."""
    found = None
    for handle in handles:
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            used = getattr(proc, "usedGpuMemory", None)
            if proc.pid == pid and used is not None:
                found = max(found or 0, int(used))
    return found


class NvmlSampler:
    """Samples every `interval_s` until stop(); stop() returns the peak in bytes (None if never seen)."""

    def __init__(self, nvml: Any, pid: int | None = None, interval_s: float = INTERVAL_S) -> None:
        self.nvml = nvml
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    @classmethod
    def start_if_available(cls) -> "NvmlSampler | None":
        nvml = load_pynvml()
        if nvml is None:
            return None
        try:
            sampler = cls(nvml)
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
