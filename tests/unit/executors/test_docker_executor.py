"""Pure parts of the docker executor and image tagging: no docker engine needed."""

import json
from pathlib import Path

import pytest

from bench.executors import docker_images as images
from bench.executors.base import LaunchPlan, Outcome
from bench.executors.docker import (
    GPU_SHM_GB,
    ContainerSpec,
    Mount,
    container_name,
    container_spec,
    docker_run_argv,
    gpu_request,
    parse_state,
)
from bench.judge.record import Execution, Expectation, RunFacts, finished_record
from bench.matrix.cell import Cell
from bench.matrix.profiles import load_profile
from bench.matrix.scenario import Backend, Init, Launcher, Quant
from bench.results.schema import Status

ROOT = Path("/src/dpo-bench")
RUN_DIR = Path("/data/results/cpu/20250101-000000")
LABELS = {"dpo-bench.run": "20250101-000000", "dpo-bench.cell": "one_adapter-none-ddp+precompute_ref"}


def _argv(profile, launch: LaunchPlan | None = None) -> list[str]:
    spec = container_spec("dpo-bench/cpu:abc", profile, ROOT, writable=[RUN_DIR], readonly=[ROOT / "build" / "assets"])
    launch = launch or LaunchPlan(argv=["/opt/venv/bin/python", "-m", "bench.worker", "spec.json"], env={"A": "1"})
    return docker_run_argv(spec, launch, "dpo-bench-x", LABELS)


def _option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


@pytest.fixture
def limited(cpu_profile):
    return cpu_profile.model_copy(update={"container_cpus": 2.0, "container_memory_gb": 1.5, "shm_size_gb": 2.0})


def test_limits_network_user_and_no_privileges(limited):
    argv = _argv(limited)
    assert _option(argv, "--cpus") == ["2"]
    assert _option(argv, "--memory") == ["1536m"] and _option(argv, "--memory-swap") == ["1536m"]
    assert _option(argv, "--shm-size") == ["2048m"]
    assert _option(argv, "--network") == ["none"]
    assert _option(argv, "--user") == [f"{limited_uid()}"]
    assert "--privileged" not in argv and not any(a.startswith("--cap-add") for a in argv)
    assert "--gpus" not in argv


def limited_uid() -> str:
    import os

    return f"{os.getuid()}:{os.getgid()}"


def test_no_limits_when_the_profile_sets_none(cpu_profile):
    argv = _argv(cpu_profile)
    for flag in ("--cpus", "--memory", "--shm-size"):
        assert flag not in argv


def _cuda(profile, **update):
    return profile.model_copy(update={"device": "cuda", "image_flavor": "cuda", **update})


def _env(argv: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in _option(argv, "--env"))


def test_cuda_cell_gets_its_planned_devices_renumbered_inside(limited):
    argv = _argv(_cuda(limited, device_count=2, processes=2), LaunchPlan(argv=["python"], devices=2))
    assert _option(argv, "--gpus") == ['"device=0,1"']
    assert _env(argv)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_cuda_cell_takes_the_visible_devices_of_its_launch_env(limited):
    """The launch plan named the cell's host GPUs 3,5: those are granted, seen as 0,1 inside."""
    launch = LaunchPlan(argv=["python"], env={"CUDA_VISIBLE_DEVICES": "3, 5,7"}, devices=2)
    argv = _argv(_cuda(limited, device_count=1, processes=2), launch)
    assert _option(argv, "--gpus") == ['"device=3,5"']
    assert _env(argv)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_one_device_cell_of_a_two_gpu_profile_gets_one_device(limited):
    """Not the profile's device count: a single-process cell that saw two GPUs would be refused by TRL
    (nn.DataParallel), so its plan asks for one."""
    launch = LaunchPlan(argv=["python"], env={"CUDA_VISIBLE_DEVICES": "1"}, devices=1)
    argv = _argv(_cuda(limited, device_count=2, processes=2), launch)
    assert _option(argv, "--gpus") == ['"device=1"'] and _env(argv)["CUDA_VISIBLE_DEVICES"] == "0"


def test_gpu_cell_gets_a_big_shm_unless_the_profile_sets_one(cpu_profile, limited):
    assert _option(_argv(_cuda(cpu_profile)), "--shm-size") == [f"{round(GPU_SHM_GB * 1024)}m"]
    assert _option(_argv(_cuda(limited)), "--shm-size") == ["2048m"]


def test_shipped_gpu_profile_passes_devices_and_shm():
    argv = _argv(load_profile("2xA10"), LaunchPlan(argv=["python"], devices=2))
    assert _option(argv, "--gpus") == ['"device=0,1"']
    assert _option(argv, "--shm-size") and "--network" in argv


def test_gpu_request_is_pure():
    assert gpu_request(2, {}) == ('"device=0,1"', {"CUDA_VISIBLE_DEVICES": "0,1"})
    uuid = "GPU-8f6c1d2e"
    assert gpu_request(1, {"CUDA_VISIBLE_DEVICES": uuid}) == (f'"device={uuid}"', {"CUDA_VISIBLE_DEVICES": "0"})


def test_mounts_keep_host_paths_and_only_the_run_dir_is_writable(limited):
    mounts = _option(_argv(limited), "--mount")
    assert f"type=bind,source={ROOT},target={ROOT},readonly" in mounts
    assert f"type=bind,source={RUN_DIR},target={RUN_DIR}" in mounts
    assert f"type=bind,source={ROOT / 'build' / 'assets'},target={ROOT / 'build' / 'assets'},readonly" in mounts
    assert [m for m in mounts if not m.endswith(",readonly")] == [f"type=bind,source={RUN_DIR},target={RUN_DIR}"]


def test_a_writable_path_wins_over_the_same_readonly_one(limited):
    spec = container_spec("img", limited, ROOT, writable=[ROOT], readonly=[ROOT])
    assert spec.mounts == (Mount(ROOT, read_only=False),)


def test_workdir_pythonpath_env_labels_and_command(limited):
    launch = LaunchPlan(argv=["torchrun", "--standalone", "-m", "bench.worker", "s.json"], env={"OMP_NUM_THREADS": "1"})
    argv = _argv(limited, launch)
    assert _option(argv, "--workdir") == [str(ROOT)]
    env = _option(argv, "--env")
    assert f"PYTHONPATH={ROOT}" in env and "OMP_NUM_THREADS=1" in env and any(e.startswith("HOME=") for e in env)
    assert sorted(_option(argv, "--label")) == sorted(f"{k}={v}" for k, v in LABELS.items())
    assert argv[-len(launch.argv) - 1 :] == ["dpo-bench/cpu:abc", *launch.argv]
    assert "--rm" not in argv  # the executor inspects the exit state (OOMKilled) before removing it


def test_container_names_are_unique_and_valid():
    names = {container_name(LABELS) for _ in range(50)}
    assert len(names) == 50
    import re

    assert all(re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", n) for n in names)
    assert all("+" not in n for n in names)


def test_image_tag_changes_with_the_lock_and_the_dockerfile():
    base = images.tag_for("cpu", b"torch==2.13.0\n", b"FROM x\n")
    assert base.startswith("dpo-bench/cpu:") and len(base.split(":")[1]) == 12
    assert images.tag_for("cpu", b"torch==2.13.1\n", b"FROM x\n") != base
    assert images.tag_for("cpu", b"torch==2.13.0\n", b"FROM y\n") != base
    assert images.tag_for("cpu", b"torch==2.13.0\n", b"FROM x\n") == base


def test_image_tag_of_a_checkout_follows_its_lock_file(tmp_path):
    folder = tmp_path / "docker" / "cpu"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text("FROM x\n")
    (folder / "requirements.lock").write_text("torch==1\n")
    first = images.image_tag("cpu", tmp_path)
    (folder / "requirements.lock").write_text("torch==2\n")
    assert images.image_tag("cpu", tmp_path) != first


def test_shipped_flavors_have_a_lock_and_a_dockerfile():
    for flavor in images.FLAVORS:
        assert images.image_tag(flavor).startswith(f"dpo-bench/{flavor}:")


def test_build_argv_passes_the_offline_base_and_build_args():
    argv = images.build_argv("cpu", "dpo-bench/cpu:abc", "dpo-bench/base:bookworm", {"PIP_EXTRA_INDEX_URL": "u"})
    assert _option(argv, "--build-arg") == ["BASE_IMAGE=dpo-bench/base:bookworm", "PIP_EXTRA_INDEX_URL=u"]
    assert _option(argv, "-f") == ["docker/cpu/Dockerfile"] and argv[-1] == "."
    assert "--build-arg" not in images.build_argv("cpu", "t", None, {})


def test_parse_state_reads_oom_killed():
    inspected = json.dumps([{"State": {"ExitCode": 137, "OOMKilled": True}}])
    state = parse_state(inspected)
    assert state.exit_code == 137 and state.oom_killed
    assert parse_state("not json").exit_code is None


def test_oom_killed_container_is_recorded_as_oom():
    cell = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.SINGLE, launcher=Launcher.PYTHON)
    state = parse_state(json.dumps([{"State": {"ExitCode": 137, "OOMKilled": True}}]))
    outcome = Outcome(exit_code=state.exit_code, timed_out=False, wall_s=3.0, log_tail="Killed", oom_killed=True)
    record = finished_record(
        RunFacts("r", "cpu", "tiny", "docker"),
        cell,
        Expectation(world_size=1, warmup_steps=1, steps=4, pairs_per_step=1),
        Execution(outcome, [], [], "t0", "t1"),
    )
    assert record.status == Status.OOM


def test_shipped_cpu_profile_sets_container_limits():
    profile = load_profile("cpu")
    assert profile.container_cpus and profile.container_memory_gb and profile.shm_size_gb


def test_stage_build_inputs_copies_certs_and_wheels(tmp_path):
    certs, wheels, root = tmp_path / "certs", tmp_path / "wheels", tmp_path / "root"
    certs.mkdir()
    wheels.mkdir()
    (certs / "corp.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (wheels / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    (wheels / "other-1.0-py3-none-any.whl").write_bytes(b"x")
    copied = images.stage_build_inputs(str(certs), wheels, root)
    assert sorted(copied) == ["corp.crt", "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"]
    assert (root / "docker" / "certs" / "corp.crt").is_file()
    assert images.stage_build_inputs(str(certs), wheels, root) == []  # already there


def test_container_spec_is_frozen(limited):
    spec = container_spec("img", limited, ROOT, writable=[], readonly=[])
    assert isinstance(spec, ContainerSpec)
    with pytest.raises(AttributeError):
        spec.image = "other"  # type: ignore[misc]


def test_the_prebuild_builds_each_host_op_the_accelerator_hands_out(monkeypatch, capsys):
    """docker/cpu/prebuild_deepspeed_ops.py (make setup, both images): on the cuda accelerator only
    DeepSpeedCPUAdam exists (DeepSpeed gives CUDA no shared-memory comm op); on CPU both are built."""
    import runpy
    import sys
    import types

    from bench.paths import PROJECT_ROOT

    loaded: list[str] = []

    def accelerator(name: str, ops: set[str]) -> types.SimpleNamespace:
        def create(op: str) -> object | None:
            return types.SimpleNamespace(load=lambda: loaded.append(op)) if op in ops else None

        return types.SimpleNamespace(create_op_builder=create, device_name=lambda: name)

    script = str(PROJECT_ROOT / "docker" / "cpu" / "prebuild_deepspeed_ops.py")
    for name, ops in (("cuda", {"CPUAdamBuilder"}), ("cpu", {"CPUAdamBuilder", "ShareMemCommBuilder"})):
        fake = types.ModuleType("deepspeed.accelerator")
        fake.get_accelerator = lambda name=name, ops=ops: accelerator(name, ops)
        monkeypatch.setitem(sys.modules, "deepspeed.accelerator", fake)
        loaded.clear()
        runpy.run_path(script)
        assert sorted(loaded) == sorted(ops), name
    assert "ShareMemCommBuilder: not used on cuda" in capsys.readouterr().out
