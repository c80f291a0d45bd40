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
from bench.report.matrix_table import render
from bench.results.schema import EMULATED_NOTE, Metrics, ResultRecord, Status
from bench.run.one_cell import RunContext
from bench.run.preflight import (
    GB,
    Detected,
    check_profile,
    detect,
    driver_problem,
    emulation_env,
    memory_fraction,
    preflight,
    selected,
    untested_reason,
)
from bench.run.runner import execute
from bench.worker import emulate, nvml

CPU = Detected(device="cpu")


def gpus(
    count: int,
    gb: float,
    name: str = "NVIDIA H100 80GB HBM3",
    visible: str | None = None,
    driver: str | None = "580.95.05",
    cuda_build: str | None = "13.0",
) -> Detected:
    return Detected(
        device="cuda",
        count=count,
        names=(name,) * count,
        memory_bytes=(int(gb * GB),) * count,
        visible_devices=visible,
        driver_version=driver,
        cuda_build=cuda_build,
    )


def test_detect_on_this_machine_says_cpu():
    found = detect()
    assert found.device == "cpu" and found.count == 0 and not found.hpu_stack


def test_the_preflight_and_env_json_count_the_same_cuda_devices(monkeypatch):
    """One enumeration of torch's CUDA devices (results/env.py cuda_gpus) serves the preflight and env.json."""
    import torch

    from bench.results.env import cuda_gpus

    cards = [types.SimpleNamespace(name="NVIDIA A10", total_memory=23 * 2**30)] * 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(cards))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: cards[i])
    found = detect()
    assert [(gpu.name, gpu.memory_bytes) for gpu in cuda_gpus()] == list(
        zip(found.names, found.memory_bytes, strict=True)
    )
    assert found.device == "cuda" and found.count == 2 and found.names == ("NVIDIA A10", "NVIDIA A10")


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


def test_the_run_always_names_its_gpus_so_each_cell_can_take_its_own():
    """Cells take their devices from the run's (bench/run/launch.py): also where the machine has exactly the
    profile's GPUs, and within the user's own selection."""
    exact = preflight(load_profile("2xA10"), emulate=False, detected=gpus(2, 23.7, "NVIDIA A10"))
    assert exact.launch_env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    chosen = preflight(load_profile("2xA10"), emulate=False, detected=gpus(2, 23.7, "NVIDIA A10", visible="2,3"))
    assert chosen.launch_env == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_a_cpu_build_of_torch_beside_the_drivers_gpus_is_one_line():
    error = check_profile(load_profile("2xA10"), gpus(2, 23.7, "NVIDIA A10", cuda_build=None), emulate=False)
    assert error is not None and "\n" not in str(error)
    assert str(error).startswith("this machine has 2 cuda devices (NVIDIA A10, 24 GB), but this venv's torch is a CPU")
    assert "make setup" in str(error) and "--executor docker" in str(error)


def test_a_driver_older_than_the_cuda_build_stops_the_run_with_one_line():
    old = gpus(2, 23.7, "NVIDIA A10", driver="535.183.01", cuda_build="13.0")
    error = check_profile(load_profile("2xA10"), old, emulate=False)
    assert str(error) == (
        "profile 2xA10 needs 2 cuda devices with >= 24 GB; NVIDIA driver 535.183.01 is older than 580.65.06, the "
        "oldest that runs CUDA 13.0 (the cells' torch build): update the driver (docs/hardware.md)"
    )
    with pytest.raises(BenchError, match=r"older than 580\.65\.06"):
        preflight(load_profile("2xA10"), emulate=False, detected=old)
    assert check_profile(load_profile("2xA10"), gpus(2, 23.7, driver="580.65.06"), emulate=False) is None
    assert check_profile(load_profile("2xA10"), gpus(2, 23.7, driver="535.183.01", cuda_build="12.8"), False) is None


def test_driver_minimum_by_cuda_major_release():
    assert driver_problem("580.65.06", "13.0") is None and driver_problem("590.1", "13.1") is None
    assert "older than 580.65.06" in driver_problem("575.57.08", "13.0")
    assert "older than 525.60.13" in driver_problem("520.61.05", "12.1")
    assert driver_problem(None, "13.0") is None and driver_problem("400.1", None) is None  # unknown: not judged


def test_nvidia_smi_rows_follow_the_users_selection():
    rows = [["0", "GPU-a", "A10"], ["1", "GPU-b", "A10"], ["2", "GPU-c", "L4"], ["3", "GPU-d", "L4"]]
    assert selected(rows, None) == rows
    assert [r[0] for r in selected(rows, "3, 2")] == ["3", "2"]
    assert [r[0] for r in selected(rows, "GPU-b")] == ["1"]
    assert selected(rows, "7") == []


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


def fake_pynvml(usage: list[list[tuple[int, int | None]]], device_used: int = 0) -> types.ModuleType:
    """A pynvml stand-in: usage[device] = [(pid, used bytes or None), ...], advancing one reading per call; device
    i's UUID is GPU-i; every device's used memory is `device_used`."""
    module = types.ModuleType("pynvml")
    calls = {"n": 0, "shutdown": False}
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: calls.__setitem__("shutdown", True)
    module.nvmlDeviceGetCount = lambda: len(usage)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetHandleByUUID = lambda uuid: int(uuid.removeprefix("GPU-"))
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=device_used)

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
    assert nvml.process_used_bytes(module, [0, 1], pid=99, visible=lambda pid: True) is None


def test_nvml_in_a_container_takes_the_only_process_on_the_cells_device():
    """Inside a container NVML lists host PIDs: 4242 is no process of this PID namespace, and it is alone on the
    cell's device, so it is this process; a device shared with another process, or a foreign process this
    namespace can see, is never counted."""
    host_pid = [[(4242, 7 * 2**30)], [(4242, 3 * 2**30), (5151, 2**30)]]
    foreign = lambda pid: False  # noqa: E731
    assert nvml.process_used_bytes(fake_pynvml(host_pid), [0], pid=12, visible=foreign) == 7 * 2**30
    assert nvml.process_used_bytes(fake_pynvml(host_pid), [1], pid=12, visible=foreign) is None
    assert nvml.process_used_bytes(fake_pynvml(host_pid), [0], pid=12, visible=lambda pid: True) is None
    # NVML may withhold a foreign namespace's per-process figure: the device's used memory, the GPU being the cell's
    withheld = fake_pynvml([[(4242, None)]], device_used=6 * 2**30)
    assert nvml.process_used_bytes(withheld, [0], pid=12, visible=foreign) == 6 * 2**30
    # what the worker really asks: /proc of this machine knows this process, and no PID past pid_max
    assert nvml.in_this_namespace(__import__("os").getpid()) and not nvml.in_this_namespace(2**22 + 1)


def test_nvml_reads_only_the_processs_own_devices_in_nvmls_numbering():
    # CUDA ordinal 0 of a rank that sees CUDA_VISIBLE_DEVICES=2,3 is NVML's device 2 (PCI order on both sides)
    assert nvml.nvml_ids("2,3", [0]) == ["2"] and nvml.nvml_ids("2,3", [0, 1]) == ["2", "3"]
    assert nvml.nvml_ids(None, [1]) == ["1"] and nvml.nvml_ids("GPU-3", [0]) == ["GPU-3"]
    module = fake_pynvml([[(42, 2**30)], [(7, 2**30)], [(42, 5 * 2**30)], [(42, 9 * 2**30)]])
    sampler = nvml.NvmlSampler(module, pid=42, devices=nvml.nvml_ids("2,GPU-3", [0]))
    sampler.sample()
    assert sampler.handles == [2] and sampler.peak == 5 * 2**30  # device 3 (another rank's) is not read
    assert nvml.handle_of(module, "MIG-1/2/0") is None


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
        concurrent, memory_budget_bytes = False, None

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


def fake_nvidia_smi(folder: Path, monkeypatch: pytest.MonkeyPatch, driver: str = "580.95.05") -> None:
    """A real executable named nvidia-smi on PATH, answering the query as the driver's tool does (this machine has
    none)."""
    smi = folder / "nvidia-smi"
    rows = "".join(f"{i}, GPU-{i}aaa, NVIDIA A10, 23028, {driver}\\n" for i in range(4))
    smi.write_text(f"#!/bin/sh\nprintf '{rows}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin")


def test_the_docker_executor_counts_the_drivers_gpus_with_a_cpu_build_of_torch(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    found = detect(where="image")
    assert (found.device, found.count, found.names) == ("cuda", 2, ("NVIDIA A10", "NVIDIA A10"))
    assert found.memory_bytes == (23028 * 2**20,) * 2
    assert (found.driver_version, found.cuda_build) == ("580.95.05", "13.0")  # the cuda lock's build
    checked = preflight(load_profile("2xA10"), emulate=False, where="image")
    assert checked.untested_reason is None and checked.launch_env == {"CUDA_VISIBLE_DEVICES": "2,3"}
    # the local executor needs a torch that sees them: this venv's is a CPU build, and the run stops saying so
    local = detect()
    assert (local.device, local.count, local.cuda_build) == ("cuda", 2, None)
    with pytest.raises(BenchError, match="this venv's torch is a CPU build: run `make setup` again"):
        preflight(load_profile("2xA10"), emulate=False)


def test_an_old_driver_stops_the_docker_run_before_any_cell(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, driver="570.133.20")
    with pytest.raises(BenchError, match=r"NVIDIA driver 570\.133\.20 is older than 580\.65\.06"):
        preflight(load_profile("2xA10"), emulate=False, where="image")


def test_without_a_driver_the_gpu_profile_still_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    with pytest.raises(BenchError, match="this machine has 0 cuda devices"):
        preflight(load_profile("2xA10"), emulate=False, where="image")


def test_an_h200_runs_its_own_profile_and_is_named_for_the_others():
    """The card the driver names is looked up in the GPU catalog: an H200 runs `1xH200`, and `1xH100` on it points to
    the card's own profile."""
    h200 = gpus(1, 150.1, name="NVIDIA H200")
    assert check_profile(load_profile("1xH200"), h200, emulate=False) is None
    error = check_profile(load_profile("1xH100"), h200, emulate=False)
    assert error is not None and "--gpu H200:1" in str(error)
    machine = preflight(load_profile("1xH200"), emulate=False, detected=h200)
    assert machine.card is not None and machine.card.name == "H200"
    assert machine.peak_tflops(load_profile("1xH200")) == 989
    assert machine.memory_profile(load_profile("1xH200")).memory_per_device_gb == pytest.approx(150.1)


def test_mfu_and_memory_come_from_the_card_that_runs():
    """An H100 PCIe taken as `1xH100` (SXM) divides by its own 756 TFLOP/s; under --emulate the peak is the big
    card's and the memory the emulated profile's."""
    pcie = preflight(load_profile("1xH100"), emulate=False, detected=gpus(1, 85, name="NVIDIA H100 PCIe"))
    assert pcie.peak_tflops(load_profile("1xH100")) == 756
    emulated = preflight(load_profile("1xA10"), emulate=True, detected=gpus(1, 150.1, name="NVIDIA H200"))
    assert emulated.peak_tflops(load_profile("1xA10")) == 989
    assert emulated.memory_profile(load_profile("1xA10")).memory_per_device_gb == 24
    unknown = preflight(load_profile("1xH100"), emulate=False, detected=gpus(1, 85, name="NVIDIA H100 NVL"))
    assert unknown.card is None and unknown.peak_tflops(load_profile("1xH100")) is None
