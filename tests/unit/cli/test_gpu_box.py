"""`make bench HW=2xA10` on a GPU box: `make setup` installs the cuda lock where nvidia-smi lists a GPU (the cpu lock
elsewhere, as in CI), and the run checks the devices where the cells will run (issue 32). nvidia-smi is a real
executable on PATH answering as the driver's tool does; `make -n` prints what setup would run without running it."""

import subprocess
from pathlib import Path

import pytest

from bench.executors import choice as executor_choice
from bench.matrix.profiles import load_profile
from bench.paths import PROJECT_ROOT


def make_setup(tmp_path: Path, smi_lines: list[str] | None, stamps: tuple[str, ...] = ()) -> list[str]:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if smi_lines is not None:
        smi = folder / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in smi_lines))
        smi.chmod(0o755)
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    for stamp in stamps:
        (venv / stamp).touch()
    done = subprocess.run(
        ["make", "-n", "setup", f"VENV={venv}"],
        cwd=PROJECT_ROOT,
        env={"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


A10S = ["GPU 0: NVIDIA A10 (UUID: GPU-0a)", "GPU 1: NVIDIA A10 (UUID: GPU-1b)"]


def test_setup_installs_the_cuda_lock_where_the_driver_lists_a_gpu(tmp_path):
    lines = make_setup(tmp_path, A10S)
    assert any(line.endswith("-r docker/cuda/requirements.lock") for line in lines)
    assert lines[-1].endswith(".installed-cuda")
    assert any("prebuild_deepspeed_ops.py" in line for line in lines)  # DeepSpeedCPUAdam, not in a timed cell


def test_setup_installs_the_cpu_lock_without_a_gpu(tmp_path):
    for smi in (None, ["No devices were found"]):
        lines = make_setup(tmp_path, smi)
        assert any(line.endswith("-r docker/cpu/requirements.lock") for line in lines), smi
        assert not any("uninstall" in line for line in lines)


def test_switching_flavors_takes_the_other_torch_out_first(tmp_path):
    """torch==2.13.0+cpu satisfies the cuda lock's torch==2.13.0: pip would keep the CPU build."""
    lines = make_setup(tmp_path, A10S, stamps=(".installed-cpu",))
    uninstall = next(i for i, line in enumerate(lines) if "pip uninstall" in line and " torch" in line)
    install = next(i for i, line in enumerate(lines) if line.endswith("-r docker/cuda/requirements.lock"))
    assert uninstall < install and ".installed-cpu" in lines[uninstall]


@pytest.mark.parametrize(
    ("choice", "hw", "engine", "where"),
    [
        ("docker", "2xA10", False, "image"),
        ("local", "2xA10", True, "local"),
        ("slurm", "2xA10", True, None),
        ("auto", "2xA10", True, "image"),
        ("auto", "2xA10", False, "local"),
        ("auto", "cpu", True, "local"),
        ("auto", "cpu-budget", True, "local"),
    ],
)
def test_the_devices_are_checked_where_the_cells_will_run(monkeypatch, choice, hw, engine, where):
    """auto runs a GPU profile in the cuda image when an engine answers: its GPUs are the driver's then, whatever
    this venv's torch is (the README's `make bench HW=2xA10` on a box with docker)."""
    asked: list[bool] = []
    monkeypatch.setattr(executor_choice.images, "engine_available", lambda: asked.append(True) or engine)
    assert executor_choice.cells_run_in(choice, load_profile(hw)) == where
    if hw == "cpu":
        assert asked == []  # a CPU profile asks no engine before it runs
