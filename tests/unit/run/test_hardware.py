"""Device detection, profile checks, --emulate, NVML sampling and `untested` Gaudi cells.

This machine has no GPU: detect() is exercised for real (it must say cpu); CUDA devices, NVML and the CUDA
memory-cap API are fakes injected where the hardware is absent.
"""

import io
import sys
import types
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile
from bench.matrix.scenario import Backend, Init, Launcher, Quant
from bench.report.matrix import render
from bench.results.schema import EMULATED_NOTE, Metrics, ResultRecord, Status
from bench.run.cell import RunContext
from bench.run.preflight import (
    GB,
    Detected,
    check_profile,
    detect,
    emulation_env,
    memory_fraction,
    preflight,
    untested_reason,
)
from bench.run.runner import execute
from bench.worker import emulate, nvml

CPU = Detected(device="cpu")


def gpus(count: int, gb: float, name: str = "NVIDIA H100 80GB HBM3", visible: str | None = None) -> Detected:
    return Detected(
        device="cuda",
        count=count,
        names=(name,) * count,
        memory_bytes=(int(gb * GB),) * count,
        visible_devices=visible,
    )


def test_detect_on_this_machine_says_cpu():
    found = detect()
    assert found.device == "cpu" and found.count == 0 and not found.hpu_stack


def test_gpu_profile_on_cpu_machine_is_one_clear_line():
    error = check_profile(load_profile("2xA10"), CPU, emulate=False)
    assert str(error) == "profile 2xA10 needs 2 cuda devices with >= 24 GB; this machine has 0 cuda devices"
    with pytest.raises(BenchError, match="needs 1 cuda device with >= 80 GB"):
        preflight(load_profile("1xH100"), emulate=False, detected=CPU)


def test_cpu_profile_runs_as_before_and_refuses_emulate():
    assert preflight(load_profile("cpu"), emulate=False).launch_env == {}
    assert check_profile(load_profile("cpu"), gpus(8, 80), emulate=False) is None
    assert "GPU profiles" in str(check_profile(load_profile("cpu"), CPU, emulate=True))


def test_matching_machine_passes():
    a10 = gpus(2, 23.7, "NVIDIA A10")
    assert check_profile(load_profile("2xA10"), a10, emulate=False) is None
    assert preflight(load_profile("2xA10"), emulate=False, detected=a10).emulated_from is None


def test_too_few_or_too_small_devices_fail():
    assert "this machine has 1 cuda device (NVIDIA A10, 24 GB)" in str(
        check_profile(load_profile("2xA10"), gpus(1, 23.7, "NVIDIA A10"), emulate=False)
    )
    assert "needs 1 cuda device with >= 80 GB" in str(
        check_profile(load_profile("1xH100"), gpus(1, 24, "NVIDIA L4"), emulate=True)
    )


def test_bigger_devices_need_emulate():
    error = check_profile(load_profile("2xA10"), gpus(2, 85), emulate=False)
    assert error is not None and "--emulate" in str(error)
    assert check_profile(load_profile("2xA10"), gpus(2, 85), emulate=True) is None


def test_emulation_caps_memory_and_devices():
    big = gpus(4, 85.0)
    profile = load_profile("2xA10")
    assert memory_fraction(profile, big) == pytest.approx(24 / 85)
    env = emulation_env(profile, big)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert float(env[emulate.MEMORY_FRACTION_ENV]) == pytest.approx(24 / 85, abs=1e-6)
    assert emulation_env(profile, gpus(4, 85.0, visible="3,2,1"))["CUDA_VISIBLE_DEVICES"] == "3,2"
    checked = preflight(profile, emulate=True, detected=big)
    assert checked.emulated_from == "NVIDIA H100 80GB HBM3" and checked.launch_env == env


@pytest.mark.parametrize(
    ("hw", "card", "gb"),
    [
        ("1xA10", "NVIDIA A10", 24),
        ("1x4090", "NVIDIA GeForce RTX 4090", 24),
        ("1xL4", "NVIDIA L4", 24),
        ("1xT4", "NVIDIA T4", 16),
    ],
)
def test_one_smaller_card_is_emulated_on_one_h100(hw, card, gb):
    profile = load_profile(hw)
    assert (profile.card, profile.memory_per_device_gb, profile.processes) == (card, gb, 1)
    checked = preflight(profile, emulate=True, detected=gpus(1, 85.0))
    assert float(checked.launch_env[emulate.MEMORY_FRACTION_ENV]) == pytest.approx(gb / 85, abs=1e-6)
    assert checked.emulated_from == "NVIDIA H100 80GB HBM3"


def test_emulation_needs_the_card_the_profile_stands_for():
    nameless = load_profile("1xL4").model_copy(update={"card": None})
    assert "needs the card profile 1xL4 stands for (key `card`" in str(check_profile(nameless, gpus(1, 85.0), True))


def test_extra_devices_are_hidden_without_emulate():
    checked = preflight(load_profile("2xA10"), emulate=False, detected=gpus(4, 23.7, "NVIDIA A10"))
    assert checked.launch_env == {"CUDA_VISIBLE_DEVICES": "0,1"} and checked.emulated_from is None


class FakeCuda:
    def __init__(self, count: int) -> None:
        self.count = count
        self.caps: list[tuple[float, int]] = []

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.count

    def set_per_process_memory_fraction(self, fraction: float, device: int) -> None:
        self.caps.append((fraction, device))


def test_worker_caps_only_its_own_device():
    cuda = FakeCuda(2)
    env = {emulate.MEMORY_FRACTION_ENV: "0.3", "LOCAL_RANK": "1"}
    assert emulate.apply_memory_cap(all_devices=False, launcher="torchrun", cuda=cuda, environ=env) == 0.3
    assert cuda.caps == [(0.3, 1)]
    mpi = FakeCuda(2)
    mpi_env = {emulate.MEMORY_FRACTION_ENV: "0.3", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "LOCAL_RANK": "0"}
    emulate.apply_memory_cap(all_devices=False, launcher="mpirun", cuda=mpi, environ=mpi_env)
    assert mpi.caps == [(0.3, 1)]  # the launcher's own variable, not another launcher's
    spread = FakeCuda(2)
    emulate.apply_memory_cap(all_devices=True, launcher="python", cuda=spread, environ=env)
    assert spread.caps == [(0.3, 0), (0.3, 1)]


def test_worker_without_emulation_touches_nothing():
    cuda = FakeCuda(2)
    assert emulate.apply_memory_cap(all_devices=True, launcher="python", cuda=cuda, environ={}) is None
    assert cuda.caps == []
    with pytest.raises(ValueError, match="must be in"):
        emulate.fraction_from_env({emulate.MEMORY_FRACTION_ENV: "1.5"})


def fake_pynvml(usage: list[list[tuple[int, int]]]) -> types.ModuleType:
    """A pynvml stand-in: usage[device] = [(pid, used bytes), ...], advancing one reading per call."""
    module = types.ModuleType("pynvml")
    calls = {"n": 0, "shutdown": False}
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: calls.__setitem__("shutdown", True)
    module.nvmlDeviceGetCount = lambda: len(usage)
    module.nvmlDeviceGetHandleByIndex = lambda i: i

    def running(handle: int) -> list[types.SimpleNamespace]:
        calls["n"] += 1
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in usage[handle]]

    module.nvmlDeviceGetComputeRunningProcesses = running
    module.calls = calls
    return module


def test_nvml_peak_is_max_over_devices_and_samples_of_own_pid():
    module = fake_pynvml([[(42, 5 * 2**30), (7, 70 * 2**30)], [(42, 9 * 2**30)]])
    sampler = nvml.NvmlSampler(module, pid=42)
    sampler.sample()
    assert sampler.peak == 9 * 2**30
    assert sampler.stop() == 9 * 2**30 and module.calls["shutdown"]
    assert nvml.process_used_bytes(module, [0, 1], pid=99) is None


def test_nvml_sampler_thread_and_absent_module(monkeypatch):
    module = fake_pynvml([[(123, 2**30)]])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(nvml.os, "getpid", lambda: 123)
    sampler = nvml.NvmlSampler.start_if_available()
    assert sampler is not None
    assert sampler.stop() == 2**30 and module.calls["n"] >= 1
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: the field stays None
    assert nvml.load_pynvml() is None and nvml.NvmlSampler.start_if_available() is None


def test_gaudi_without_stack_is_untested_not_an_error():
    gaudi = load_profile("8xGaudi2")
    assert "habana_frameworks" in untested_reason(gaudi, hpu_stack=False)
    assert untested_reason(gaudi, hpu_stack=True) is None
    assert untested_reason(load_profile("1xH100"), hpu_stack=False) is None
    checked = preflight(gaudi, emulate=False, detected=CPU)
    assert checked.untested_reason and not checked.launch_env


def test_runner_records_untested_without_running(tmp_path: Path):
    from bench.assets.prepare import PreparedAssets
    from bench.matrix.profiles import load_workload

    class NoExecutor:
        name, image, python = "never", None, sys.executable

        def run(self, *args: object) -> None:
            raise AssertionError("an untested cell must not run")

    gaudi = load_profile("8xGaudi2")
    ctx = RunContext(
        "r1",
        tmp_path,
        gaudi,
        load_workload("llama-2-7b"),
        PreparedAssets(model="", tokenizer="", dataset=""),
        NoExecutor(),
        untested=preflight(gaudi, emulate=False, detected=CPU).untested_reason,
    )
    cell = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.DDP, launcher=Launcher.TORCHRUN)
    (record,) = execute(ctx, [cell], out=io.StringIO())
    assert record.status == Status.UNTESTED and "habana_frameworks" in record.message
    assert record.metrics is None and record.world_size == 8 and record.executor == "none"


def record(status: Status, emulated_from: str | None, metrics: Metrics | None = None) -> ResultRecord:
    return ResultRecord(
        run_id="r",
        cell_id="one_adapter-none-single",
        init="one_adapter",
        quant="none",
        backend="single",
        launcher="python",
        hardware="2xA10",
        workload="phi-2",
        status=status,
        message="profile 8xGaudi2 needs the Habana Gaudi stack" if status == Status.UNTESTED else "",
        emulated_from=emulated_from,
        metrics=metrics,
    )


def test_matrix_marks_untested_and_emulated_runs():
    text = render([record(Status.UNTESTED, None)], "8xGaudi2", [])
    assert "❔ untested" in text and "needs the Habana Gaudi stack" in text and "EMULATED" not in text
    measured = Metrics(
        tokens_per_s=9100.0,
        pairs_per_s=4.0,
        step_time_median_s=1.0,
        step_time_p90_s=1.1,
        steps=30,
        warmup_steps=5,
        tokens_total=1,
        memory_kind="cuda_allocated",
        load_peak_bytes=None,
        train_peak_bytes=2**30,
        mem_growth_per_step_bytes=None,
        load_s=1.0,
    )
    emulated = render([record(Status.OK, "NVIDIA H100 80GB HBM3", measured)], "2xA10 · run r", [])
    assert emulated.startswith("# 2xA10 · run r · EMULATED on NVIDIA H100 80GB HBM3") and EMULATED_NOTE in emulated
    assert "✅ 9,100 tok/s on NVIDIA H100 80GB HBM3 (emulated) · 1,024 MiB" in emulated


def test_the_docker_executor_counts_the_drivers_gpus_with_a_cpu_build_of_torch(tmp_path, monkeypatch):
    # A real executable named nvidia-smi, answering the query as the driver's tool does (this machine has none).
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf 'NVIDIA A10, 23028\\nNVIDIA A10, 23028\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{Path(sys.executable).parent}:/usr/bin:/bin")
    found = detect(driver_ok=True)
    assert (found.device, found.count, found.names) == ("cuda", 2, ("NVIDIA A10", "NVIDIA A10"))
    assert found.memory_bytes == (23028 * 2**20,) * 2
    assert detect().device == "cpu"  # the local executor needs a torch that sees them
    assert preflight(load_profile("2xA10"), emulate=False, driver_ok=True).untested_reason is None
    with pytest.raises(BenchError, match="0 cuda devices"):
        preflight(load_profile("2xA10"), emulate=False)
