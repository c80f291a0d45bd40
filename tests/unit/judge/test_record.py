import pytest

from bench.executors.base import Outcome
from bench.judge.record import Execution, Expectation, RunFacts, finished_record, not_run_record
from bench.matrix.cell import Cell
from bench.results.schema import ErrorClass, Status
from bench.worker.report import RankReport

CELL = Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
TEARDOWN_ABORT = """{'train_runtime': '2.7'}
terminate called without an active exception
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 5350)  (SIGABRT)
"""


RUN = RunFacts("r", "cpu", "tiny", "local")


def finished(reports, outcome, cell=CELL, versions=None):
    expect = Expectation(world_size=2, warmup_steps=1, steps=3, pairs_per_step=8, versions=versions)
    return finished_record(RUN, cell, expect, Execution(outcome, reports, [], "t0", "t1", trial=1))


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
    from bench.results.schema import Engagement

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


def test_finished_record_carries_the_run_and_the_trial():
    record = finished([], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""))
    assert (record.run_id, record.hardware, record.workload, record.executor) == ("r", "cpu", "tiny", "local")
    assert (record.trial, record.started_at, record.finished_at, record.world_size) == (1, "t0", "t1", 2)


def test_not_run_records_have_an_explicit_status():
    na = not_run_record(RUN, CELL, 2, Status.NOT_APPLICABLE, "rule: reason", "t")
    untested = not_run_record(RUN, CELL, 2, Status.UNTESTED, "no stack", "t")
    assert (na.status, na.message, na.executor) == (Status.NOT_APPLICABLE, "rule: reason", "local")
    assert (untested.status, untested.executor) == (Status.UNTESTED, "none")
    with pytest.raises(ValueError, match="not a status of a cell that was not run"):
        not_run_record(RUN, CELL, 2, Status.OK, "", "t")


def test_a_known_failure_carries_its_link_and_note():
    cell = Cell(init="one_adapter", quant="none", backend="device_map", launcher="python")
    text = (
        "RuntimeError: Expected all tensors to be on the same device, "
        "but found at least two devices, cuda:0 and cuda:1!"
    )
    record = finished([rank(0, 1, text)], Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail=""), cell=cell)
    assert record.error_class == ErrorClass.DEVICE_MISMATCH
    assert record.known_issue and "github.com" in record.known_issue and record.known_issue_note


LN2 = 0.6931471805599453
DDP_ENGAGED = {"world_size": 2, "distributed_type": "MULTI_CPU", "wrapper": "DistributedDataParallel"}


def trained(r: int, losses: list[float | None]) -> RankReport:
    from bench.results.schema import Engagement

    engaged = Engagement(**DDP_ENGAGED, adapters=["default"]) if r == 0 else None
    return rank(r).model_copy(update={"losses": losses, "reward_accuracies": [0.5, 1.0, 1.0], "engagement": engaged})


def clean_exit(reports, precision="fp32"):
    expect = Expectation(world_size=2, warmup_steps=1, steps=3, pairs_per_step=8, precision=precision)
    outcome = Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="")
    return finished_record(RUN, CELL, expect, Execution(outcome, reports, [], "t0", "t1"))


def test_a_cell_that_ran_as_asked_and_learned_is_ok():
    record = clean_exit([trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, 0.5, 0.4])])
    assert (record.status, record.message) == (Status.OK, "")
    assert record.learning.first_loss == pytest.approx(LN2)


def test_the_learning_check_reads_every_rank_not_only_the_lead():
    record = clean_exit([trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, None, 0.4])])
    assert record.status == Status.LEARNING_FAILED
    assert record.message == "non-finite loss (first at step 2 on rank 1)"
    # rank 1 did not learn: rank 0's end loss alone is 0.04 below its first, the mean over ranks only 0.02 (margin 0.03)
    flat = clean_exit([trained(0, [LN2, LN2 - 0.06, LN2 - 0.06]), trained(1, [LN2, LN2, LN2])])
    assert flat.status == Status.LEARNING_FAILED and flat.message.startswith("loss did not fall")


def test_the_first_loss_tolerance_is_the_profiles_precision():
    # 0.01 off ln 2: inside bf16's 2e-2, ten times fp32's 1e-3
    off = [LN2 + 0.01, 0.5, 0.4]
    fp32 = clean_exit([trained(0, off), trained(1, off)], precision="fp32")
    assert fp32.status == Status.LEARNING_FAILED and "is not ln 2" in fp32.message
    assert clean_exit([trained(0, off), trained(1, off)], precision="bf16").status == Status.OK
