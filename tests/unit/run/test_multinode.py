"""Multi-node launch plans for the 2 x 8 A100 profile: the exact command each node runs, and the job's shape.

(The same plans run for real on two slurmd nodes in tests/integration/test_slurm.py, 2 nodes x 1 CPU rank.)
"""

import shlex
import subprocess
from pathlib import Path

import pytest

from bench.assets.prepare import PreparedAssets
from bench.launchers import job_launch, node_argv
from bench.launchers.job import NodeLayout, quote
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.run.launch import plan_launch
from bench.worker.spec import WorkerSpec

PY = "/venv/bin/python"


def launch_for(tmp_path: Path, backend: str, launcher: str):
    profile = load_profile("2x8xA100-80G")
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher=launcher)
    spec = WorkerSpec.from_plan(
        plan_for(cell, profile, load_workload("tiny")),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        str(tmp_path / "out"),
    )
    return profile, plan_launch(spec, tmp_path, port=29555, python=PY)


def test_the_two_node_profile_is_sixteen_ranks_eight_per_node():
    profile = load_profile("2x8xA100-80G")
    assert (profile.nodes, profile.processes, profile.processes_per_node, profile.device_count) == (2, 16, 8, 8)


def test_processes_must_fill_the_nodes():
    with pytest.raises(ValueError, match="multiple of nodes"):
        load_profile("cpu").model_validate(load_profile("cpu").model_dump() | {"nodes": 3})


def test_torchrun_rendezvous_is_c10d_on_the_head_node(tmp_path):
    _, launch = launch_for(tmp_path, "ddp", "torchrun")
    job = job_launch(launch.launcher, launch.inputs, launch.argv[0], NodeLayout(2, 8, 8))
    spec = str(tmp_path / "spec.json")
    assert job.node_argv == [
        "torchrun",  # not beside /venv/bin/python: found on PATH
        "--nnodes=2",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT",
        "--rdzv_id=$SLURM_JOB_ID",
        "-m",
        "bench.worker",
        spec,
    ]
    assert job.srun == ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64", "--kill-on-bad-exit=1"]
    assert (job.tasks_per_node, job.cpus_per_task) == (1, 64)


def test_accelerate_gets_machines_rank_and_head_address(tmp_path):
    _, launch = launch_for(tmp_path, "fsdp", "accelerate")
    argv = node_argv(launch.launcher, launch.inputs, "accelerate", NodeLayout(2, 8))
    assert argv == [
        "accelerate",
        "launch",
        "--config_file",
        str(tmp_path / "accelerate.yaml"),
        "--num_machines=2",
        "--num_processes=16",
        "--machine_rank=$SLURM_NODEID",
        "--main_process_ip=$MASTER_ADDR",
        "--main_process_port=$MASTER_PORT",
        "--deepspeed_multinode_launcher=standard",
        "-m",
        "bench.worker",
        str(tmp_path / "spec.json"),
    ]


def test_deepspeed_reads_the_job_hostfile_and_starts_without_ssh(tmp_path):
    _, launch = launch_for(tmp_path, "zero3", "deepspeed")
    argv = node_argv(launch.launcher, launch.inputs, "deepspeed", NodeLayout(2, 8))
    assert argv == [
        "deepspeed",
        "--hostfile=$BENCH_HOSTFILE",
        "--no_ssh",
        "--node_rank=$SLURM_NODEID",
        "--master_addr=$MASTER_ADDR",
        "--master_port=$MASTER_PORT",
        "--num_nodes=2",
        "--num_gpus=8",
        "--no_local_rank",
        "--module",
        "bench.worker",
        str(tmp_path / "spec.json"),
    ]


def test_mpirun_runs_once_over_the_allocation_eight_ranks_per_node(tmp_path):
    _, launch = launch_for(tmp_path, "ddp", "mpirun")
    job = job_launch(launch.launcher, launch.inputs, "mpirun", NodeLayout(2, 8, 8))
    assert job.srun == [] and (job.tasks_per_node, job.cpus_per_task) == (8, 8)
    assert job.node_argv == [
        "mpirun",
        "-np",
        "16",
        "--map-by",
        "ppr:8:node",
        "--oversubscribe",
        "-x",
        "MASTER_ADDR",
        "-x",
        "MASTER_PORT",
        PY,
        "-m",
        "bench.worker",
        str(tmp_path / "spec.json"),
    ]


def test_a_single_process_is_one_srun_task(tmp_path):
    _, launch = launch_for(tmp_path, "single", "python")
    job = job_launch(launch.launcher, launch.inputs, PY, NodeLayout(1, 1, 8))
    assert job.script_line() == (
        f"srun --nodes=1 --ntasks=1 --cpus-per-task=8 bash -c 'exec {PY} -m bench.worker {tmp_path}/spec.json'"
    )
    with pytest.raises(ValueError, match="one process"):
        job_launch(launch.launcher, launch.inputs, PY, NodeLayout(2, 1))


def test_job_variables_expand_in_each_task_not_in_the_batch_script(tmp_path):
    """The node rank differs per task: bash -c gets it single-quoted, so each task's shell expands it."""
    _, launch = launch_for(tmp_path, "fsdp", "accelerate")
    line = job_launch(launch.launcher, launch.inputs, "echo", NodeLayout(2, 8)).script_line()
    inner = shlex.split(line)[-1]
    assert inner.startswith("exec echo launch") and '"--machine_rank=$SLURM_NODEID"' in inner
    env = {"SLURM_NODEID": "1", "MASTER_ADDR": "head", "MASTER_PORT": "20001", "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(["bash", "-c", inner], capture_output=True, text=True, env=env, check=True).stdout
    assert "--machine_rank=1 --main_process_ip=head --main_process_port=20001" in shown


def test_quote_leaves_variables_to_expand_and_escapes_the_rest():
    assert quote("--x=$MASTER_ADDR") == '"--x=$MASTER_ADDR"'
    assert quote('a"b$C`d') == '"a\\"b$C\\`d"'
    assert quote("it's") == "'it'\"'\"'s'"
