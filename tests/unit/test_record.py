from bench.executors import Outcome
from bench.rank_report import RankReport
from bench.record import base_record, finished_record
from bench.results_schema import ErrorClass, Status
from bench.scenario import Cell

CELL = Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
TEARDOWN_ABORT = """{'train_runtime': '2.7'}
terminate called without an active exception
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 5350)  (SIGABRT)
"""


def finished(reports, outcome):
    base = base_record(CELL, "r", "cpu", "tiny", 2)
    return finished_record(base, CELL, reports, [], outcome, warmup_steps=1, pairs_per_step=8, steps=3)


def rank(r: int, steps: int = 3, error: str | None = None) -> RankReport:
    return RankReport(
        rank=r, pid=1, hostname="h", step_ends=[1.0, 2.0, 3.0][:steps], tokens=[1, 2, 3][:steps], error=error
    )


def test_crash_after_training_says_so():
    record = finished([rank(0), rank(1)], Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail=TEARDOWN_ABORT))
    assert (record.status, record.error_class) == (Status.ERROR, ErrorClass.CRASH)
    assert record.message == (
        "rank 1 was killed by SIGABRT: terminate called without an active exception "
        "(after every rank finished its training steps)"
    )


def test_rank_exception_is_the_message():
    record = finished(
        [rank(0, 1, "ValueError: When using `deepspeed_config_file`, x"), rank(1, 1)],
        Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail=""),
    )
    assert record.error_class == ErrorClass.CONFIG and record.message.startswith("ValueError: When using")


def test_missing_rank_report_is_a_fallback_not_ok():
    from bench.engagement import Engagement

    lead = rank(0).model_copy(
        update={
            "engagement": Engagement(
                world_size=2, distributed_type="MULTI_GPU", wrapper="DistributedDataParallel", adapters=["default"]
            )
        }
    )
    record = finished([lead], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""))
    assert record.status == Status.SILENT_FALLBACK and "1 rank(s) reported, expected 2" in record.message


def test_clean_exit_without_a_step_is_an_error():
    record = finished([], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""))
    assert record.status == Status.ERROR and "without reporting a training step" in record.message
