"""A cell's status from Slurm's own account of its job, where the worker left none of its own.

The record is first built as for any executor (bench/judge/record.py: rank reports, exit code, log). A job Slurm
ended for
a reason of its own (time limit, memory limit, a failed node, preemption, scancel) kills the ranks before they can
say what happened, so their launcher's exit looks like a crash (or the log's last line is all there is); Slurm's job
state says what it was. A rank's own error report, or a cell that trained (ok, fallback, learning check), wins.
"""

from bench.executors.slurm.jobs import JobState
from bench.results.schema import ErrorClass, ResultRecord, Status
from bench.worker.rank_report import RankReport

VERDICTS: dict[str, tuple[Status, ErrorClass | None, str]] = {
    "TIMEOUT": (Status.TIMEOUT, None, "Slurm ended job {job} at its time limit (TIMEOUT)"),
    "DEADLINE": (Status.TIMEOUT, None, "Slurm ended job {job} at its deadline (DEADLINE)"),
    "OUT_OF_MEMORY": (Status.OOM, None, "Slurm ended job {job}: a task exceeded the job's --mem (OUT_OF_MEMORY)"),
    "NODE_FAIL": (Status.ERROR, ErrorClass.NODE_FAIL, "a node of job {job} failed (NODE_FAIL)"),
    "BOOT_FAIL": (Status.ERROR, ErrorClass.NODE_FAIL, "a node of job {job} failed to boot (BOOT_FAIL)"),
    "PREEMPTED": (Status.ERROR, ErrorClass.PREEMPTED, "job {job} was preempted (PREEMPTED)"),
    "CANCELLED": (Status.ERROR, ErrorClass.CANCELLED, "job {job} was cancelled (CANCELLED)"),
}


def with_job_state(record: ResultRecord, state: JobState | None, reports: list[RankReport]) -> ResultRecord:
    """`record` with its job id and state, and Slurm's verdict where the worker reported none of its own."""
    if state is None:
        return record
    record = record.model_copy(update={"slurm_job_id": state.job_id, "slurm_state": state.state})
    verdict = VERDICTS.get(state.state)
    own_report = any(report.error for report in reports)
    if verdict is None or own_report or record.status not in (Status.ERROR, Status.OOM, Status.TIMEOUT):
        return record
    status, error_class, message = verdict
    reason = f"; reason {state.reason}" if state.reason not in ("", "None") else ""
    return record.model_copy(
        update={
            "status": status,
            "error_class": error_class,
            "message": message.format(job=state.job_id) + reason,
            "known_issue": None,
            "known_issue_note": None,
        }
    )
