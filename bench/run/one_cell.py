"""One cell of a run: the run's context, the plan of every cell (run it, or record why not), and one trial of a
runnable cell: plan (pure: argv, environment, file contents) -> write its files -> execute (an Executor) -> record
(bench/judge/record.py, the only place records are built).
"""

import dataclasses
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from bench.assets.prepare import PreparedAssets, cell_dataset
from bench.errors import BenchError
from bench.executors.base import RUN_DIR_LABEL, Executor, LaunchPlan, Outcome
from bench.files import own_folder, without_link
from bench.judge.engagement import AskedSettings
from bench.judge.mfu import inputs_for
from bench.judge.record import Execution, Expectation, RunFacts, finished_record, retried
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.plan import Plan, plan_for
from bench.matrix.precision import PURE_BF16_DEEPSPEED
from bench.matrix.profiles import HardwareProfile, Workload
from bench.results.layout import RunFolder
from bench.results.schema import PredictionSummary, ResultRecord, Status
from bench.results.store import DISK_FULL_MESSAGES, DiskFull, now_iso
from bench.run.launch import free_port, plan_launch, write_files
from bench.secrets import redact_file
from bench.worker.allocator_history import HISTORY_GLOB
from bench.worker.rank_report import read_rank_reports
from bench.worker.spec import WorkerSpec

if TYPE_CHECKING:
    from bench.estimate.gate import Predictor
    from bench.run.slots import SlotPlacement


MIN_FREE_BYTES = 16 << 20
"""Room a cell needs in the run folder: its logs, rank reports and a tokenized copy of the dataset (a tiny cell takes
0.4 MiB at its peak). With less free no cell starts, and a cell that failed is taken to have failed on the full disk."""


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def disk_full_failure(record: ResultRecord, free: int) -> str | None:
    """Why a cell's failure is a full disk's (the results folder's free space after it ran, or a disk's error in its
    message or log), None otherwise: such a failure is the machine's, never recorded as the cell's result."""
    if record.status == Status.OK:
        return None
    if free < MIN_FREE_BYTES:
        return f"{record.cell_id} failed with {free >> 10} KiB left free in the results folder"
    for line in (record.message + "\n" + record.log_tail).splitlines():
        if any(text in line for text in DISK_FULL_MESSAGES):
            return f"{record.cell_id} failed: {line.strip()}"
    return None


def absent_assets(assets: PreparedAssets) -> list[tuple[str, str]]:
    """(what, path) of each prepared folder the assets name that is not there (moved or deleted since it was
    prepared); a Hub id names no folder. A cell given such a path would take it for a Hub id and fail."""
    named = [("model", assets.model), ("tokenizer", assets.tokenizer), ("dataset", assets.dataset)]
    named += [(f"{form} dataset", folder) for form, folder in assets.derived.items()]
    return [(what, path) for what, path in named if os.path.isabs(path) and not os.path.exists(path)]


@dataclass
class RunContext:
    run_id: str
    run_dir: Path
    profile: HardwareProfile
    workload: Workload
    assets: PreparedAssets
    executor: Executor
    launch_env: dict[str, str] = field(default_factory=dict)
    """Added to every cell's launch environment (bench.run.preflight.preflight: visible devices, --emulate cap)."""
    emulated_from: str | None = None
    """--emulate: the real GPU the profile runs on (bench.run.preflight.Preflight)."""
    untested: str | None = None
    """Decided once per run (bench.run.preflight.preflight): why nothing can run on this machine; every applicable
    cell is then recorded `untested` with this reason."""
    versions: Mapping[str, str | None] = field(default_factory=dict)
    """Package versions the cells run with (env.json): known issues match within their version ranges."""
    predict: "Predictor | None" = None
    """The memory estimator's prediction of a cell (bench/estimate/gate.py); None: no predictions."""
    run_predicted_oom: bool = False
    """Run the cells predicted to run out of memory by a clear margin instead of recording `predicted_oom`."""
    peak_tflops: float | None = None
    """The peak the cells' MFU divides by: the card that runs them (bench/run/preflight.py Preflight.peak_tflops);
    None: the profile's."""
    save_dir: Path | None = None
    """Where each cell's worker saves the trained model (a pipeline's training stage); None: nothing is saved."""
    reward_model: Path | None = None
    """A trained reward model an online cell's `reward_model` option scores with (the rlhf pipeline); None: a
    zero-head one built from the workload's checkpoint."""
    report_to: tuple[str, ...] = ("none",)
    """The experiment trackers every cell's trainer reports to (`--report-to`)."""
    plans: dict[str, Plan] = field(default_factory=dict, repr=False)
    """Each cell resolved on the run's profile with its workload (`plan`): the session builds the run's once."""

    def plan(self, cell: Cell) -> Plan:
        """`cell` resolved on the run's profile with its workload, once per cell: later calls hand the same Plan."""
        found = self.plans.get(cell.id)
        if found is None or found.cell != cell:
            found = self.plans[cell.id] = plan_for(cell, self.profile, self.workload)
        return found

    @property
    def facts(self) -> RunFacts:
        executor = self.executor.name if self.executor is not None else "none"
        return RunFacts(self.run_id, self.profile.name, self.workload.name, executor, self.emulated_from)


@dataclass(frozen=True)
class CellPlan:
    cell: Cell
    world: int
    not_run: tuple[Status, str] | None = None
    """(status, reason) of a cell recorded without running it."""
    prediction: PredictionSummary | None = None


def plan_cells(
    plans: list[Plan],
    untested: str | None = None,
    predict: "Predictor | None" = None,
    run_predicted_oom: bool = False,
) -> list[CellPlan]:
    """Each planned cell with its world size and prediction, and for the ones that will not run, the status and
    reason to record: not applicable first, then untested, then predicted to run out of memory by a clear margin."""
    from bench.estimate.gate import clearly_out_of_memory
    from bench.estimate.gate import reason as oom_reason

    found = []
    for plan in plans:
        reason = plan.not_applicable or pure_bf16_reason(plan)
        prediction = predict(plan) if predict is not None and reason is None else None
        not_run = (Status.NOT_APPLICABLE, reason) if reason else (Status.UNTESTED, untested) if untested else None
        if not_run is None and not run_predicted_oom and clearly_out_of_memory(prediction):
            not_run = (Status.PREDICTED_OOM, oom_reason(prediction))
        found.append(CellPlan(plan.cell, plan.world, not_run, prediction))
    return found


def pure_bf16_reason(plan: Plan) -> str | None:
    """Why the cell cannot train `--precision pure-bf16` (None: it can, or it was not asked)."""
    refused = plan.pure_bf16 and plan.backend.deepspeed is not None
    return f"--precision pure-bf16: {PURE_BF16_DEEPSPEED}" if refused else None


def run_cell(
    ctx: RunContext,
    cell: Cell,
    trial: int = 0,
    prediction: PredictionSummary | None = None,
    fresh: bool = True,
    timeout_s: float | None = None,
    placement: "SlotPlacement | None" = None,
) -> ResultRecord:
    """Plan, write, execute and record one trial of a runnable cell. fresh=False keeps what the cell's folder holds
    (a scheduler job an earlier run submitted is still writing into it). `placement`: its devices when cells run
    side by side (bench/run/side_by_side.py). DiskFull when the results folder has too little room to start, or the
    cell failed on a full disk: nothing is recorded then. A trial the harness spoiled (status `harness`) where
    running it again is safe is run once more, its record naming the first try's fault (the first try's log is kept
    as `<cell>.first-try.log`). BenchError when a prepared asset folder is gone: the run stops."""
    if (free := free_bytes(ctx.run_dir)) < MIN_FREE_BYTES:
        raise DiskFull(f"{free >> 10} KiB free in {ctx.run_dir}; a cell needs {MIN_FREE_BYTES >> 20} MiB")
    if gone := absent_assets(ctx.assets):
        what, path = gone[0]
        raise BenchError(
            f"the workload's prepared {what} {path} is gone (moved or deleted during the run): {cell.id} and the "
            f"cells after it would take it for a Hub id; resume with --run-id {ctx.run_id} to prepare it again"
        )
    record, outcome = _trial(ctx, cell, trial, prediction, fresh, timeout_s, placement)
    fault = outcome.harness_fault
    if record.status != Status.HARNESS or fault is None or not fault.retry:
        return record
    log = RunFolder(ctx.run_dir).log(cell.id, trial)
    log.replace(log.with_name(f"{log.stem}.first-try{log.suffix}"))
    again, _ = _trial(ctx, cell, trial, prediction, fresh, timeout_s, placement)
    return retried(record, again)


def empty_cell_folder(out_dir: Path) -> None:
    """What a fresh trial starts from: the cell's folder emptied of an earlier trial's files, its CUDA allocator
    histories (HISTORY_GLOB) kept, since a later unrecorded trial (the window's speed pass) records none."""
    if out_dir.is_symlink() or not out_dir.is_dir():
        return  # no earlier trial's folder: a link on the way is replaced where the trial makes its folders
    for entry in out_dir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif not (fnmatch(entry.name, HISTORY_GLOB) and entry.is_file()):
            entry.unlink(missing_ok=True)


def _trial(
    ctx: RunContext,
    cell: Cell,
    trial: int,
    prediction: PredictionSummary | None,
    fresh: bool,
    timeout_s: float | None,
    placement: "SlotPlacement | None",
) -> tuple[ResultRecord, Outcome]:
    """One try of a trial: its record, and the executor's outcome it was judged from."""
    folder = RunFolder(ctx.run_dir)
    config_dir = folder.configs(cell.id)
    out_dir = folder.cell(cell.id)
    if fresh:
        empty_cell_folder(out_dir)
    dataset = own_folder(out_dir / "dataset", ctx.run_dir)  # a link on the way is replaced (bench/files.py)
    own_folder(folder.logs, ctx.run_dir)
    rows = ctx.assets.dataset_for(method_spec(cell.method).data)
    assets = ctx.assets.model_copy(update={"dataset": cell_dataset(rows, dataset)})
    plan = ctx.plan(cell)
    spec = WorkerSpec.from_plan(
        plan,
        assets,
        str(out_dir),
        save_dir=None if ctx.save_dir is None else str(ctx.save_dir),
        reward_model=None if ctx.reward_model is None else str(ctx.reward_model),
        report_to=ctx.report_to,
    )
    launch = _written_plan(ctx, spec, plan, config_dir, placement)
    labels = {"dpo-bench.run": ctx.run_id, "dpo-bench.cell": cell.id, "dpo-bench.profile": ctx.profile.name}
    labels[RUN_DIR_LABEL] = str(ctx.run_dir.resolve())  # a dead runner's containers are found by it (run/leftovers)
    log_path = without_link(folder.log(cell.id, trial))  # the executor's output makes a file of its own there
    limit = timeout_s or ctx.profile.timeout_s  # --cell-timeout, cut to what a --time-budget leaves
    started = now_iso()
    try:
        outcome = ctx.executor.run(launch, log_path, limit, labels)
    finally:
        redact_file(log_path)  # after a Ctrl-C too: the interrupted cell's log stays, masked like every other
    free = free_bytes(ctx.run_dir)  # before the caches go: a cell that filled the disk freed it again
    shutil.rmtree(dataset, ignore_errors=True)  # the cell's map() caches: a tokenized copy of the dataset
    reports, problems = read_rank_reports(out_dir)
    files = tuple(str(p.relative_to(ctx.run_dir)) for p in launch.config_files)
    ran = Execution(outcome, reports, problems, started, now_iso(), trial, files)
    expected = _expectation(ctx, plan, prediction, limit, launch.memory_budget_bytes)
    record = finished_record(ctx.facts, cell, expected, ran)
    if why := disk_full_failure(record, free):
        raise DiskFull(why)
    return record, outcome


def _written_plan(
    ctx: RunContext, spec: WorkerSpec, plan: Plan, config_dir: Path, placement: "SlotPlacement | None"
) -> LaunchPlan:
    """The cell's launch plan for the executor's interpreter, on its own devices and cores when cells run side by
    side, its files written."""
    run_env = ctx.launch_env | (placement.env if placement is not None else {})
    launch = plan_launch(
        spec,
        config_dir,
        free_port(),
        ctx.executor.python,
        as_root=os.geteuid() == 0,
        run_env=run_env,
        cores=placement.cores if placement is not None else None,
        slot=placement.first if placement is not None else None,
        plan=plan,
    )
    if placement is not None and placement.memory_budget_bytes is not None:
        launch = dataclasses.replace(launch, memory_budget_bytes=placement.memory_budget_bytes)
    write_files(launch, ctx.run_dir)
    return launch


def _expectation(
    ctx: RunContext, plan: Plan, prediction: PredictionSummary | None, limit: float, budget: int | None = None
) -> Expectation:
    """What the record is judged against: the cell's world, steps, MFU inputs, versions, budget (`budget`: its slot's,
    else the executor's) and time limit."""
    train, world = plan.workload.train, plan.world
    return Expectation(
        world_size=world,
        warmup_steps=train.warmup_steps,
        steps=train.steps,
        pairs_per_step=train.per_device_train_batch_size * world,
        mfu=inputs_for(plan, ctx.assets.model, ctx.peak_tflops),
        versions=ctx.versions,
        precision=ctx.profile.precision,
        memory_budget_bytes=budget if budget is not None else ctx.executor.memory_budget_bytes,
        prediction=prediction,
        timeout_s=limit,
        settings=AskedSettings.of(plan.profile, plan.workload),
    )
