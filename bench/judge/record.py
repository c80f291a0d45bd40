"""The one place result records are built: cells that are not run (not applicable, untested) and cells that ran
(rank reports, exit status, log -> status, metrics, engagement).

Pure but for `redact`, which masks the values of this process's secret-looking environment variables.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from bench.executors.base import Outcome
from bench.judge.classify import classify, signal_name, signal_of
from bench.judge.engagement import AskedSettings, mismatches
from bench.judge.learning import check as learning_check
from bench.judge.metrics import aggregate, rank_memory
from bench.judge.mfu import MfuInputs, with_mfu
from bench.judge.wall_split import wall_split
from bench.matrix.cell import Cell, CellAxes
from bench.results.schema import ErrorClass, PredictionSummary, ProcessStart, RankMemoryFigures, ResultRecord, Status
from bench.secrets import redact
from bench.units import GiB
from bench.worker.rank_report import RankReport

NOT_RUN = frozenset({Status.NOT_APPLICABLE, Status.UNTESTED, Status.PREDICTED_OOM, Status.NOT_RUN})


@dataclass(frozen=True)
class RunFacts:
    """What every record of one run carries."""

    run_id: str
    hardware: str
    workload: str
    executor: str
    emulated_from: str | None = None


@dataclass(frozen=True)
class Execution:
    """How one trial of a cell ran: the launch's outcome and what its ranks left behind."""

    outcome: Outcome
    reports: list[RankReport]
    report_problems: list[str]
    started_at: str
    finished_at: str
    trial: int = 0
    config_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expectation:
    """What a finished cell is held against."""

    world_size: int
    warmup_steps: int
    steps: int
    pairs_per_step: int
    mfu: MfuInputs | None = None
    versions: Mapping[str, str | None] | None = None
    """Installed package versions: known issues match within their version ranges."""
    precision: str = "fp32"
    """The profile's compute precision: the learning check's first-loss tolerance depends on it."""
    memory_budget_bytes: int | None = None
    prediction: PredictionSummary | None = None
    timeout_s: float | None = None
    """The time limit the cell ran under: a timeout's message names it."""
    settings: AskedSettings | None = None
    """The training settings the flags gave, held against what engaged (bench/judge/engagement.py)."""


def _identity(run: RunFacts, cell: Cell, world: int, status: Status) -> ResultRecord:
    return ResultRecord(
        run_id=run.run_id,
        **CellAxes.of(cell),
        launcher=cell.launcher,
        options=[str(o) for o in cell.options],
        setup=cell.setup,
        hardware=run.hardware,
        workload=run.workload,
        status=status,
        world_size=world,
        executor=run.executor,
        emulated_from=run.emulated_from,
    )


def not_run_record(
    run: RunFacts,
    cell: Cell,
    world: int,
    status: Status,
    reason: str,
    at: str,
    prediction: PredictionSummary | None = None,
) -> ResultRecord:
    """A cell recorded without running it: `not_applicable` (a rule's reason), `untested` (why this machine cannot
    run the profile at all) or `predicted_oom` (the estimator's verdict, with its prediction)."""
    if status not in NOT_RUN:
        raise ValueError(f"{status} is not a status of a cell that was not run")
    record = _identity(run, cell, world, status)
    executor = "none" if status in (Status.UNTESTED, Status.PREDICTED_OOM) else run.executor
    update = {"message": reason, "finished_at": at, "executor": executor, "prediction": prediction}
    return record.model_copy(update=update)


def finished_record(run: RunFacts, cell: Cell, expect: Expectation, ran: Execution) -> ResultRecord:
    """The record of a cell that was launched: its failure class, or ok / silent_fallback with its metrics."""
    outcome, reports = ran.outcome, ran.reports
    sig = signal_of(outcome.exit_code)
    figures = rank_memory(reports, outcome.rank_memory)
    fault = outcome.harness_fault
    record = _identity(run, cell, expect.world_size, Status.ERROR).model_copy(
        update={
            "trial": ran.trial,
            "exit_code": outcome.exit_code,
            "signal": signal_name(sig) if sig else None,
            "wall_s": round(outcome.wall_s, 3),
            "log_tail": redact(outcome.log_tail[-3000:]),
            "image": outcome.image,
            "config_files": list(ran.config_files),
            "started_at": ran.started_at,
            "finished_at": ran.finished_at,
            "process_start": process_start(reports),
            "phases": wall_split(outcome, reports),
            "rank_memory": figures,
            "memory_budget_bytes": expect.memory_budget_bytes,
            "prediction": expect.prediction,
            "harness_fault": redact(fault.what) if fault is not None else None,
        }
    )
    if fault is not None and fault.spoiled:  # the harness ended the cell: nothing of it is held against the cell
        return record.model_copy(update={"status": Status.HARNESS, "message": redact(fault.what)})
    errors = [f"{r.error}\n{r.traceback_tail or ''}" for r in sorted(reports, key=lambda r: r.rank) if r.error]
    failed = outcome.timed_out or outcome.stalled or outcome.oom_killed or outcome.exit_code != 0
    if failed or errors or ran.report_problems:
        return _failed(record, cell, expect, ran, errors, figures)
    return _trained(record, cell, expect, reports, figures)


def _failed(
    record: ResultRecord,
    cell: Cell,
    expect: Expectation,
    ran: Execution,
    errors: list[str],
    figures: list[RankMemoryFigures],
) -> ResultRecord:
    """A cell that failed: its status and error class (judge/classify.py), and the known issue it matches."""
    outcome, reports = ran.outcome, ran.reports
    message_suffix = ""
    if not errors and reports and all(len(r.step_ends) == expect.steps for r in reports):
        message_suffix = " (after every rank finished its training steps)"
    verdict = classify(
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        stalled=outcome.stalled,
        error_texts=errors + ran.report_problems,
        log_tail=outcome.log_tail,
        oom_killed=outcome.oom_killed,
        oom_detail=oom_detail(figures),
        cell=cell,
        versions=expect.versions,
        timeout_s=expect.timeout_s,
    )
    return record.model_copy(
        update={
            "status": verdict.status,
            "error_class": verdict.error_class,
            "message": redact(verdict.message + message_suffix),
            "known_issue": verdict.known_issue,
            "known_issue_note": verdict.known_issue_note,
        }
    )


def _trained(
    record: ResultRecord,
    cell: Cell,
    expect: Expectation,
    reports: list[RankReport],
    figures: list[RankMemoryFigures],
) -> ResultRecord:
    """A cell whose ranks all ended well: engagement (silent fallbacks), metrics and the learning check."""
    lead = min(reports, key=lambda r: r.rank) if reports else None
    if lead is None or lead.engagement is None:
        return record.model_copy(
            update={"error_class": ErrorClass.OTHER, "message": "worker exited 0 without reporting a training step"}
        )
    found = mismatches(cell, expect.world_size, lead.engagement, expect.settings)
    if len(reports) != expect.world_size:
        found.append(f"{len(reports)} rank(s) reported, expected {expect.world_size}")
    try:
        metrics = with_mfu(aggregate(reports, expect.warmup_steps, expect.pairs_per_step, figures), expect.mfu)
    except ValueError as exc:
        return record.model_copy(update={"error_class": ErrorClass.OTHER, "message": str(exc)})
    learning = learning_check(
        [r.losses for r in sorted(reports, key=lambda r: r.rank)],
        lead.reward_accuracies,
        expect.precision,
        cell.method,
        lead.pair_accuracy,
        lead.pairs_evaluated,
        lead.sampled_rewards,
        lead.reward_parts,
    )
    status = Status.SILENT_FALLBACK if found else Status.LEARNING_FAILED if learning.failures else Status.OK
    return record.model_copy(
        update={
            "status": status,
            "mismatches": found,
            "message": "; ".join(found or learning.failures),
            "metrics": metrics,
            "engagement": lead.engagement,
            "learning": learning,
        }
    )


def retried(first: ResultRecord, again: ResultRecord) -> ResultRecord:
    """The record of a cell run again once after the harness spoiled its first try (`first`, status `harness`): the
    second try's own status and figures, naming the first try's fault, and the second's where it has one."""
    note = f"first try: {first.harness_fault}; re-run once"
    if again.harness_fault:
        note += f"; then: {again.harness_fault}"
    return again.model_copy(update={"harness_fault": note})


def process_start(reports: list[RankReport]) -> ProcessStart | None:
    """How the ranks that reported started: all forked from the run's fork server, all fresh, or some of each."""
    starts = {r.forked for r in reports}
    if not starts:
        return None
    if len(starts) > 1:
        return ProcessStart.MIXED
    return ProcessStart.FORKED if starts == {True} else ProcessStart.FRESH


def oom_detail(figures: list[RankMemoryFigures]) -> str | None:
    """Which rank the kernel OOM-killed, at what limit, for the record's message."""
    killed = [f for f in figures if f.oom_killed]
    if not killed:
        return None
    parts = []
    for f in killed:
        limit = f"{f.limit_bytes / GiB:.2f} GiB" if f.limit_bytes else "its limit"
        peak = f" (cgroup peak {f.kernel_peak_bytes / GiB:.2f} GiB)" if f.kernel_peak_bytes else ""
        parts.append(f"rank {f.rank} was OOM-killed by the kernel at its memory budget of {limit}{peak}")
    return "; ".join(parts)
