"""The fork server on GPUs, checked on this CPU-only torch by its mechanism: the server's imports never initialise
CUDA (bitsandbytes' capability probe is answered by NVML; torch's CUDA initialisation and the driver's are traps
here), NVML is shut down after any question, a server holding libcuda or NVML refuses to serve, and a child's CUDA
would read the CUDA_VISIBLE_DEVICES its request carried."""

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.isolation import fork_server_process, gpu_state
from bench.isolation.fork_server import ForkServer
from bench.paths import PROJECT_ROOT

FAKE_GPUS = """
import json, sys, traceback
import torch

calls = []

def trap(name, result=None):
    def called(*args, **kwargs):
        calls.append(f"{name} from {traceback.format_stack(limit=4)[0].strip()}")
        if result is None:
            raise RuntimeError(f"{name} was called")
        return result
    return called

# torch as a CUDA build on a box of two GPUs: NVML counts them; initialising CUDA (torch's or the driver's) is a trap
torch.cuda._is_compiled = lambda: True
torch.cuda.device_count = lambda: 2
torch.cuda._lazy_init = trap("torch.cuda._lazy_init")
torch._C._cuda_getDeviceCount = trap("cudaGetDeviceCount (cuInit)", 2)
torch._C._cuda_getCurrentRawStream = lambda *args: 0  # bitsandbytes' CUDA ops take it at import
real = torch.cuda.get_device_capability
from bench.isolation import fork_server_process, gpu_state

asked = []

def capability(index, lib=None):
    if sys.argv[2] == "no-nvml":
        raise RuntimeError("no NVML")
    asked.append(index)
    return (9, 0)

gpu_state.nvml_capability = capability
try:
    exec(sys.argv[1])
    error = None
except Exception as exc:
    error = str(exc)
modules = [name for name in ("bitsandbytes", "peft", "trl") if name in sys.modules]
restored = torch.cuda.get_device_capability is real
print(json.dumps({"calls": calls, "asked": asked, "initialised": torch.cuda.is_initialized(), "restored": restored,
                  "modules": modules, "hazards": fork_server_process.fork_hazards(), "error": error}))
"""
ACCELERATOR = "fork_server_process.preload('bench.worker.preload:accelerator')"


def on_fake_gpus(preload: str, nvml: str = "nvml") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", FAKE_GPUS, preload, nvml],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_accelerator_preload_imports_bitsandbytes_peft_and_trl_without_initialising_cuda():
    seen = on_fake_gpus(ACCELERATOR)
    assert seen["calls"] == [] and not seen["initialised"] and seen["error"] is None
    assert seen["asked"] == [0, 1]  # bitsandbytes' probe of both GPUs, answered by NVML
    assert seen["modules"] == ["bitsandbytes", "peft", "trl"] and seen["restored"] and seen["hazards"] == []


def test_the_fake_gpus_catch_bitsandbytes_initialising_cuda_while_it_imports():
    seen = on_fake_gpus(f"import os; os.environ['{fork_server_process.NVML_CHECK_ENV}'] = '1'; import bitsandbytes")
    (call,) = seen["calls"]  # availability asked of NVML; the capability of CUDA
    assert call.startswith("torch.cuda._lazy_init from") and "get_device_capability" in call


def test_a_capability_nvml_cannot_answer_stops_the_preload_instead_of_leaving_bitsandbytes_on_its_cpu_library():
    seen = on_fake_gpus(ACCELERATOR, nvml="no-nvml")
    assert seen["error"].startswith("bitsandbytes' capability probe could not be answered without CUDA")
    assert seen["calls"] == [] and seen["restored"]


class FakeNvml:
    """libnvidia-ml's reference-counted initialisation."""

    def __init__(self, initialised: int = 0) -> None:
        self.count = initialised
        self.handles: list[int] = []

    def nvmlInit_v2(self) -> int:
        self.count += 1
        return 0

    def nvmlShutdown(self) -> int:
        if self.count == 0:
            return gpu_state.NVML_ERROR_UNINITIALIZED
        self.count -= 1
        return 0

    def nvmlDeviceGetCount_v2(self, count) -> int:
        return 0 if self.count else gpu_state.NVML_ERROR_UNINITIALIZED

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle) -> int:
        self.handles.append(index.value)
        return 0 if self.count else gpu_state.NVML_ERROR_UNINITIALIZED

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor) -> int:
        ctypes.cast(major, ctypes.POINTER(ctypes.c_int))[0] = 9
        return 0


def test_nvml_left_initialised_by_torchs_checks_is_shut_down_as_often_as_it_was_initialised():
    nvml = FakeNvml(initialised=3)  # torch's availability check: one nvmlInit per call, no shutdown
    assert gpu_state.nvml_initialised(nvml)
    assert gpu_state.shutdown_nvml(nvml) == 3 and not gpu_state.nvml_initialised(nvml)
    assert gpu_state.shutdown_nvml(nvml) == 0


def test_a_capability_from_nvml_leaves_nvml_as_it_found_it():
    nvml = FakeNvml()
    assert gpu_state.nvml_capability(1, nvml) == (9, 0) and nvml.handles == [1] and nvml.count == 0


def test_a_server_holding_the_cuda_driver_or_nvml_refuses_to_serve(monkeypatch):
    maps = "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
    assert gpu_state.libcuda_mapped(maps) and not gpu_state.libcuda_mapped(maps.replace("libcuda", "libcudart"))
    libcuda, nvml = "the CUDA driver (libcuda) was loaded", "NVML is still initialised"
    assert not any(nvml in hazard or libcuda in hazard for hazard in fork_server_process.fork_hazards(""))
    assert any(hazard.startswith(libcuda) for hazard in fork_server_process.fork_hazards(maps))
    monkeypatch.setattr(gpu_state, "nvml_initialised", lambda lib=None: True)
    # pytest's threads may be named too
    assert any(hazard.startswith(nvml) for hazard in fork_server_process.fork_hazards(""))


CHILD = """
import json, os, sys, torch
from bench.isolation import gpu_state
print(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "parsed": torch.cuda._parse_visible_devices(),
                  "initialised": torch.cuda.is_initialized(), "cached_count": torch.cuda._cached_device_count,
                  "bitsandbytes": "bitsandbytes" in sys.modules, "libcuda": gpu_state.libcuda_mapped()}))
"""


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"} | {"CUDA_VISIBLE_DEVICES": "0,1"}
    log = tmp_path_factory.mktemp("fork_server") / "server.log"
    server = ForkServer.start(sys.executable, PROJECT_ROOT, env, "bench.worker.preload:accelerator", log)
    assert server.wait(600) is None, log.read_text()
    yield server, env
    server.stop()


def test_the_gpu_safe_server_maps_no_cuda_driver_and_its_child_reads_its_own_cuda_visible_devices(gpu_server):
    server, env = gpu_server
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    assert not gpu_state.libcuda_mapped(maps) and not gpu_state.mapped("libnvidia-ml.so", maps)
    done = subprocess.run(
        [server.client, "-c", CHILD],
        env=env | server.env | {"CUDA_VISIBLE_DEVICES": "1"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    child = json.loads(done.stdout.splitlines()[-1])
    assert child == {
        "visible": "1",
        "parsed": [1],
        "initialised": False,  # CUDA initialises in the child, reading its own variable
        "cached_count": None,  # no device count carried over from the server's two
        "bitsandbytes": True,  # imported once, by the server
        "libcuda": False,
    }
