"""Slurm executor: each cell is one batch job, rendered from a template the user can read and override.

`run` submits the cell's job (or, on a resumed run, finds the job an earlier run submitted still alive and waits for
it instead), waits for Slurm to end it, and hands back its output and final state. Many cells are in flight at once
(bench/run/in_flight.py calls `run` from one thread per cell); one poller thread asks the controller about every
job of the run. Ctrl-C: `cancel_all` scancels every job the run has submitted and waits until none is left.
"""

import math
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from bench.errors import BenchError
from bench.executors.base import LaunchPlan, Outcome
from bench.executors.local import read_tail
from bench.executors.slurm.containers import SlurmContainer, wrap
from bench.executors.slurm.jobs import Accounting, JobRegistry, JobState, cancel, controller_states, submit
from bench.files import write_whole
from bench.launchers import job_launch
from bench.launchers.job import JOB_VARIABLES, NodeLayout, quote
from bench.matrix.profiles import HardwareProfile
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import PROJECT_ROOT
from bench.results.layout import RunFolder
from bench.secrets import redact_file

TEMPLATE = Path(__file__).with_name("job.sbatch")
PLACEHOLDERS = (
    "sbatch_options",
    "workdir",
    "environment",
    "hostfile",
    "ranks_per_node",
    "cell",
    "container_setup",
    "launch",
)
_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:=@%+/-]+$")
POLL_S = 0.5
GONE_GRACE_S = 30.0
"""How long a job that left the controller may take to appear in accounting before its state counts as unknown."""
GUARD_S = 120.0
"""Running time past the --time limit after which the runner cancels a job itself (Slurm checks limits every ~30 s
and then waits KillWait): a cluster that does not enforce limits cannot hang a run."""


class SlurmOptions(Strict):
    """Where and how jobs are submitted: a user config file (--slurm-config) and the CLI."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    sbatch: list[str] = Field(default_factory=list, description="extra sbatch options, e.g. --constraint=a100")
    container: SlurmContainer | None = None
    template: str | None = Field(
        default=None, description="sbatch template file (default bench/executors/slurm/job.sbatch)"
    )

    @field_validator("partition", "account", "qos")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        if value is not None and not _SAFE_VALUE.match(value):
            raise ValueError(f"{value!r}: letters, digits and ._,:=@%+/- only")
        return value

    @field_validator("sbatch")
    @classmethod
    def _options(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.startswith("--") or not _SAFE_VALUE.match(value):
                raise ValueError(f"sbatch option {value!r}: expected --name or --name=value (no spaces, no quotes)")
        return values


def load_options(path: Path | None, **overrides: object) -> SlurmOptions:
    """The config file's options, with the CLI's (those not None / not empty) on top."""
    base = load_yaml_model(path, SlurmOptions) if path else SlurmOptions()
    update = {key: value for key, value in overrides.items() if value not in (None, [], "")}
    if "sbatch" in update:
        update["sbatch"] = [*base.sbatch, *update["sbatch"]]  # type: ignore[misc]
    try:
        return SlurmOptions.model_validate(base.model_dump() | update)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise BenchError(f"slurm options: {where}: {error['msg']}") from None


def time_limit_minutes(timeout_s: float) -> int:
    """sbatch --time has minute granularity: the cell's timeout rounded up."""
    return max(1, math.ceil(timeout_s / 60))


def node_memory_gb(profile: HardwareProfile) -> float | None:
    """--mem of each node: the profile's node_memory_gb, else the per-rank budget times the ranks of a node, else the
    whole-cell memory a container gets (container_memory_gb); None: the cluster's default."""
    if profile.node_memory_gb is not None:
        return profile.node_memory_gb
    if profile.memory_budget_gb is not None:
        return profile.memory_budget_gb * profile.processes_per_node
    return profile.container_memory_gb


def layout_of(launch: LaunchPlan, profile: HardwareProfile) -> NodeLayout:
    """One process on one node, or the profile's nodes with their share of the ranks."""
    if launch.ranks == 1:
        return NodeLayout(1, 1, profile.threads_per_process)
    nodes = profile.nodes if launch.ranks == profile.processes else 1
    return NodeLayout(nodes, launch.ranks // nodes, profile.threads_per_process)


def sbatch_options(
    launch: LaunchPlan, profile: HardwareProfile, options: SlurmOptions, timeout_s: float, cell_id: str, output: Path
) -> list[str]:
    layout = layout_of(launch, profile)
    rank_launch = None
    if launch.inputs:
        rank_launch = job_launch(launch.launcher or "python", launch.inputs, launch.argv[0], layout)
    tasks, cpus = (rank_launch.tasks_per_node, rank_launch.cpus_per_task) if rank_launch else (1, layout.threads)
    lines = [
        f"--job-name=dpo-bench:{cell_id}",
        f"--nodes={layout.nodes}",
        f"--ntasks-per-node={tasks}",
        f"--cpus-per-task={cpus}",
        f"--time={time_limit_minutes(timeout_s)}",
        f"--output={output}",
        "--open-mode=append",
    ]
    memory = node_memory_gb(profile)
    if memory is not None:
        lines.append(f"--mem={max(1, round(memory * 1024))}M")
    if launch.devices:  # the cell's GPUs on each node (bench/worker/placement.py cell_devices)
        lines.append(f"--gpus-per-node={launch.devices}")
    for name, value in (("partition", options.partition), ("account", options.account), ("qos", options.qos)):
        if value:
            lines.append(f"--{name}={value}")
    return lines + list(options.sbatch)


def render(template: str, values: dict[str, str]) -> str:
    """Fill each {{name}}; an unknown placeholder or a missing {{launch}} is a one-line error."""
    if not _PLACEHOLDER.search(template) or "launch" not in _PLACEHOLDER.findall(template):
        raise BenchError("slurm template: it must contain {{launch}} (the line that starts the ranks)")
    unknown = sorted({name for name in _PLACEHOLDER.findall(template) if name not in values})
    if unknown:
        raise BenchError(f"slurm template: unknown placeholder(s) {', '.join(unknown)}; known: {', '.join(values)}")
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def job_script(
    launch: LaunchPlan,
    profile: HardwareProfile,
    options: SlurmOptions,
    template: str,
    *,
    timeout_s: float,
    cell_id: str,
    output: Path,
    hostfile: Path,
    workdir: Path,
    mounts: list[str],
) -> str:
    """The batch script of one cell: its resources as #SBATCH lines, its environment, and the srun line."""
    if launch.inputs is None or launch.launcher is None:
        raise BenchError(f"cell {cell_id}: its launch plan carries no launcher inputs; cannot run it under Slurm")
    layout = layout_of(launch, profile)
    rank_launch = job_launch(launch.launcher, launch.inputs, launch.argv[0], layout)
    if options.container is not None:
        rank_launch = wrap(rank_launch, options.container, mounts, sorted(launch.env), str(workdir))
    header = "\n".join(
        f"#SBATCH {line}" for line in sbatch_options(launch, profile, options, timeout_s, cell_id, output)
    )
    # the job sets the rendezvous variables itself, for the nodes it got
    kept = {name: value for name, value in launch.env.items() if name not in JOB_VARIABLES}
    # DeepSpeed's JIT ops: the runner's cache if it names one, else the one beside the interpreter (as the local
    # executor does): `make setup` prebuilt the ops there
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR") or str(
        Path(launch.inputs.python).parent.parent / "torch_extensions"
    )
    kept.setdefault("TORCH_EXTENSIONS_DIR", extensions)
    environment = "\n".join(f"export {name}={quote(value)}" for name, value in sorted(kept.items()))
    return render(
        template,
        {
            "sbatch_options": header,
            "workdir": quote(str(workdir)),
            "environment": environment,
            "hostfile": quote(str(hostfile)) + ".$SLURM_JOB_ID",
            "ranks_per_node": str(layout.per_node),
            "cell": cell_id,
            "container_setup": "",
            "launch": rank_launch.script_line(),
        },
    )


_STEP_OOM = re.compile(r"slurmstepd\S*: error: Detected (\d+) oom[-_]kill event\(s\) in (StepId=\d+(?:\.\w+)?)")


def step_oom(state: JobState, output: Path) -> JobState:
    """OUT_OF_MEMORY when a step of a job that FAILED was OOM-killed. Slurm marks the step, not the job (the batch
    script only sees srun fail); without accounting the step's state is gone, but slurmstepd's own line is in the
    job's output."""
    if state.state != "FAILED":
        return state
    match = _STEP_OOM.search(read_tail(output, 20000))
    if match is None:
        return state
    return replace(state, state="OUT_OF_MEMORY", reason=f"{match[2]}: {match[1]} oom-kill event(s), slurmstepd")


@dataclass
class _Watch:
    event: threading.Event
    state: JobState | None = None
    running_since: float | None = None
    gone_since: float | None = None


class JobTracker:
    """One thread asks the controller about every watched job twice a second; a job that left the controller is
    looked up in accounting (sacct or the jobcomp file)."""

    def __init__(self) -> None:
        self.accounting = Accounting()
        self._lock = threading.Lock()
        self._watched: dict[str, _Watch] = {}
        self._thread: threading.Thread | None = None

    def watch(self, job_id: str) -> _Watch:
        with self._lock:
            watch = self._watched.setdefault(job_id, _Watch(threading.Event()))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._poll, name="slurm-poller", daemon=True)
                self._thread.start()
        return watch

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return {job: w.state.state if w.state else "SUBMITTED" for job, w in self._watched.items()}

    def _poll(self) -> None:
        while True:
            with self._lock:
                pending = {job: w for job, w in self._watched.items() if not w.event.is_set()}
                if not pending:
                    self._thread = None
                    return
            try:
                known = controller_states()
            except BenchError:
                known = None  # the controller did not answer this time: ask again
            now = time.monotonic()
            for job, watch in pending.items():
                if known is None:
                    break
                state = known.get(job)
                if state is None:
                    watch.gone_since = watch.gone_since or now
                    state = self.accounting.finished(job)
                    if state is None and now - watch.gone_since > GONE_GRACE_S:
                        state = JobState(job, "UNKNOWN", reason="the job left the controller and no accounting has it")
                    if state is None:
                        continue
                if state.state == "RUNNING" and watch.running_since is None:
                    watch.running_since = now
                watch.state = state
                if not state.alive:
                    watch.event.set()
            time.sleep(POLL_S)


class SlurmExecutor:
    """Cells as Slurm batch jobs; `run` blocks until the cell's job has ended (call it from many threads)."""

    name = "slurm"
    image = None
    concurrent = True
    """The runner starts every cell at once and lets the cluster order them (bench/run/in_flight.py)."""
    memory_budget_bytes = None
    """The job's memory request bounds the node, not each rank (`node_memory_gb`)."""

    def __init__(
        self,
        run_dir: Path,
        profile: HardwareProfile,
        options: SlurmOptions,
        python: str,
        cwd: Path = PROJECT_ROOT,
        template: Path | None = None,
    ) -> None:
        self.run_dir, self.profile, self.options, self.python, self.cwd = run_dir, profile, options, python, cwd
        path = template or (Path(options.template) if options.template else TEMPLATE)
        try:
            self.template = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BenchError(f"slurm template {path}: {exc.strerror or exc}") from None
        render(self.template, dict.fromkeys(PLACEHOLDERS, ""))  # a broken template stops the run before any job
        self.template_path = path
        self.registry = JobRegistry(run_dir)
        self.tracker = JobTracker()
        self._lock = threading.Lock()
        self._stopping = False
        self._final: dict[str, JobState] = {}

    def earlier_job(self, key: str, cell: str) -> str | None:
        """The job an earlier invocation of this run submitted for `key` (a cell trial's log name), when its result
        can still be had: the job is alive, or it ended on its own and its output is in the cell's folder (the
        runner that submitted it died before recording it). A cancelled job is run again."""
        job = self.registry.get(key)
        if job is None:
            return None
        state = controller_states().get(job) or self.tracker.accounting.finished(job)
        if state is None or state.state in ("CANCELLED", "UNKNOWN"):
            return None
        if not state.alive and not (RunFolder(self.run_dir).cell(cell) / f"slurm-{job}.out").is_file():
            return None
        return job

    def final_state(self, key: str) -> JobState | None:
        return self._final.get(key)

    def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        key, cell = log_path.stem, labels["dpo-bench.cell"]
        cell_dir = RunFolder(self.run_dir).cell(cell)
        cell_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        job = self.earlier_job(key, cell)
        if job is None:
            job = self._submit(launch, key, cell, cell_dir, timeout_s)
        else:
            print(f"      {key}: job {job} of an earlier invocation is used, not submitted again", flush=True)
        watch = self.tracker.watch(job)
        limit = time_limit_minutes(timeout_s) * 60 + GUARD_S
        while not watch.event.wait(1.0):
            if watch.running_since is not None and time.monotonic() - watch.running_since > limit:
                cancel([job])
                watch.event.wait(GONE_GRACE_S)
                watch.state = JobState(job, "TIMEOUT", reason=f"still running {limit:.0f} s after it started")
                break
        state = step_oom(watch.state or JobState(job, "UNKNOWN"), cell_dir / f"slurm-{job}.out")
        self._final[key] = state
        output = cell_dir / f"slurm-{job}.out"
        redact_file(output)
        if output.is_file():
            shutil.copyfile(output, log_path)
        else:
            log_path.write_text("")
        ended = f"slurm: job {job} ended {state.state}" + (
            f" ({state.reason})" if state.reason not in ("", "None") else ""
        )
        with log_path.open("a", encoding="utf-8") as log:
            log.write(ended + "\n")
        run_s = time.monotonic() - (watch.running_since or started)
        return Outcome(exit_code=state.exit_code, timed_out=False, wall_s=run_s, log_tail=read_tail(log_path))

    def _submit(self, launch: LaunchPlan, key: str, cell: str, cell_dir: Path, timeout_s: float) -> str:
        config_dir = next(iter(launch.files)).parent if launch.files else cell_dir
        script = config_dir / ("job.sbatch" if key == cell else f"job.{key.split('.')[-1]}.sbatch")
        write_whole(
            script,
            job_script(
                launch,
                self.profile,
                self.options,
                self.template,
                timeout_s=timeout_s,
                cell_id=cell,
                output=cell_dir / "slurm-%j.out",
                hostfile=config_dir / "hostfile",
                workdir=self.cwd,
                mounts=[str(self.cwd), str(self.run_dir.resolve())],
            ),
        )
        with self._lock:
            if self._stopping:
                raise KeyboardInterrupt
        job = submit(script, self.cwd)
        with self._lock:
            self.registry.put(key, job)
            stopping = self._stopping
        if stopping:  # Ctrl-C arrived while sbatch ran: this job was not in the list cancel_all cancelled
            cancel([job])
        return job

    def queue_summary(self) -> str:
        counts: dict[str, int] = {}
        for state in self.tracker.snapshot().values():
            counts[state] = counts.get(state, 0) + 1
        return ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))

    def cancel_all(self, wait_s: float = 60.0) -> list[str]:
        """scancel every job this run has submitted (this and earlier invocations) and wait until none is alive;
        returns the ids still alive after `wait_s` (none, normally)."""
        with self._lock:
            self._stopping = True
            jobs = self.registry.job_ids()
        cancel(jobs)
        deadline = time.monotonic() + wait_s
        while True:
            alive = [job for job, state in controller_states().items() if job in jobs and state.alive]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(POLL_S)
