"""`--executor slurm` against a real Slurm cluster on this machine: slurmctld and two slurmd nodes
(bench/executors/slurm/setup-single-node.sh, which `make test` runs first through `make slurm`).

Real CPU cells (tiny workload) run as real jobs; statuses come from Slurm's own job states (TIMEOUT through --time,
OUT_OF_MEMORY through --mem), Ctrl-C scancels, and a resumed run reuses the job an earlier runner left alive.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.executors.slurm.jobs import JobRegistry, controller_states, parse_fields
from bench.paths import PROJECT_ROOT, SCENARIOS_DIR
from bench.results.store import load_results

pytestmark = pytest.mark.integration

SETUP = PROJECT_ROOT / "bench" / "executors" / "slurm" / "setup-single-node.sh"
JOBCOMP = Path("/var/log/slurm/jobcomp.txt")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """The cluster `make slurm` starts; started here when a test is run on its own (idempotent, one line)."""
    done = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    assert len(set(nodes)) >= 2, f"the test cluster has two slurmd nodes; sinfo shows {nodes}"


def scenarios(tmp_path: Path, **profile: str) -> Path:
    """A copy of scenarios/ whose cpu profile has `profile`'s keys replaced or added."""
    import shutil

    import yaml

    target = tmp_path / "scenarios"
    shutil.copytree(SCENARIOS_DIR, target, ignore=shutil.ignore_patterns("data"))
    (target / "data").symlink_to(SCENARIOS_DIR / "data")
    path = target / "hardware" / "cpu.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | profile))
    return target


def bench_argv(results: Path, cells: str, run_id: str, scenario_dir: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--results", str(results)]
    argv += ["--scenarios", str(scenario_dir)] if scenario_dir else []
    return [*argv, "run", "--hw", "cpu", "--executor", "slurm", "--filter", cells, "--run-id", run_id]


def bench_run(results: Path, cells: str, run_id: str = "r", env=None, scenario_dir=None):
    return subprocess.run(
        bench_argv(results, cells, run_id, scenario_dir),
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | (env or {}),
        cwd=PROJECT_ROOT,
    )


def jobcomp_line(job_id: str) -> dict[str, str]:
    lines = [line for line in JOBCOMP.read_text().splitlines() if line.startswith(f"JobId={job_id} ")]
    assert lines, f"job {job_id} is not in {JOBCOMP}"
    return parse_fields(lines[-1])


def alive(job_ids: list[str]) -> list[str]:
    states = controller_states()
    return [job for job in job_ids if job in states and states[job].alive]


def leftovers(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline[:120]}")
    return found


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_a_job_starts_within_a_second_of_sbatch(tmp_path):
    """From sbatch to the batch script's first line running (batch_sched_delay=0 in the cluster's slurm.conf)."""
    output = tmp_path / "o"
    submitted = time.monotonic()
    job = subprocess.run(
        ["sbatch", "--parsable", f"--output={output}", "--wrap", "echo started; sleep 1"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    wait_for(lambda: output.is_file() and "started" in output.read_text(), 20, "the job's first line")
    latency = time.monotonic() - submitted
    print(f"submit-to-start latency: {latency:.2f} s")
    assert latency < 2.0
    wait_for(lambda: not alive([job]), 30, "the end")


def test_single_and_ddp_cells_run_as_concurrent_jobs(tmp_path):
    done = bench_run(tmp_path, "one_adapter-none-single,one_adapter-none-ddp")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    run_dir = tmp_path / "cpu" / "r"
    records = load_results(run_dir).latest_by_cell()
    assert {cell: r.status for cell, r in records.items()} == {
        "one_adapter-none-single": "ok",
        "one_adapter-none-ddp": "ok",
    }
    ddp = records["one_adapter-none-ddp"]
    assert ddp.executor == "slurm" and ddp.world_size == 2 and ddp.engagement.world_size == 2
    assert ddp.slurm_state == "COMPLETED" and ddp.metrics.tokens_per_s > 0
    jobs = json.loads((run_dir / JobRegistry.FILE).read_text())
    assert jobs == {cell: r.slurm_job_id for cell, r in records.items()}
    assert jobcomp_line(ddp.slurm_job_id)["JobState"] == "COMPLETED"
    assert (run_dir / "cells" / "one_adapter-none-ddp" / f"slurm-{ddp.slurm_job_id}.out").is_file()
    log = (run_dir / "logs" / "one_adapter-none-ddp.log").read_text()
    assert (
        f"slurm: job {ddp.slurm_job_id} ended COMPLETED" in log
        and "--rdzv_backend=c10d" in (run_dir / "configs" / "one_adapter-none-ddp" / "job.sbatch").read_text()
    )
    assert "submitting 2 job(s)" in done.stdout


def test_ddp_across_two_slurmd_nodes(tmp_path):
    """One rank on each of two nodes: torchrun on each node, started by srun, c10d rendezvous on the head node."""
    done = bench_run(tmp_path, "one_adapter-none-ddp", scenario_dir=scenarios(tmp_path, nodes=2))
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    record = load_results(tmp_path / "cpu" / "r").records[0]
    assert record.status == "ok", record.message
    assert record.engagement.world_size == 2 and record.engagement.distributed_type == "MULTI_CPU"
    line = jobcomp_line(record.slurm_job_id)
    assert (line["JobState"], line["NodeCnt"]) == ("COMPLETED", "2")
    script = (tmp_path / "cpu" / "r" / "configs" / "one_adapter-none-ddp" / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "--nproc_per_node=1" in script


def test_timeout_oom_and_a_killed_rank_come_from_slurms_job_states(tmp_path):
    """Three runs at once: a hung rank past --time=1, a cell over --mem, a rank SIGKILLed mid-training."""
    runs = {
        "timeout": (
            "one_adapter-none-single",
            {"BENCH_FAULT": "hang@rank0:step3"},
            scenarios(tmp_path / "t", timeout_s=60),
        ),
        "oom": ("one_adapter-none-single", {}, scenarios(tmp_path / "m", node_memory_gb=0.3)),
        "killed": ("one_adapter-none-ddp", {"BENCH_FAULT": "sigkill@rank1:step5"}, None),
    }
    procs = {
        name: subprocess.Popen(
            bench_argv(tmp_path / name, cells, "r", scenario_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ | env,
            cwd=PROJECT_ROOT,
        )
        for name, (cells, env, scenario_dir) in runs.items()
    }
    outputs = {name: proc.communicate(timeout=400)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, outputs[name][-3000:]
    records = {name: load_results(tmp_path / name / "cpu" / "r").records[0] for name in runs}
    timeout, oom, killed = records["timeout"], records["oom"], records["killed"]
    assert (timeout.status, timeout.slurm_state) == ("timeout", "TIMEOUT"), timeout.message
    assert "time limit" in timeout.message
    assert (oom.status, oom.slurm_state) == ("oom", "OUT_OF_MEMORY"), oom.message
    assert (killed.status, killed.error_class) == ("error", "crash"), killed.message
    assert "SIGKILL" in killed.message and killed.slurm_state == "FAILED"
    for name in runs:
        assert leftovers(str(tmp_path / name)) == []
    print({name: (r.status, r.error_class, r.slurm_state, r.message) for name, r in records.items()})


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_cancels_every_job_and_leaves_nothing(tmp_path, signum, status):
    """Ctrl-C, or SIGTERM (what `timeout` and a scheduler running the runner itself send), while both jobs run."""
    proc = subprocess.Popen(
        bench_argv(tmp_path, "one_adapter-none-single,one_adapter-none-ddp", "r"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=PROJECT_ROOT,
    )
    run_dir = tmp_path / "cpu" / "r"

    def both_running():
        if not (run_dir / JobRegistry.FILE).is_file():
            return None
        jobs = JobRegistry(run_dir).job_ids()
        states = controller_states()
        return jobs if len(jobs) == 2 and all(states.get(j) and states[j].state == "RUNNING" for j in jobs) else None

    jobs = wait_for(both_running, 60, "both jobs running")
    time.sleep(3)  # the ranks are importing by now
    proc.send_signal(signum)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == status, output[-3000:]
    by = " by SIGTERM" if signum == signal.SIGTERM else ""
    assert (
        f"interrupted{by}: cancelling every job of run r (scancel)" in output and "no job of the run is left" in output
    )
    assert alive(jobs) == []
    assert all(jobcomp_line(job)["JobState"] == "CANCELLED" for job in jobs)
    assert leftovers(str(tmp_path)) == []
    assert load_results(run_dir).records == []


def test_a_resumed_run_waits_for_the_job_still_alive_instead_of_resubmitting(tmp_path):
    """The first runner dies (SIGKILL) with its job running; the re-run finds the job id and records that job."""
    first = subprocess.Popen(
        bench_argv(tmp_path, "one_adapter-none-single", "r"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=PROJECT_ROOT,
    )
    run_dir = tmp_path / "cpu" / "r"
    job = wait_for(
        lambda: (run_dir / JobRegistry.FILE).is_file() and JobRegistry(run_dir).get("one_adapter-none-single"),
        60,
        "a job id",
    )
    first.kill()
    first.wait()
    assert alive([job]) == [job]
    done = bench_run(tmp_path, "one_adapter-none-single", "r")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert f"job {job} of an earlier invocation is used, not submitted again" in done.stdout
    record = load_results(run_dir).records[0]
    assert (record.status, record.slurm_job_id) == ("ok", job), record.message
    assert JobRegistry(run_dir).job_ids() == [job]
    later = [
        fields["JobId"]
        for fields in map(parse_fields, JOBCOMP.read_text().splitlines())
        if fields.get("Name") == "dpo-bench:one_adapter-none-single" and int(fields["JobId"]) > int(job)
    ]
    assert later == []  # no second job for the cell was submitted


def test_the_next_run_cancels_the_jobs_of_a_runner_killed_mid_run(tmp_path):
    """Run `dead`'s runner is SIGKILLed while its job runs; the next run of the profile (another run id: nothing
    resumes those jobs) scancels it, says so in one line, and leaves no process of it behind."""
    first = subprocess.Popen(
        bench_argv(tmp_path, "one_adapter-none-single", "dead"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=PROJECT_ROOT,
    )
    run_dir = tmp_path / "cpu" / "dead"

    def running_job():
        if not (run_dir / JobRegistry.FILE).is_file():
            return None
        job = JobRegistry(run_dir).get("one_adapter-none-single")
        state = controller_states().get(job) if job else None
        return job if state is not None and state.state == "RUNNING" else None

    job = wait_for(running_job, 60, "the job running")
    first.kill()
    first.wait()
    time.sleep(1)
    assert alive([job]) == [job]  # the job outlives its runner
    done = bench_run(tmp_path, "two_models-int8-single", "next")  # not applicable: recorded without a job
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert (
        f"cleaned up: run dead: runner {first.pid} ended without cleaning up: cancelled Slurm job(s) {job}\n"
        in done.stdout
    ), done.stdout[-3000:]
    assert alive([job]) == []
    ended = f"JobId={job} "
    wait_for(lambda: ended in JOBCOMP.read_text() and jobcomp_line(job)["JobState"] == "CANCELLED", 30, "CANCELLED")
    assert leftovers(str(run_dir)) == []
    again = bench_run(tmp_path, "two_models-int8-single", "next")  # said once: nothing is left to cancel
    assert "cleaned up" not in again.stdout, again.stdout[-3000:]
