"""The records of a pipeline's stages (bench/pipeline): a training stage's from its cell's record, a merge or
generate step's from its process's outcome and report, a stage after a failed one as not run. Pure but for
`redact`."""

from bench.executors.base import Outcome
from bench.judge.classify import classify
from bench.results.schema import ErrorClass, ResultRecord, StageRecord, Status
from bench.secrets import redact
from bench.worker.pipeline_step import StepReport


def training_stage(base: StageRecord, record: ResultRecord, output: str) -> StageRecord:
    """A training stage is its cell: the cell's status (learning check and engagement included) and memory."""
    metrics = record.metrics
    peak = None if metrics is None else metrics.peak_bytes or metrics.train_peak_bytes
    return base.model_copy(
        update={
            "status": record.status,
            "error_class": record.error_class,
            "message": record.message,
            "wall_s": record.wall_s,
            "exit_code": record.exit_code,
            "peak_bytes": peak,
            "memory_kind": metrics.memory_kind if metrics else "rss",
            "output": output if record.status == Status.OK else None,
            "record": record,
            "log_tail": record.log_tail if record.status != Status.OK else "",
            "started_at": record.started_at,
            "finished_at": record.finished_at,
        }
    )


def step_stage(base: StageRecord, outcome: Outcome, report: StepReport | None, output: str | None) -> StageRecord:
    """A merge or generate step: ok when its process exited 0 with a report and no error."""
    update: dict = {
        "wall_s": round(outcome.wall_s, 3),
        "exit_code": outcome.exit_code,
        "log_tail": redact(outcome.log_tail[-3000:]),
    }
    if report is not None:
        update |= {"peak_bytes": report.peak_bytes, "memory_kind": report.memory_kind, "checks": report.checks}
    clean = outcome.exit_code == 0 and not outcome.timed_out and report is not None and report.error is None
    if clean:
        return base.model_copy(update=update | {"status": Status.OK, "output": output, "log_tail": ""})
    errors = [f"{report.error}\n{report.traceback_tail or ''}"] if report is not None and report.error else []
    if not errors and outcome.exit_code == 0 and not outcome.timed_out:
        errors = ["the step exited 0 without writing its report"]
    verdict = classify(
        exit_code=outcome.exit_code,
        timed_out=outcome.timed_out,
        error_texts=errors,
        log_tail=outcome.log_tail,
        oom_killed=outcome.oom_killed,
    )
    status = verdict.status if verdict.status != Status.OK else Status.ERROR
    error_class = verdict.error_class or (ErrorClass.OTHER if status == Status.ERROR else None)
    return base.model_copy(
        update=update | {"status": status, "error_class": error_class, "message": redact(verdict.message)}
    )


def not_run_stage(base: StageRecord, stopped_by: StageRecord, at: str) -> StageRecord:
    reason = f"not run: stage {stopped_by.index} ({stopped_by.stage}) ended {stopped_by.status}"
    if stopped_by.message:
        reason += f": {stopped_by.message.splitlines()[0]}"
    return base.model_copy(update={"status": Status.NOT_RUN, "message": reason, "finished_at": at})
