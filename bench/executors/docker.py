"""Docker executor: one container per cell, from the flavor's pinned image.

The checkout is bind-mounted read-only at the SAME absolute path inside the container, the run dir
read-write, the prepared assets read-only, and the container starts in the project root with
PYTHONPATH set to it: every absolute path in a launch plan and worker spec stays valid as it is.
Multi-rank cells run their launcher (torchrun, accelerate, deepspeed, mpirun) inside that one container.
The container runs as the invoking user (results stay theirs), without network, with CPU/memory/shm
limits from the hardware profile, and never privileged. On timeout or Ctrl-C it is killed and removed.
A cuda cell gets exactly its devices (`--gpus "device=<host ids>"`, as many as its launch plan says), renumbered
0..n-1 inside the container.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.executors.base import RUN_DIR_LABEL, LaunchPlan, Outcome
from bench.executors.docker_images import DOCKER
from bench.executors.local import read_tail
from bench.matrix.profiles import HardwareProfile

PYTHON_IN_IMAGE = "/opt/venv/bin/python"
HOME_IN_IMAGE = "/tmp/home"
HOSTNAME = "dpo-bench-cell"
DOCKER_CLI_TIMEOUT_S = 60.0
NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
GPU_SHM_GB = 8.0
"""/dev/shm of a GPU cell whose profile sets no shm_size_gb: docker's 64 MiB default is too small for NCCL's
shared-memory transport between ranks and for torch's worker processes. A tmpfs size is a cap: pages count
(against --memory too) only when written."""


@dataclass(frozen=True)
class Mount:
    path: Path
    read_only: bool = True

    def arg(self) -> str:
        spec = f"type=bind,source={self.path},target={self.path}"
        return spec + ",readonly" if self.read_only else spec


@dataclass(frozen=True)
class ContainerSpec:
    """Everything `docker run` needs that does not change from cell to cell."""

    image: str
    project_root: Path
    mounts: tuple[Mount, ...]
    cpus: float | None = None
    memory_gb: float | None = None
    shm_size_gb: float | None = None
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)


def container_spec(
    image: str, profile: HardwareProfile, project_root: Path, writable: list[Path], readonly: list[Path]
) -> ContainerSpec:
    """Pure: the container settings for `profile`; nested mounts are fine (docker mounts parents first)."""
    cuda = profile.device == "cuda"
    mounts: dict[Path, Mount] = {project_root: Mount(project_root)}
    for path in readonly:
        mounts.setdefault(path, Mount(path))
    for path in writable:
        mounts[path] = Mount(path, read_only=False)
    return ContainerSpec(
        image=image,
        project_root=project_root,
        mounts=tuple(mounts[p] for p in sorted(mounts)),
        cpus=profile.container_cpus,
        memory_gb=profile.container_memory_gb,
        shm_size_gb=profile.shm_size_gb or (GPU_SHM_GB if cuda else None),
    )


def container_name(labels: dict[str, str]) -> str:
    """Unique per cell run: readable run/cell part + a random suffix."""
    readable = "-".join(labels[k] for k in ("dpo-bench.run", "dpo-bench.cell") if k in labels)
    safe = NAME_UNSAFE.sub("_", readable)[:100].strip("_.-")
    return f"dpo-bench-{safe}-{uuid.uuid4().hex[:8]}" if safe else f"dpo-bench-{uuid.uuid4().hex[:12]}"


def gpu_request(count: int, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Pure: the `--gpus` value for a cell's `count` GPUs and the CUDA_VISIBLE_DEVICES it sees inside.
    The host ids are the first `count` of the launch environment's CUDA_VISIBLE_DEVICES (the cell's own devices,
    bench/run/launch.py), else 0..count-1. Inside the container the NVIDIA runtime numbers the granted devices from
    0, so the host ids would name the wrong (or no) devices."""
    given = [d.strip() for d in env.get(VISIBLE_ENV, "").split(",") if d.strip()]
    host = given[:count] if given else [str(i) for i in range(count)]
    # docker parses the value as CSV: the quotes keep "device=0,1" one field
    return f'"device={",".join(host)}"', {VISIBLE_ENV: ",".join(str(i) for i in range(len(host)))}


def _gigabytes(value: float) -> str:
    return f"{round(value * 1024)}m"


def docker_run_argv(spec: ContainerSpec, launch: LaunchPlan, name: str, labels: dict[str, str]) -> list[str]:
    """Pure: the `docker run` command line for one cell."""
    root = str(spec.project_root)
    argv = [DOCKER, "run", "--name", name, "--init", "--network", "none"]
    # Without a network the hostname resolves nowhere; rendezvous code (torchrun, gloo) looks it up.
    argv += ["--hostname", HOSTNAME, "--add-host", f"{HOSTNAME}:127.0.0.1"]
    argv += ["--user", f"{spec.uid}:{spec.gid}", "--security-opt", "no-new-privileges"]
    argv += ["--workdir", root]
    if spec.cpus:
        argv += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory_gb:
        # same value for swap: over the limit the kernel OOM-kills (exit 137, State.OOMKilled) instead of swapping
        argv += ["--memory", _gigabytes(spec.memory_gb), "--memory-swap", _gigabytes(spec.memory_gb)]
    if spec.shm_size_gb:
        argv += ["--shm-size", _gigabytes(spec.shm_size_gb)]
    visible: dict[str, str] = {}
    if launch.devices:
        request, visible = gpu_request(launch.devices, launch.env)
        argv += ["--gpus", request]
    for mount in spec.mounts:
        argv += ["--mount", mount.arg()]
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    env = {"HOME": HOME_IN_IMAGE, "PYTHONPATH": root} | launch.env | visible
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    return [*argv, spec.image, *launch.argv]


@dataclass(frozen=True)
class ContainerState:
    exit_code: int | None
    oom_killed: bool


def parse_state(inspect_json: str) -> ContainerState:
    """Pure: exit code and OOM flag from `docker inspect <container>` output."""
    try:
        data = json.loads(inspect_json)
        state = (data[0] if isinstance(data, list) else data)["State"]
        return ContainerState(exit_code=int(state["ExitCode"]), oom_killed=bool(state.get("OOMKilled")))
    except (ValueError, KeyError, IndexError, TypeError):
        return ContainerState(exit_code=None, oom_killed=False)


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=DOCKER_CLI_TIMEOUT_S, check=False)


def remove_container(name: str) -> None:
    """Kill and remove; safe to call when the container is already gone."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _docker("kill", name)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _docker("rm", "-f", name)


LIST_TIMEOUT_S = 15.0


def labelled_containers() -> dict[Path, list[str]]:
    """Run folder -> the names of its containers, running or not; {} where no docker engine answers."""
    if shutil.which(DOCKER) is None:
        return {}
    fmt = '{{.Names}}\t{{.Label "' + RUN_DIR_LABEL + '"}}'
    try:
        done = subprocess.run(
            [DOCKER, "ps", "-a", "--filter", f"label={RUN_DIR_LABEL}", "--format", fmt],
            capture_output=True,
            text=True,
            timeout=LIST_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[Path, list[str]] = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        name, _, run_dir = line.partition("\t")
        if name and run_dir:
            found.setdefault(Path(run_dir), []).append(name)
    return found


class DockerExecutor:
    """Cells run in containers of one pinned image."""

    name = "docker"
    concurrent = False
    memory_budget_bytes = None

    def __init__(self, spec: ContainerSpec, image_id: str, python: str = PYTHON_IN_IMAGE) -> None:
        self.spec = spec
        self.image = image_id
        self.python = python

    def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        name = container_name(labels)
        argv = docker_run_argv(self.spec, launch, name, labels)
        started = time.monotonic()
        with log_path.open("wb") as log:
            # Own session: a Ctrl-C reaches us only, and we remove the container ourselves.
            process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
            timed_out = False
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(process, name)
            except BaseException:
                _stop(process, name)
                remove_container(name)
                raise
        wall = time.monotonic() - started
        state = ContainerState(exit_code=process.returncode, oom_killed=False)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            inspected = _docker("inspect", name)
            if inspected.returncode == 0:
                state = parse_state(inspected.stdout)
        remove_container(name)
        exit_code = state.exit_code if state.exit_code is not None else process.returncode
        return Outcome(
            exit_code=exit_code,
            timed_out=timed_out,
            wall_s=wall,
            log_tail=read_tail(log_path),
            oom_killed=state.oom_killed and not timed_out,
            image=self.image,
        )


def _stop(process: subprocess.Popen, name: str) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _docker("kill", name)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
