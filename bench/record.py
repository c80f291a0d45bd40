"""Turn what a finished cell left behind (rank reports, exit status, log) into its result record. Pure."""

from bench.classify import classify, signal_name, signal_of
from bench.engagement import mismatches
from bench.executors import Outcome
from bench.metrics import aggregate
from bench.mfu import MfuInputs, with_mfu
from bench.rank_report import RankReport
from bench.results_schema import ResultRecord, Status
from bench.scenario import Cell
from bench.secrets import redact


def base_record(cell: Cell, run_id: str, hardware: str, workload: str, world: int) -> ResultRecord:
    return ResultRecord(
        run_id=run_id,
        cell_id=cell.id,
        init=cell.init,
        quant=cell.quant,
        backend=cell.backend,
        launcher=cell.launcher,
        options=[str(o) for o in cell.options],
        hardware=hardware,
        workload=workload,
        status=Status.NOT_APPLICABLE,
        world_size=world,
    )


def finished_record(
    base: ResultRecord,
    cell: Cell,
    reports: list[RankReport],
    report_problems: list[str],
    outcome: Outcome,
    warmup_steps: int,
    pairs_per_step: int,
    steps: int,
    mfu: MfuInputs | None = None,
) -> ResultRecord:
    sig = signal_of(outcome.exit_code)
    record = base.model_copy(
        update={
            "exit_code": outcome.exit_code,
            "signal": signal_name(sig) if sig else None,
            "wall_s": round(outcome.wall_s, 3),
            "log_tail": redact(outcome.log_tail[-3000:]),
            "image": outcome.image,
        }
    )
    errors = [f"{r.error}\n{r.traceback_tail or ''}" for r in sorted(reports, key=lambda r: r.rank) if r.error]
    failed = outcome.timed_out or outcome.oom_killed or outcome.exit_code != 0 or errors or report_problems
    if failed:
        message_suffix = ""
        if not errors and reports and all(len(r.step_ends) == steps for r in reports):
            message_suffix = " (after every rank finished its training steps)"
        verdict = classify(
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            error_texts=errors + report_problems,
            log_tail=outcome.log_tail,
            oom_killed=outcome.oom_killed,
        )
        message = verdict.message + message_suffix
        return record.model_copy(
            update={
                "status": verdict.status,
                "error_class": verdict.error_class,
                "message": redact(message),
                "known_issue": verdict.known_issue,
            }
        )
    lead = min(reports, key=lambda r: r.rank) if reports else None
    if lead is None or lead.engagement is None:
        return record.model_copy(
            update={
                "status": Status.ERROR,
                "error_class": "other",
                "message": "worker exited 0 without reporting a training step",
            }
        )
    found = mismatches(cell, base.world_size, lead.engagement)
    if len(reports) != base.world_size:
        found.append(f"{len(reports)} rank(s) reported, expected {base.world_size}")
    try:
        metrics = with_mfu(aggregate(reports, warmup_steps, pairs_per_step), mfu)
    except ValueError as exc:
        return record.model_copy(update={"status": Status.ERROR, "error_class": "other", "message": str(exc)})
    return record.model_copy(
        update={
            "status": Status.SILENT_FALLBACK if found else Status.OK,
            "mismatches": found,
            "message": "; ".join(found),
            "metrics": metrics,
            "engagement": lead.engagement,
        }
    )
