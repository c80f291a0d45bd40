import pytest

from bench.executors.base import Outcome
from bench.judge.record import Execution, Expectation, RunFacts, finished_record, not_run_record
from bench.matrix.cell import Cell
from bench.results.schema import ErrorClass, ProcessStart, Status
from bench.worker.rank_report import RankReport

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
    assert (record.status, record.error_class, record.message) == (
        Status.ERROR,
        ErrorClass.OTHER,
        "worker exited 0 without reporting a training step",
    )


def test_finished_record_carries_the_run_and_the_trial():
    record = finished([], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""))
    assert (record.run_id, record.hardware, record.workload, record.executor) == ("r", "cpu", "tiny", "local")
    assert (record.trial, record.started_at, record.finished_at, record.world_size) == (1, "t0", "t1", 2)


def test_not_run_records_have_an_explicit_status():
    from bench.results.schema import PredictionSummary

    predicted = PredictionSummary(
        estimator_version="v",
        train_bytes=1.0,
        total_bytes=2.0,
        usable_bytes=1.0,
        verdict="predicted_oom",
        margin_bytes=-1.0,
    )
    skipped = not_run_record(RUN, CELL, 2, Status.PREDICTED_OOM, "too big", "t9", prediction=predicted)
    assert (skipped.finished_at, skipped.prediction, skipped.executor) == ("t9", predicted, "none")
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
DDP_ENGAGED = {
    "world_size": 2,
    "distributed_type": "MULTI_CPU",
    "wrapper": "DistributedDataParallel",
    "trainer": "DPOTrainer",
}


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


# ---------------------------------------------------------------- every field of a record, end to end


def full_run(outcome: Outcome, reports, problems=(), steps=3, cell=None, versions=None):
    from bench.judge.mfu import MfuInputs, ModelShape
    from bench.matrix.axes import Option, Setup
    from bench.results.schema import PredictionSummary

    cell = cell or Cell(
        init="one_adapter",
        quant="none",
        backend="ddp",
        launcher="torchrun",
        options=(Option.PRECOMPUTE_REF,),
        setup=Setup.NEWCOMER,
    )
    expect = Expectation(
        world_size=2,
        warmup_steps=1,
        steps=steps,
        pairs_per_step=8,
        mfu=MfuInputs(ModelShape(matmul_params=1000, layers=2, heads=2, head_dim=4), 1.0, 16, 2, False),
        versions=versions,
        memory_budget_bytes=768 * 2**20,
        prediction=PredictionSummary(
            estimator_version="0.2.0",
            train_bytes=1.0,
            total_bytes=2.0,
            usable_bytes=3.0,
            verdict="fits",
            margin_bytes=1.0,
        ),
    )
    run = RunFacts("r", "cpu-budget", "small", "docker", emulated_from="NVIDIA H200")
    ran = Execution(outcome, list(reports), list(problems), "t0", "t1", trial=2, config_files=("a.yaml",))
    return finished_record(run, cell, expect, ran)


def kernel(rank: int, peak: int, oom_kills: int = 0, limit: int | None = 768 * 2**20):
    from bench.isolation.cgroups import RankMemory

    return RankMemory(rank=rank, limit_bytes=limit, peak_bytes=peak, oom_kills=oom_kills, version="v1")


def test_every_field_of_an_ok_record():
    reports = [trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, 0.5, 0.4])]
    reports = [r.model_copy(update={"baseline_cgroup_bytes": 60 * 2**20}) for r in reports]
    outcome = Outcome(
        exit_code=0,
        timed_out=False,
        wall_s=12.34567,
        log_tail="x" * 2999 + "ENDS",
        image="img@sha",
        rank_memory=[kernel(0, 700 * 2**20), kernel(1, 710 * 2**20)],
    )
    record = full_run(outcome, reports)
    assert (record.cell_id, record.options, record.setup) == (
        "one_adapter-none-ddp+precompute_ref+newcomer",
        ["precompute_ref"],
        "newcomer",
    )
    assert (record.executor, record.emulated_from, record.trial, record.config_files) == (
        "docker",
        "NVIDIA H200",
        2,
        ["a.yaml"],
    )
    assert (record.status, record.exit_code, record.signal, record.wall_s, record.image) == (
        Status.OK,
        0,
        None,
        12.346,
        "img@sha",
    )
    assert record.log_tail == "x" * 2996 + "ENDS"  # the last 3000 characters
    assert record.memory_budget_bytes == 768 * 2**20 and record.prediction.verdict == "fits"
    assert [(f.rank, f.kernel_peak_bytes) for f in record.rank_memory] == [(0, 700 * 2**20), (1, 710 * 2**20)]
    assert record.metrics.tokens_per_s == pytest.approx(1.0) and record.metrics.mfu is not None
    assert record.metrics.model_memory_bytes == 650 * 2**20  # largest kernel peak - its baseline
    assert record.engagement.wrapper == "DistributedDataParallel" and record.mismatches == []
    assert record.learning.reward_accuracy == 1.0 and record.learning.failures == []


def test_a_fallback_and_a_failed_learning_check_are_both_named_fallback_first():
    reports = [trained(0, [LN2 + 0.1, 0.5, 0.4]), trained(1, [LN2 + 0.1, 0.5, 0.4])]
    reports[0] = reports[0].model_copy(update={"engagement": reports[0].engagement.model_copy(update={"wrapper": "X"})})
    record = full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), reports)
    assert record.status == Status.SILENT_FALLBACK
    assert record.message == (
        "ddp requested, ran as MULTI_CPU with wrapper X; expected wrapper DistributedDataParallel"
    )
    assert record.learning.failures and record.mismatches == [record.message]
    two = [trained(0, [LN2 + 0.1, LN2 + 0.1, LN2 + 0.1]), trained(1, [LN2 + 0.1, LN2 + 0.1, LN2 + 0.1])]
    failed = full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), two)
    assert failed.status == Status.LEARNING_FAILED and len(failed.learning.failures) == 2
    assert failed.message == "; ".join(failed.learning.failures)


def test_the_lead_rank_is_the_lowest_whatever_the_order_of_the_reports():
    reports = [trained(1, [LN2, 0.5, 0.4]), trained(0, [LN2, 0.5, 0.4])]
    reports[0] = reports[0].model_copy(update={"reward_accuracies": [0.0, 0.0, 0.25]})
    record = full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), reports)
    assert (record.status, record.learning.reward_accuracy) == (Status.OK, 1.0)
    nan_on_rank_1 = [trained(1, [LN2, None, 0.4]), trained(0, [LN2, 0.5, 0.4])]
    assert full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), nan_on_rank_1).message == (
        "non-finite loss (first at step 2 on rank 1)"
    )


def test_too_few_steps_for_metrics_is_an_error_with_the_reason():
    short = [trained(0, [LN2]).model_copy(update={"step_ends": [1.0], "tokens": [1]})]
    record = full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), short, steps=1)
    assert (record.status, record.error_class) == (Status.ERROR, ErrorClass.OTHER)
    assert record.message == "only 1 steps recorded; need more than warm-up (1) + 1"


def test_a_rank_the_kernel_killed_at_its_budget_is_oom_with_rank_limit_and_peak():
    outcome = Outcome(
        exit_code=137,
        timed_out=False,
        wall_s=1,
        log_tail="",
        oom_killed=True,
        rank_memory=[kernel(0, 600 * 2**20), kernel(1, 768 * 2**20, oom_kills=1)],
    )
    record = full_run(outcome, [rank(0, 1)])
    assert (record.status, record.signal) == (Status.OOM, "SIGKILL")
    assert (
        record.message == "rank 1 was OOM-killed by the kernel at its memory budget of 0.75 GiB (cgroup peak 0.75 GiB)"
    )
    unknown = Outcome(
        exit_code=137,
        timed_out=False,
        wall_s=1,
        log_tail="",
        oom_killed=True,
        rank_memory=[kernel(0, None, oom_kills=1, limit=None), kernel(1, 2**30, oom_kills=1, limit=None)],
    )
    assert full_run(unknown, []).message == (
        "rank 0 was OOM-killed by the kernel at its memory budget of its limit; "
        "rank 1 was OOM-killed by the kernel at its memory budget of its limit (cgroup peak 1.00 GiB)"
    )
    container = Outcome(exit_code=137, timed_out=False, wall_s=1, log_tail="", oom_killed=True)
    assert full_run(container, []).message == "killed by the memory limit (OOMKilled)"


def test_each_way_a_launch_can_fail_is_a_failure():
    clean = dict(exit_code=0, timed_out=False, wall_s=1, log_tail="")
    reports = [trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, 0.5, 0.4])]
    assert full_run(Outcome(**clean), reports).status == Status.OK
    assert full_run(Outcome(**(clean | {"timed_out": True})), reports).status == Status.TIMEOUT
    assert full_run(Outcome(**(clean | {"oom_killed": True})), reports).status == Status.OOM
    assert full_run(Outcome(**(clean | {"exit_code": 1})), reports).status == Status.ERROR
    problem = full_run(Outcome(**clean), reports, problems=["rank1.json: not valid JSON"])
    assert (problem.status, problem.message) == (
        Status.ERROR,
        "rank1.json: not valid JSON (after every rank finished its training steps)",
    )


def test_a_failure_before_the_last_step_does_not_say_after():
    record = full_run(Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail="boom"), [rank(0, 2), rank(1, 3)])
    assert record.message == "boom"
    assert full_run(Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail="boom"), []).message == "boom"


def test_the_rank_error_carries_its_traceback_to_the_classifier():
    # the class comes from the traceback, the message from its last exception line
    report = rank(0, 1, "worker failed").model_copy(update={"traceback_tail": "ValueError: bad config"})
    record = full_run(Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail=""), [report])
    assert (record.error_class, record.message) == (ErrorClass.CONFIG, "ValueError: bad config")


def test_known_issues_match_within_the_installed_versions():
    from bench.matrix.axes import Option

    cell = Cell(
        init="one_adapter", quant="none", backend="zero2", launcher="deepspeed", options=(Option.PRECOMPUTE_REF,)
    )
    text = "RuntimeError: 'weight' must be 2-D"
    failed = Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail="")
    old = full_run(failed, [rank(0, 1, text)], cell=cell, versions={"trl": "1.8.0"})
    new = full_run(failed, [rank(0, 1, text)], cell=cell, versions={"trl": "1.16.0"})
    assert old.known_issue == "https://github.com/huggingface/trl/pull/6403" and old.known_issue_note
    assert (new.known_issue, new.known_issue_note) == (None, None)


def test_a_rank_error_without_a_traceback_and_an_exit_by_signal():
    no_traceback = full_run(Outcome(exit_code=1, timed_out=False, wall_s=1, log_tail=""), [rank(0, 1, "worker failed")])
    assert no_traceback.message == "worker failed"
    segfault = full_run(Outcome(exit_code=-11, timed_out=False, wall_s=1, log_tail=""), [])
    assert (segfault.error_class, segfault.message) == (ErrorClass.CRASH, "a rank was killed by SIGSEGV (exit -11)")


def test_a_reward_model_is_judged_by_the_lead_ranks_pairwise_accuracy():
    """The reward model's check is its ranking after training, which the lead rank measures (its loss need not
    fall): the record carries the method, and the accuracy and pair count reach the learning check."""
    from bench.results.schema import Engagement

    cell = Cell(method="reward", init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
    engaged = Engagement(**(DDP_ENGAGED | {"trainer": "RewardTrainer"}), adapters=["default"])
    flat = [LN2, LN2, LN2]
    lead = trained(0, flat).model_copy(update={"engagement": engaged, "pair_accuracy": 0.9, "pairs_evaluated": 128})
    expect = Expectation(world_size=2, warmup_steps=1, steps=3, pairs_per_step=8)
    outcome = Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="")
    record = finished_record(RUN, cell, expect, Execution(outcome, [lead, trained(1, flat)], [], "t0", "t1"))
    assert (record.method, record.status, record.message) == ("reward", Status.OK, "")
    assert (record.learning.pair_accuracy, record.learning.pairs_evaluated) == (0.9, 128)


def test_a_timeout_record_names_the_limit_the_cell_ran_under():
    expect = Expectation(world_size=2, warmup_steps=1, steps=3, pairs_per_step=8, timeout_s=90)
    outcome = Outcome(exit_code=-9, timed_out=True, wall_s=95, log_tail="")
    record = finished_record(RUN, CELL, expect, Execution(outcome, [rank(0, steps=1)], [], "t0", "t1"))
    assert (record.status, record.message) == (Status.TIMEOUT, "cell exceeded its time limit of 90 s and was killed")


@pytest.mark.parametrize(
    ("forked", "expected"),
    [((True, True), ProcessStart.FORKED), ((False, False), ProcessStart.FRESH), ((True, False), ProcessStart.MIXED)],
)
def test_the_record_says_how_its_ranks_started(forked, expected):
    reports = [trained(r, [LN2, 0.5, 0.4]).model_copy(update={"forked": f}) for r, f in enumerate(forked)]
    assert clean_exit(reports).process_start == expected


def test_a_cell_without_a_rank_report_says_nothing_of_how_it_started():
    record = finished([], Outcome(exit_code=137, timed_out=False, wall_s=1, log_tail=""))
    assert record.process_start is None


def test_an_online_method_is_judged_by_the_lead_ranks_sampled_rewards():
    """GRPO's check is its sampled reward (its loss has no fall to watch): the lead rank's rewards, and each reward
    function's part of them, reach the learning check and the record."""
    from bench.results.schema import Engagement

    cell = Cell(method="grpo", init="one_adapter", quant="none", backend="ddp", launcher="torchrun")
    engaged = Engagement(**(DDP_ENGAGED | {"trainer": "GRPOTrainer"}), adapters=["default"])
    rewards = [0.1, 0.1, 0.1, 0.9, 0.9, 0.9]
    parts = {"rule": rewards}
    lead = trained(0, [0.0] * 3).model_copy(
        update={"engagement": engaged, "sampled_rewards": rewards, "reward_parts": parts}
    )
    expect = Expectation(world_size=2, warmup_steps=1, steps=3, pairs_per_step=8)
    outcome = Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="")
    record = finished_record(RUN, cell, expect, Execution(outcome, [lead, trained(1, [0.0] * 3)], [], "t0", "t1"))
    assert (record.method, record.status, record.message) == ("grpo", Status.OK, "")
    assert (record.learning.rewards, record.learning.reward_parts) == (rewards, parts)
    flat = lead.model_copy(update={"sampled_rewards": [0.5] * 6})
    record = finished_record(RUN, cell, expect, Execution(outcome, [flat, trained(1, [0.0] * 3)], [], "t0", "t1"))
    assert record.status == Status.LEARNING_FAILED and record.message.startswith("reward did not rise")


STALL = "rank 1 made no progress for 12 s after step 2 (progress watchdog limit 8 s); rank 0 waits inside step 3"


def test_a_cell_the_progress_watchdog_stopped_is_a_hang_with_its_reason():
    outcome = Outcome(exit_code=-15, timed_out=False, wall_s=30, log_tail="", stalled=STALL)
    record = finished([rank(0, steps=2), rank(1, steps=2)], outcome)
    assert (record.status, record.error_class, record.message) == (Status.HANG, None, STALL)


# ---------------------------------------------------------------- the harness failed, not the cell


def test_a_trial_the_harness_spoiled_is_a_harness_record_whatever_its_ranks_left():
    """The fork server died mid-cell and its forked ranks with it: the launcher reports killed ranks, but the record
    blames the harness, with none of the cell's error classes and none of its figures."""
    from bench.executors.base import HarnessFault

    fault = HarnessFault("the fork server (pid 7) ended (killed by SIGKILL) while the cell ran", retry=True)
    killed = Outcome(exit_code=-9, timed_out=False, wall_s=1, log_tail=TEARDOWN_ABORT, harness_fault=fault)
    record = finished([rank(0), rank(1)], killed)
    assert (record.status, record.error_class, record.metrics) == (Status.HARNESS, None, None)
    assert record.message == record.harness_fault == fault.what
    assert (record.exit_code, record.signal) == (-9, "SIGKILL")  # what happened to the launcher, as it was
    # the same outcome without the fault is the cell's crash; a fault the harness recovered from blames nothing
    assert finished([rank(0), rank(1)], replace_fault(killed, None)).status == Status.ERROR
    recovered = replace_fault(killed, HarnessFault(fault.what, spoiled=False))
    assert (finished([rank(0), rank(1)], recovered).status, finished([], recovered).harness_fault) == (
        Status.ERROR,
        fault.what,
    )


def replace_fault(outcome: Outcome, fault) -> Outcome:
    from dataclasses import replace

    return replace(outcome, harness_fault=fault)


def test_a_trial_the_harness_recovered_keeps_its_own_status_and_names_the_fault():
    """A stopped stand-in for the launcher: the executor ended it and kept the launcher's own exit 0."""
    from bench.executors.base import HarnessFault

    fault = HarnessFault("the fork server's stand-in for the cell's launcher had not ended", spoiled=False)
    reports = [trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, 0.5, 0.4])]
    record = full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="", harness_fault=fault), reports)
    assert (record.status, record.harness_fault, record.message) == (Status.OK, fault.what, "")
    assert record.metrics is not None
    failed = finished([rank(0, 1, "ValueError: bad")], Outcome(1, False, 1, "", harness_fault=fault))
    assert (failed.status, failed.error_class, failed.harness_fault) == (Status.ERROR, ErrorClass.CONFIG, fault.what)
    assert full_run(Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail=""), reports).harness_fault is None


def test_a_harness_fault_is_masked_like_every_message(monkeypatch):
    from bench.executors.base import HarnessFault

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEdpoBENCHtoken0123456789abcdef")
    fault = HarnessFault("server said hf_FAKEdpoBENCHtoken0123456789abcdef", spoiled=False)
    record = finished([], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="", harness_fault=fault))
    assert "hf_FAKE" not in (record.harness_fault or "x") and record.harness_fault.startswith("server said ")
    spoiled = finished(
        [], Outcome(exit_code=0, timed_out=False, wall_s=1, log_tail="", harness_fault=HarnessFault(fault.what))
    )
    assert "hf_FAKE" not in spoiled.message + (spoiled.harness_fault or "")


def test_a_re_run_once_names_the_first_try_and_keeps_the_second_try_s_own_record():
    from bench.judge.record import retried

    first = finished([], Outcome(exit_code=-9, timed_out=False, wall_s=1, log_tail="")).model_copy(
        update={"status": Status.HARNESS, "harness_fault": "the fork server died"}
    )
    second = clean_exit([trained(0, [LN2, 0.5, 0.4]), trained(1, [LN2, 0.5, 0.4])])
    again = retried(first, second)
    assert again.harness_fault == "first try: the fork server died; re-run once"
    assert (again.status, again.metrics, again.message) == (Status.OK, second.metrics, "")
    restarted = second.model_copy(update={"harness_fault": "the fork server had ended before this cell: restarted"})
    assert retried(first, restarted).harness_fault == (
        "first try: the fork server died; re-run once; then: the fork server had ended before this cell: restarted"
    )


def test_the_record_splits_its_wall_from_the_launchers_start_to_its_end():
    # the launcher started at 100.0 and ended at 104.0, 4.5 s of wall: 0.5 s outside its life
    phases = {"process_start": 100.5, "main_start": 100.75, "imported": 101.5, "finished": 103.0}
    reports = [trained(r, [LN2, 0.5, 0.4]).model_copy(update={"phases": phases}) for r in (0, 1)]
    outcome = Outcome(exit_code=0, timed_out=False, wall_s=4.5, log_tail="", launched_at=100.0, ended_at=104.0)
    record = finished_record(RUN, CELL, Expectation(2, 1, 3, 8), Execution(outcome, reports, [], "t0", "t1"))
    assert record.phases == {
        "launch": 0.5,
        "interpreter": 0.25,
        "imports": 0.75,
        "finish": 1.5,
        "exit": 1.0,
        "unaccounted": 0.5,
    }
