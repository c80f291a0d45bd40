"""Slurm's own account of jobs: submit, states, cancel, and the job ids a run has submitted.

Job states come from the controller while it knows the job (`scontrol show job`), then from accounting: `sacct` where
slurmdbd records jobs, else the jobcomp text file (`JobCompType=jobcomp/filetxt`), which the controller appends a line
to as each job ends. Every call is a real Slurm command; nothing here knows what a cell is.
"""

import json
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.files import write_whole

ALIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"})
"""States of a job that still holds (or waits for) resources."""
COMMAND_TIMEOUT_S = 30
_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str
    """Slurm's base state: PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL, ..."""
    exit_code: int | None = None
    """The batch script's exit code (ExitCode=<code>:<signal>); 128+signal when a signal ended it."""
    reason: str = ""
    start_time: str = ""
    submit_time: str = ""
    std_out: str = ""
    """Where the job writes its output (a cell's folder in the run folder: whose job it is)."""

    @property
    def alive(self) -> bool:
        return self.state in ALIVE


class SlurmUnavailable(BenchError):
    pass


def require_commands() -> None:
    """One line when this machine cannot submit jobs."""
    missing = [name for name in ("sbatch", "scontrol", "scancel") if shutil.which(name) is None]
    if missing:
        raise SlurmUnavailable(
            f"--executor slurm: {', '.join(missing)} not on PATH; install the Slurm client "
            "(a local cluster for tests: bash bench/executors/slurm/setup-single-node.sh)"
        )


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    # own session: a Ctrl-C at the terminal reaches the runner, which decides what to cancel, not these clients
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, start_new_session=True, check=False
        )
    except FileNotFoundError:
        raise SlurmUnavailable(f"{argv[0]}: not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"`{' '.join(argv[:3])}` did not answer in {COMMAND_TIMEOUT_S} s") from None
    if check and done.returncode != 0:
        raise SlurmUnavailable(f"`{' '.join(argv[:3])} ...` failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done


def submit(script: Path, cwd: Path) -> str:
    """sbatch the script; returns the job id."""
    done = _run(["sbatch", "--parsable", str(script)], check=False)
    if done.returncode != 0:
        raise SlurmUnavailable(f"sbatch {script.name} failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout.strip().split(";")[0]


def cancel(job_ids: list[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids], check=False)


def parse_fields(line: str) -> dict[str, str]:
    return dict(_FIELD.findall(line))


def _exit_code(value: str | None) -> int | None:
    if not value or ":" not in value:
        return None
    code, sig = (int(part) for part in value.split(":", 1))
    return 128 + sig if sig else code


def state_from_fields(fields: dict[str, str]) -> JobState:
    return JobState(
        job_id=fields["JobId"],
        state=fields.get("JobState", "UNKNOWN").split()[0],
        exit_code=_exit_code(fields.get("ExitCode")),
        reason=fields.get("Reason", ""),
        start_time=fields.get("StartTime", ""),
        submit_time=fields.get("SubmitTime", ""),
        std_out=fields.get("StdOut", ""),
    )


def controller_states() -> dict[str, JobState]:
    """Every job the controller still knows (`scontrol show job -o`: one line per job)."""
    done = _run(["scontrol", "show", "job", "-o"], check=False)
    if done.returncode != 0:
        if "No jobs" in done.stdout + done.stderr:
            return {}
        raise SlurmUnavailable(f"scontrol show job failed: {(done.stderr or done.stdout).strip()[:300]}")
    states = {}
    for line in done.stdout.splitlines():
        fields = parse_fields(line)
        if "JobId" in fields:
            states[fields["JobId"]] = state_from_fields(fields)
    return states


def _config() -> dict[str, str]:
    done = _run(["scontrol", "show", "config"], check=False)
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _sacct_state(job_id: str) -> JobState | None:
    done = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,Start,Submit"], check=False)
    for line in done.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and parts[0] == job_id:
            state = parts[1].split()[0]  # "CANCELLED by 0"
            return JobState(job_id, state, _exit_code(parts[2]), start_time=parts[3], submit_time=parts[4])
    return None


def jobcomp_state(path: Path, job_id: str) -> JobState | None:
    """The job's line in a jobcomp/filetxt file (the last one: a requeued job ends more than once)."""
    found = None
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(f"JobId={job_id} "):
                    found = state_from_fields(parse_fields(line))
    except OSError:
        return None
    return found


class Accounting:
    """Where the states of finished jobs are read: sacct when slurmdbd keeps them, else the jobcomp file."""

    def __init__(self) -> None:
        config = _config()
        self.sacct = config.get("AccountingStorageType", "").endswith("slurmdbd") and shutil.which("sacct") is not None
        self.jobcomp = (
            Path(config["JobCompLoc"])
            if config.get("JobCompType", "").endswith("filetxt") and config.get("JobCompLoc")
            else None
        )

    def finished(self, job_id: str) -> JobState | None:
        if self.sacct:
            state = _sacct_state(job_id)
            if state is not None:
                return state
        return jobcomp_state(self.jobcomp, job_id) if self.jobcomp else None


class JobRegistry:
    """The job id submitted for each cell trial of a run, persisted in the run folder (`slurm_jobs.json`), so that a
    re-run finds the jobs an earlier one left and never submits a cell twice while its job is alive."""

    FILE = "slurm_jobs.json"

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / self.FILE
        self._lock = threading.Lock()
        try:
            self._jobs: dict[str, str] = json.loads(self.path.read_text())
        except FileNotFoundError:
            self._jobs = {}
        except (OSError, ValueError) as exc:
            raise BenchError(f"{self.path}: unreadable job registry ({exc}); remove it to start over") from None

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._jobs.get(key)

    def put(self, key: str, job_id: str) -> None:
        with self._lock:
            self._jobs[key] = job_id
            write_whole(self.path, json.dumps(self._jobs, indent=2, sort_keys=True))

    def job_ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs.values())


def _alive_jobs_of(run_dir: Path, job_ids: set[str]) -> list[str]:
    """Those of `job_ids` the controller still runs (or queues) for `run_dir`: their output goes into its folder
    (a job id alone could be another job's, after the controller's state was reset)."""
    inside = str(run_dir.resolve()) + "/"
    return sorted(
        (
            job
            for job, state in controller_states().items()
            if job in job_ids and state.alive and state.std_out.startswith(inside)
        ),
        key=int,
    )


def cancel_jobs_of(run_dir: Path, wait_s: float = 30.0) -> tuple[list[str], list[str]]:
    """scancel the live jobs of the run's registry (a runner that died left them running) and wait until they have
    left the queue; returns (the jobs cancelled, those still alive after `wait_s`)."""
    if not (run_dir / JobRegistry.FILE).is_file():
        return [], []
    job_ids = set(JobRegistry(run_dir).job_ids())
    alive = _alive_jobs_of(run_dir, job_ids)
    cancel(alive)
    deadline = time.monotonic() + wait_s
    left = alive
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _alive_jobs_of(run_dir, set(alive))
    return alive, left
