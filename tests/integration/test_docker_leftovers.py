"""A runner SIGKILLed while a cell trains in its container: the container outlives it (dockerd, not the runner,
runs it), and the next run of the profile removes it, labelled with the dead run's folder, in one line.

Needs a docker engine and the cpu image (`make images FLAVOR=cpu`): the `docker` marker, run by `make test-docker`.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.executors import docker_images as images
from bench.executors.base import RUN_DIR_LABEL
from bench.paths import PROJECT_ROOT
from tests.integration.test_faults import leftovers, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.docker]

CELL = "one_adapter-none-single"


def containers(run_dir: Path, running: bool = False) -> list[str]:
    argv = [images.DOCKER, "ps", "-a", "--filter", f"label={RUN_DIR_LABEL}={run_dir.resolve()}"]
    argv += ["--filter", "status=running"] if running else []
    done = subprocess.run([*argv, "--format", "{{.Names}}"], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_the_next_run_removes_the_container_of_a_runner_killed_mid_cell(tmp_path, image):
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu"]
    run_dir = tmp_path / "cpu" / "dead"
    output = tmp_path / "runner.out"
    with output.open("w") as out:
        runner = subprocess.Popen(
            [*argv, "--executor", "docker", "--filter", CELL, "--run-id", "dead"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
        )
    try:
        wait_until(lambda: containers(run_dir, running=True), f"the container of {CELL}", runner, 300)
        (name,) = containers(run_dir)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        time.sleep(2)
        assert containers(run_dir, running=True) == [name]  # it outlives its runner
        done = subprocess.run(
            [*argv, "--executor", "local", "--filter", "two_models-int8-single", "--run-id", "next"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=PROJECT_ROOT,
        )
    finally:
        if runner.poll() is None:
            runner.kill()
        for left in containers(run_dir):  # a failed test leaves no container behind
            subprocess.run([images.DOCKER, "rm", "-f", left], capture_output=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = f"cleaned up: run dead: runner {runner.pid} ended without cleaning up: removed container(s) {name}\n"
    assert line in done.stdout, done.stdout[-3000:]
    assert containers(run_dir) == []
    deadline = time.monotonic() + 10
    while leftovers(str(run_dir)) and time.monotonic() < deadline:  # the dead runner's docker client ends with it
        time.sleep(0.2)
    assert leftovers(str(run_dir)) == []
