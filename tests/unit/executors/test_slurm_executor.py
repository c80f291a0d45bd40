"""The Slurm executor's pure parts: the job script, options, states from Slurm's own text, statuses, containers.

Jobs themselves run against a real slurmctld/slurmd in tests/integration/test_slurm.py.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.assets.prepare import PreparedAssets
from bench.errors import BenchError
from bench.executors.slurm.containers import SlurmContainer, wrap
from bench.executors.slurm.executor import (
    SlurmOptions,
    job_script,
    load_options,
    render,
    sbatch_options,
    step_oom,
    time_limit_minutes,
)
from bench.executors.slurm.jobs import JobRegistry, JobState, jobcomp_state, parse_fields, state_from_fields
from bench.judge.slurm_states import with_job_state
from bench.launchers import job_launch
from bench.launchers.job import NodeLayout
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.paths import PROJECT_ROOT
from bench.results.schema import ResultRecord
from bench.run.launch import plan_launch
from bench.worker.rank_report import RankReport
from bench.worker.spec import WorkerSpec

TEMPLATE = (PROJECT_ROOT / "bench" / "executors" / "slurm" / "job.sbatch").read_text()
# Lines as this machine's slurmctld wrote them (jobcomp/filetxt, Slurm 22.05.8).
JOBCOMP = (
    "JobId=9 UserId=root(0) GroupId=root(0) Name=dpo-bench:one_adapter-none-zero2 JobState=TIMEOUT Partition=debug "
    "TimeLimit=2 StartTime=2026-11-23T11:07:50 EndTime=2026-11-23T11:09:57 NodeList=vm-n[1-2] NodeCnt=2 ProcCnt=4 "
    "WorkDir=/work/main ReservationName= Tres=cpu=4,mem=16G,node=2,billing=4 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-11-23T11:05:02 EligibleTime=2026-11-23T11:05:02 DerivedExitCode=0:0 ExitCode=0:15 \n"
)


def launch_for(tmp_path: Path, backend: str, launcher: str, hw: str = "cpu"):
    profile = load_profile(hw)
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher=launcher)
    spec = WorkerSpec.from_plan(
        plan_for(cell, profile, load_workload("tiny")),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        str(tmp_path / "out"),
    )
    return profile, plan_launch(spec, tmp_path, port=29555, python="/venv/bin/python")


def script(tmp_path, backend="ddp", launcher="torchrun", options=None, hw="cpu", timeout_s=120.0):
    profile, launch = launch_for(tmp_path, backend, launcher, hw)
    return job_script(
        launch,
        profile,
        options or SlurmOptions(),
        TEMPLATE,
        timeout_s=timeout_s,
        cell_id="c1",
        output=tmp_path / "cells" / "c1" / "slurm-%j.out",
        hostfile=tmp_path / "hostfile",
        workdir=Path("/work/main"),
        mounts=["/work/main", str(tmp_path)],
    )


def test_a_ddp_cell_asks_for_its_nodes_tasks_cpus_time_memory_and_output(tmp_path):
    text = script(tmp_path, options=SlurmOptions(partition="gpu", account="lab", qos="high", sbatch=["--exclusive"]))
    header = [line.removeprefix("#SBATCH ") for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        "--job-name=dpo-bench:c1",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--cpus-per-task=2",
        "--time=2",
        f"--output={tmp_path}/cells/c1/slurm-%j.out",
        "--open-mode=append",
        "--mem=8192M",
        "--partition=gpu",
        "--account=lab",
        "--qos=high",
        "--exclusive",
    ]
    assert "export OMP_NUM_THREADS=1" in text and "export MASTER_PORT=29555" not in text
    assert text.rstrip().splitlines()[-1].startswith("srun --nodes=1 --ntasks-per-node=1 --cpus-per-task=2")
    assert "{{" not in text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_the_two_node_gpu_profile_asks_for_eight_gpus_on_each_of_two_nodes(tmp_path):
    profile, launch = launch_for(tmp_path, "zero3", "deepspeed", "2x8xA100-80G")
    lines = sbatch_options(launch, profile, SlurmOptions(), 3600, "c1", tmp_path / "o")
    assert "--nodes=2" in lines and "--gpus-per-node=8" in lines and "--ntasks-per-node=1" in lines
    assert "--cpus-per-task=64" in lines and "--time=60" in lines and "--mem=921600M" in lines


def test_time_limit_is_the_timeout_rounded_up_to_minutes():
    assert [time_limit_minutes(s) for s in (1, 60, 61, 120, 3600)] == [1, 1, 2, 2, 60]


def test_template_errors_are_one_line():
    with pytest.raises(BenchError, match="must contain"):
        render("#!/bin/bash\necho hi\n", {"launch": "x"})
    with pytest.raises(BenchError, match=r"unknown placeholder.*nodes_wanted"):
        render("{{nodes_wanted}}\n{{launch}}", {"launch": "x"})


def test_options_merge_the_config_file_under_the_cli(tmp_path):
    config = tmp_path / "slurm.yaml"
    config.write_text("partition: cpu\naccount: lab\nsbatch: [--exclusive]\n")
    options = load_options(config, partition="gpu", account=None, qos="low", sbatch=["--constraint=a100"])
    assert (options.partition, options.account, options.qos) == ("gpu", "lab", "low")
    assert options.sbatch == ["--exclusive", "--constraint=a100"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("partition", "gpu\n#SBATCH --x"), ("qos", "a b"), ("sbatch", ["-N 2"]), ("sbatch", ["--x=`id`"])],
)
def test_options_refuse_what_would_inject_into_the_script(field, value):
    with pytest.raises(BenchError, match="slurm options"):
        load_options(None, **{field: value})


def test_unknown_config_keys_are_refused(tmp_path):
    config = tmp_path / "slurm.yaml"
    config.write_text("partitoin: gpu\n")
    with pytest.raises(BenchError, match="partitoin"):
        load_options(config)


def test_states_come_from_slurms_own_lines(tmp_path):
    (tmp_path / "jobcomp.txt").write_text(JOBCOMP.replace("JobId=9 ", "JobId=8 ") + JOBCOMP)
    state = jobcomp_state(tmp_path / "jobcomp.txt", "9")
    assert (state.state, state.exit_code, state.start_time) == ("TIMEOUT", 128 + 15, "2026-11-23T11:07:50")
    assert jobcomp_state(tmp_path / "jobcomp.txt", "90") is None
    running = state_from_fields(parse_fields("JobId=12 JobName=x JobState=RUNNING Reason=None ExitCode=0:0"))
    assert running.alive and running.exit_code == 0
    assert not state_from_fields(parse_fields("JobId=3 JobState=OUT_OF_MEMORY ExitCode=0:125")).alive


def test_the_registry_survives_a_new_process(tmp_path):
    JobRegistry(tmp_path).put("cell-a", "41")
    JobRegistry(tmp_path).put("cell-b", "42")
    assert JobRegistry(tmp_path).job_ids() == ["41", "42"] and JobRegistry(tmp_path).get("cell-a") == "41"
    (tmp_path / JobRegistry.FILE).write_text("{")
    with pytest.raises(BenchError, match="unreadable job registry"):
        JobRegistry(tmp_path)


def test_only_the_live_jobs_writing_into_the_dead_run_are_cancelled(tmp_path, monkeypatch):
    """The registry names jobs 5-8: 5 runs for this run, 6 ended, 7 is someone else's job under a reused id (the
    controller's state was reset), 8 is pending for this run. 5 and 8 are cancelled, then leave the queue."""
    from bench.executors.slurm import jobs

    run = tmp_path / "cpu" / "r"
    run.mkdir(parents=True)
    registry = JobRegistry(run)
    for key, job in (("a", "5"), ("b", "6"), ("c", "7"), ("d", "8")):
        registry.put(key, job)
    out = f"{run.resolve()}/cells/a/slurm-5.out"
    queue = {
        "5": JobState("5", "RUNNING", std_out=out),
        "6": JobState("6", "COMPLETED", std_out=out),
        "7": JobState("7", "RUNNING", std_out="/home/someone/else/slurm-7.out"),
        "8": JobState("8", "PENDING", std_out=f"{run.resolve()}/cells/d/slurm-8.out"),
        "9": JobState("9", "RUNNING", std_out=out),
    }
    cancelled: list[list[str]] = []

    def scancel(job_ids: list[str]) -> None:
        cancelled.append(job_ids)
        for job in job_ids:
            queue.pop(job)

    monkeypatch.setattr(jobs, "controller_states", lambda: dict(queue))
    monkeypatch.setattr(jobs, "cancel", scancel)
    assert jobs.cancel_jobs_of(run, wait_s=5) == (["5", "8"], [])
    assert cancelled == [["5", "8"]] and sorted(queue) == ["6", "7", "9"]
    assert jobs.cancel_jobs_of(tmp_path / "cpu" / "no-registry") == ([], [])


def crashed() -> ResultRecord:
    return ResultRecord(
        run_id="r", cell_id="c", init="one_adapter", quant="none", backend="ddp", launcher="torchrun",
        hardware="cpu", workload="tiny", status="error", error_class="crash", message="rank 0 was killed by SIGKILL",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("state", "status", "error_class"),
    [
        ("TIMEOUT", "timeout", None),
        ("OUT_OF_MEMORY", "oom", None),
        ("NODE_FAIL", "error", "node_fail"),
        ("PREEMPTED", "error", "preempted"),
        ("CANCELLED", "error", "cancelled"),
        ("FAILED", "error", "crash"),
    ],
)
def test_slurm_says_why_a_job_it_ended_failed(state, status, error_class):
    record = with_job_state(crashed(), JobState("77", state, 137), [])
    assert (record.status, record.error_class, record.slurm_job_id, record.slurm_state) == (
        status,
        error_class,
        "77",
        state,
    )
    if state != "FAILED":
        assert "job 77" in record.message


def test_the_workers_own_report_wins_over_the_job_state():
    report = RankReport.model_validate({"rank": 0, "pid": 1, "hostname": "n1", "error": "MemoryError: out of memory"})
    own = crashed().model_copy(update={"status": "oom", "error_class": None, "message": "MemoryError"})
    assert with_job_state(own, JobState("5", "TIMEOUT"), [report]).status == "oom"
    assert with_job_state(crashed(), JobState("5", "TIMEOUT"), [report]).status == "error"


def test_pyxis_and_apptainer_and_docker_flags(tmp_path):
    _, launch = launch_for(tmp_path, "ddp", "torchrun")
    job = job_launch(launch.launcher, launch.inputs, "torchrun", NodeLayout(2, 1))
    mounts = ["/work/main", "/results"]
    pyxis = wrap(job, SlurmContainer(runtime="pyxis", image="nvcr.io#nvidia/pytorch:24.05-py3"), mounts, [], "/w")
    assert pyxis.srun[:4] == [
        "srun",
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        "--container-mounts=/work/main:/work/main,/results:/results",
        "--container-workdir=/w",
    ]
    app = wrap(job, SlurmContainer(runtime="apptainer", image="/img/bench.sif", gpus=True), mounts, [], "/w")
    assert app.node_argv[:8] == [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        "/work/main,/results",
        "--pwd",
        "/w",
        "/img/bench.sif",
    ]
    assert app.node_argv[8] == "torchrun"
    docker = wrap(job, SlurmContainer(runtime="docker", image="dpo-bench:cpu"), mounts, ["OMP_NUM_THREADS"], "/w")
    line = docker.script_line()
    assert "--cgroup-parent=/slurm_${SLURMD_NODENAME}/uid_${SLURM_JOB_UID}/job_${SLURM_JOB_ID}" in line
    assert "--label=dpo-bench.slurm-job=$SLURM_JOB_ID" in line and "-e OMP_NUM_THREADS -e MASTER_ADDR" in line
    mpi = job_launch("mpirun", launch.inputs, "mpirun", NodeLayout(2, 1))
    app_mpi = wrap(mpi, SlurmContainer(runtime="apptainer", image="b.sif"), mounts, [], "/w")
    at = app_mpi.node_argv.index("apptainer")
    assert app_mpi.node_argv[0] == "mpirun" and app_mpi.node_argv[at + 7] == "/venv/bin/python"
    with pytest.raises(BenchError, match="pyxis: mpirun"):
        wrap(mpi, SlurmContainer(runtime="pyxis", image="x"), mounts, [], "/w")


def test_executor_slurm_without_sbatch_is_one_line(tmp_path):
    env = os.environ | {"PATH": str(Path(sys.executable).parent)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--results",
            str(tmp_path),
            "run",
            "--executor",
            "slurm",
            "--filter",
            "one_adapter-none-single",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --executor slurm: sbatch, scontrol, scancel not on PATH; install the Slurm client "
        "(a local cluster for tests: bash bench/executors/slurm/setup-single-node.sh)"
    ]


def test_a_failed_job_whose_step_was_oom_killed_is_out_of_memory(tmp_path):
    output = tmp_path / "slurm-19.out"
    output.write_text(
        "srun: error: vm-n1: task 0: Out Of Memory\n"
        "slurmstepd-vm-n1: error: Detected 1 oom-kill event(s) in StepId=19.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.\n"
    )
    state = step_oom(JobState("19", "FAILED", 1), output)
    assert (state.state, state.reason) == ("OUT_OF_MEMORY", "StepId=19.0: 1 oom-kill event(s), slurmstepd")
    assert step_oom(JobState("19", "COMPLETED", 0), output).state == "COMPLETED"
    output.write_text("Traceback ...\nValueError: bad\n")
    assert step_oom(JobState("19", "FAILED", 1), output).state == "FAILED"


def test_a_multi_node_profile_needs_the_slurm_executor(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--results",
            str(tmp_path),
            "run",
            "--hw",
            "2x8xA100-80G",
            "--executor",
            "local",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
    )
    assert done.returncode == 2
    assert done.stderr == "error: profile 2x8xA100-80G spans 2 nodes: use --executor slurm (docs/slurm.md)\n"
