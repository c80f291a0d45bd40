"""Docker containers inside Slurm jobs, on the real local cluster (bench/executors/slurm/setup-single-node.sh) and
docker engine.

dockerd, not slurmstepd, starts a container, so without help it escapes the job: the flags the slurm executor
generates (bench/executors/slurm/containers.py) put it under the job's cgroup, which holds it to `--mem`, and the
Epilog the setup script installs (bench/executors/slurm/epilog-docker.sh) removes it when the job is cancelled.
Runs in `make test-docker` (the offline base image is the container; `make images OFFLINE_BASE=1` builds it).
"""

import shlex
import subprocess
import time
from pathlib import Path

import pytest

from bench.executors.docker_images import OFFLINE_BASE_TAG, image_id
from bench.executors.slurm.containers import DOCKER_CGROUP_PARENT, DOCKER_LABEL
from bench.executors.slurm.jobs import Accounting, controller_states
from bench.paths import PROJECT_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.docker]

DOCKER = "/usr/bin/docker"
SETUP = PROJECT_ROOT / "bench" / "executors" / "slurm" / "setup-single-node.sh"
# 500 MB held in one shell variable: well over the 200 MB the job may use.
ALLOCATE = 'x=$(head -c 500000000 /dev/zero | tr "\\0" a); echo allocated ${#x}'


@pytest.fixture(scope="module", autouse=True)
def cluster_and_image():
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert image_id(OFFLINE_BASE_TAG), f"{OFFLINE_BASE_TAG} is not built: make images FLAVOR=cpu OFFLINE_BASE=1"


def docker_run(command: str, held: bool) -> str:
    """The `docker run` a job's task runs; `held`: with the executor's cgroup parent (else a plain one)."""
    parent = f"--cgroup-parent={DOCKER_CGROUP_PARENT} " if held else ""
    label = f"--label={DOCKER_LABEL}=$SLURM_JOB_ID"
    return f"{DOCKER} run --rm {parent}{label} {OFFLINE_BASE_TAG} sh -c {shlex.quote(command)}"


def submit(tmp_path: Path, script: str, *options: str) -> str:
    path = tmp_path / f"job-{time.monotonic_ns()}.sh"
    path.write_text(f"#!/bin/bash\n{script}\n")
    done = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", *options, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def wait_finished(job_id: str, timeout_s: float = 120):
    accounting = Accounting()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = controller_states().get(job_id)
        if state is not None and not state.alive:
            return state
        if state is None:
            finished = accounting.finished(job_id)
            if finished is not None:
                return finished
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end within {timeout_s} s")


def containers(job_id: str) -> list[str]:
    out = subprocess.run(
        [DOCKER, "ps", "-aq", "--filter", f"label={DOCKER_LABEL}={job_id}"], capture_output=True, text=True
    ).stdout
    return out.split()


def test_the_cgroup_parent_holds_the_container_to_the_jobs_mem(tmp_path):
    held = submit(tmp_path, docker_run(ALLOCATE, held=True), "--mem=200M")
    loose = submit(tmp_path, docker_run(ALLOCATE, held=False), "--mem=200M")
    held_state, loose_state = wait_finished(held), wait_finished(loose)
    held_out = (tmp_path / f"slurm-{held}.out").read_text()
    loose_out = (tmp_path / f"slurm-{loose}.out").read_text()
    print(
        f"\nheld: {held_state.state} exit {held_state.exit_code}; without the parent: {loose_state.state} {loose_out!r}"
    )
    # Under the job's memory cgroup the kernel kills the container at the job's 200 MB (exit 137) ...
    assert held_state.state in ("FAILED", "OUT_OF_MEMORY") and held_state.exit_code == 137, held_out
    assert "allocated" not in held_out
    # ... which a container started without it escapes: the reason the executor passes --cgroup-parent.
    assert loose_state.state == "COMPLETED" and "allocated 500000000" in loose_out


def test_scancel_leaves_no_container(tmp_path):
    job = submit(tmp_path, docker_run("sleep 300", held=True))
    deadline = time.monotonic() + 60
    while not containers(job):
        assert time.monotonic() < deadline, f"job {job}: its container never started"
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=True, timeout=30)
    assert wait_finished(job).state == "CANCELLED"
    deadline = time.monotonic() + 30  # the Epilog runs as the job ends
    while containers(job):
        assert time.monotonic() < deadline, f"job {job}: container {containers(job)} outlived scancel"
        time.sleep(0.5)
