"""Real containers: a representative set of cells gives the same statuses in the pinned image as in the local
venv, a cell is reproducible in the same image, and timeouts/OOM kills leave no container behind.

Slow and needs a docker engine plus the cpu image, so it carries the `docker` marker: `make test` deselects it
and `make test-docker` (called by .ci/docker.sh after it starts dockerd and builds the image) runs it.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.executors import docker_images as images
from bench.paths import PROJECT_ROOT, SCENARIOS_DIR
from bench.results.store import load_results

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# Every init mode, every backend runnable on CPU (fsdp is a known silent fallback there), every launcher
# (mpirun included), int8 and nf4, and a multi-rank precompute_ref cell (writes datasets cache files).
CELLS = [
    "two_models-none-single",
    "one_adapter-none-ddp",
    "two_adapters-none-fsdp",
    "one_adapter-int8-zero2",
    "two_models-none-zero3",
    # needs DeepSpeedCPUAdam, prebuilt in the image (docker/cpu/prebuild_deepspeed_ops.py)
    "one_adapter-none-zero3_offload",
    "two_adapters-nf4-single",
    "one_adapter-none-ddp+mpirun",
    "one_adapter-none-ddp+precompute_ref",
]
REPEATED = "two_models-none-single"


def bench_run(results: Path, executor: str, cells: list[str], scenarios: Path = SCENARIOS_DIR) -> Path:
    argv = [sys.executable, "-m", "bench", "--scenarios", str(scenarios), "--results", str(results)]
    argv += ["run", "--hw", "cpu", "--filter", ",".join(cells), "--executor", executor]
    done = subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = (results / "cpu").iterdir()
    return run_dir


def records(run_dir: Path) -> dict:
    return load_results(run_dir).latest_by_cell()


def leftovers(run_dir: Path) -> list[str]:
    done = subprocess.run(
        [images.DOCKER, "ps", "-a", "--filter", f"label=dpo-bench.run={run_dir.name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


@pytest.fixture(scope="module")
def docker_run(image, tmp_path_factory) -> Path:
    return bench_run(tmp_path_factory.mktemp("docker"), "docker", CELLS)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    return bench_run(tmp_path_factory.mktemp("local"), "local", CELLS)


def test_docker_statuses_equal_local_statuses(docker_run, local_run):
    in_docker, local = records(docker_run), records(local_run)
    assert sorted(in_docker) == sorted(local) == sorted(CELLS)
    print(f"\n{'cell':<40} {'docker':<16} {'local':<16} {'docker s':>9} {'local s':>8} {'overhead s':>10}")
    for cell in CELLS:
        d, loc = in_docker[cell], local[cell]
        print(
            f"{cell:<40} {d.status:<16} {loc.status:<16} {d.wall_s:>9.1f} {loc.wall_s:>8.1f} "
            f"{d.wall_s - loc.wall_s:>10.1f}"
        )
    differing = [c for c in CELLS if in_docker[c].status != local[c].status]
    assert not differing, "\n\n".join(
        f"{c}: docker {in_docker[c].status} / local {local[c].status}\n"
        f"docker: {in_docker[c].error_class} {in_docker[c].message}\n{in_docker[c].log_tail[-2000:]}\n"
        f"local: {local[c].error_class} {local[c].message}\n{local[c].log_tail[-2000:]}"
        for c in differing
    )
    assert all(r.executor == "docker" for r in in_docker.values())
    assert all(r.executor == "local" and r.image is None for r in local.values())


def test_docker_run_records_the_image_and_leaves_nothing_behind(docker_run, image):
    env = json.loads((docker_run / "env.json").read_text())
    assert env["executor"] == "docker" and env["image"] == image
    assert env["image_tag"] == images.image_tag("cpu") and env["packages"]["torch"]
    assert all(r.image == image for r in records(docker_run).values())
    assert leftovers(docker_run) == []
    owner = (docker_run / "results.jsonl").stat().st_uid
    assert owner == os.getuid()
    assert all(p.stat().st_uid == os.getuid() for p in (docker_run / "cells").rglob("*"))


def test_same_cell_twice_in_the_same_image_is_reproducible(docker_run, image, tmp_path):
    first = records(docker_run)[REPEATED]
    second = records(bench_run(tmp_path, "docker", [REPEATED]))[REPEATED]
    assert second.status == first.status == "ok"
    assert second.image == first.image == image
    assert first.metrics and second.metrics
    assert second.metrics.tokens_total == first.metrics.tokens_total
    a, b = first.metrics.tokens_per_s, second.metrics.tokens_per_s
    print(f"\n{REPEATED} twice in {image[:19]}: {a:,.0f} vs {b:,.0f} tok/s, spread {abs(a - b) / max(a, b):.1%}")


def _profile_copy(tmp_path: Path, **fields: object) -> Path:
    scenarios = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, scenarios)
    profile = scenarios / "hardware" / "cpu.yaml"
    lines = [ln for ln in profile.read_text().splitlines() if ln.split(":")[0] not in fields]
    profile.write_text("\n".join([*lines, *(f"{k}: {v}" for k, v in fields.items())]) + "\n")
    return scenarios


def test_timeout_kills_and_removes_the_container(image, tmp_path):
    scenarios = _profile_copy(tmp_path, timeout_s=10)
    run_dir = bench_run(tmp_path / "results", "docker", ["two_models-none-zero3"], scenarios)
    record = records(run_dir)["two_models-none-zero3"]
    assert record.status == "timeout" and record.wall_s < 40
    assert leftovers(run_dir) == []


def test_memory_limit_is_recorded_as_oom(image, tmp_path):
    scenarios = _profile_copy(tmp_path, container_memory_gb=0.15)
    run_dir = bench_run(tmp_path / "results", "docker", ["two_models-none-single"], scenarios)
    record = records(run_dir)["two_models-none-single"]
    assert record.status == "oom", record.message
    assert leftovers(run_dir) == []


def test_ctrl_c_kills_and_removes_the_running_container(image, tmp_path):
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu"]
    argv += ["--filter", "two_models-none-zero3", "--executor", "docker"]
    process = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        run_dir = None
        while time.monotonic() < deadline and run_dir is None:
            runs = list((tmp_path / "cpu").glob("*")) if (tmp_path / "cpu").is_dir() else []
            run_dir = runs[0] if runs and leftovers(runs[0]) else None
            time.sleep(0.5)
        assert run_dir is not None, "no container started"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
    assert leftovers(run_dir) == []
    assert records(run_dir) == {}  # the interrupted cell is not recorded


CUDA_CELL = "one_adapter-none-single"


@pytest.fixture(scope="module")
def cuda_image() -> str:
    tag = images.image_tag("cuda")
    image_id = images.image_id(tag)
    if image_id is None:
        pytest.fail(f"{tag} is not built: make check-cuda-image builds it and runs this test")
    return image_id


@pytest.mark.cuda_image
def test_cpu_cell_in_the_cuda_image_matches_the_cpu_image(image, cuda_image, tmp_path):
    """The CUDA build of torch trains on CPU: a CPU cell in the cuda image gives what it gives in the cpu image."""
    on_cpu = records(bench_run(tmp_path / "cpu", "docker", [CUDA_CELL]))[CUDA_CELL]
    scenarios = _profile_copy(tmp_path, image_flavor="cuda")
    on_cuda = records(bench_run(tmp_path / "cuda", "docker", [CUDA_CELL], scenarios))[CUDA_CELL]
    header = f"{'status':<8} {'tokens':>7} {'tok/s':>7} {'wall s':>7} {'first loss':>11} {'last loss':>10}"
    print(f"\n{CUDA_CELL:<24} {header}")
    for name, record in (("cpu image", on_cpu), ("cuda image", on_cuda)):
        assert record.metrics and record.learning, f"{name}: {record.status} {record.message}"
        print(
            f"{name:<24} {record.status:<8} {record.metrics.tokens_total:>7} {record.metrics.tokens_per_s:>7.0f} "
            f"{record.wall_s:>7.1f} {record.learning.first_loss!s:>11.8} {record.learning.last_loss!s:>10.8}"
        )
    assert on_cpu.image == image and on_cuda.image == cuda_image
    assert on_cuda.status == on_cpu.status == "ok", on_cuda.log_tail[-2000:]
    assert on_cuda.metrics.tokens_total == on_cpu.metrics.tokens_total
