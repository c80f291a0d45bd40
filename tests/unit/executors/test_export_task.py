"""export-task --to skypilot: the task file's accelerators, pinned image, nodes, run command and results path."""

import subprocess
import sys

import pytest
import yaml

from bench.errors import BenchError
from bench.executors import docker_images as images
from bench.executors.skypilot import RESULTS_MOUNT, SkyTask, accelerators, skypilot_task
from bench.matrix.profiles import load_profile
from bench.paths import PROJECT_ROOT


def export(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bench", "export-task", "--to", "skypilot", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(PROJECT_ROOT)})


def test_the_2xa10_task_file_runs_the_suite_in_the_pinned_image(tmp_path):
    done = export(tmp_path, "--hw", "2xA10")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "dpo-bench-2xA10.sky.yaml"
    assert done.stdout.splitlines() == [
        f"wrote {path.name}",
        f"  sky launch -c dpo-bench {path.name}",
        "  rsync -Pavz dpo-bench:~/sky_workdir/results/2xA10/ results/2xA10/",
    ]
    task = SkyTask.model_validate(yaml.safe_load(path.read_text()))
    assert task.resources.accelerators == "A10:2" and task.num_nodes == 1
    assert task.resources.image_id == f"docker:{images.image_tag('cuda')}"
    assert task.workdir == "." and task.envs == {"RUN_ID": "sky", "HW": "2xA10"}
    assert (
        task.run.splitlines()[0] == "python -m bench --results results run --hw 2xA10 --executor local --run-id $RUN_ID"
    )
    assert task.file_mounts == {}
    assert path.read_text().startswith("# dpo-bench on 2xA10 through SkyPilot")
    assert "run: |\n  python -m bench" in path.read_text()


def test_a_bucket_gets_the_results_through_a_mount():
    task = skypilot_task(load_profile("1xH100"), "reg.example/dpo-bench/cuda:abc", "r1", "s3://team-bench")
    assert task.file_mounts[RESULTS_MOUNT].source == "s3://team-bench"
    assert task.file_mounts[RESULTS_MOUNT].mode == "MOUNT"
    assert f"--results {RESULTS_MOUNT} run --hw 1xH100" in task.run
    assert task.resources.image_id == "docker:reg.example/dpo-bench/cuda:abc"


@pytest.mark.parametrize(("hw", "wanted"), [("1xL4", "L4:1"), ("2x4090", "RTX4090:2"), ("8xA100-80G", "A100-80GB:8")])
def test_accelerator_names_are_skypilots(hw, wanted):
    assert accelerators(load_profile(hw)) == wanted


def test_what_cannot_be_exported_is_one_line(tmp_path):
    with pytest.raises(BenchError, match="spans 2 nodes"):
        skypilot_task(load_profile("2x8xA100-80G"), "img", "r")
    with pytest.raises(BenchError, match="no SkyPilot accelerator for hpu"):
        skypilot_task(load_profile("8xGaudi2"), "img", "r")
    with pytest.raises(BenchError, match="--bucket"):
        skypilot_task(load_profile("2xA10"), "img", "r", "/tmp/x; rm -rf /")
    done = export(tmp_path, "--hw", "2xA10", "--run-id", "../x")
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "--run-id" in done.stderr
