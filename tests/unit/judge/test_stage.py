from bench.executors.base import Outcome
from bench.judge.stage import not_run_stage, step_stage, training_stage
from bench.results.schema import Metrics, ResultRecord, StageRecord, Status
from bench.worker.pipeline_step import StepReport

BASE = StageRecord(
    run_id="r",
    pipeline="p",
    index=2,
    stage="merge_sft",
    kind="merge",
    hardware="cpu",
    workload="tiny",
    status=Status.NOT_RUN,
)


def test_a_clean_step_is_ok_with_its_peak_and_checks():
    report = StepReport(pid=1, peak_bytes=5 * 2**20, checks={"merge_error": 1e-7})
    ok = step_stage(BASE, Outcome(exit_code=0, timed_out=False, wall_s=3.2, log_tail="noise"), report, "/m")
    assert (ok.status, ok.peak_bytes, ok.checks, ok.output, ok.log_tail) == (
        Status.OK,
        5 * 2**20,
        report.checks,
        "/m",
        "",
    )


def test_a_failed_step_keeps_its_real_error_and_hands_nothing_on():
    report = StepReport(pid=1, error="RuntimeError: generated 7 new tokens, asked for 32", traceback_tail="tb")
    failed = step_stage(BASE, Outcome(exit_code=1, timed_out=False, wall_s=3.0, log_tail="tb"), report, "/m")
    assert failed.status == Status.ERROR and failed.output is None
    assert failed.message == "RuntimeError: generated 7 new tokens, asked for 32"
    silent = step_stage(BASE, Outcome(exit_code=0, timed_out=False, wall_s=1.0, log_tail=""), None, "/m")
    assert silent.status == Status.ERROR and "without writing its report" in silent.message
    late = step_stage(BASE, Outcome(exit_code=None, timed_out=True, wall_s=120.0, log_tail=""), None, "/m")
    assert late.status == Status.TIMEOUT


def test_a_training_stage_is_its_cells_record_and_a_later_stage_names_what_stopped_the_chain():
    cell = ResultRecord(
        run_id="r",
        cell_id="one_adapter-none-single",
        init="one_adapter",
        quant="none",
        backend="single",
        launcher="python",
        hardware="cpu",
        workload="tiny",
        status=Status.LEARNING_FAILED,
        message="loss did not fall: 0.6931 at step 1, 0.6916 over the last 7 of 30 steps",
        metrics=Metrics(
            tokens_per_s=1.0,
            pairs_per_s=1.0,
            step_time_median_s=1.0,
            step_time_p90_s=1.0,
            steps=3,
            warmup_steps=1,
            tokens_total=3,
            memory_kind="rss",
            load_peak_bytes=None,
            train_peak_bytes=7,
            peak_bytes=9,
            mem_growth_per_step_bytes=None,
            load_s=None,
        ),
    )
    dpo = training_stage(BASE.model_copy(update={"index": 3, "stage": "dpo", "kind": "train"}), cell, "/adapter")
    assert dpo.status == Status.LEARNING_FAILED and dpo.output is None and dpo.peak_bytes == 9 and dpo.record == cell
    later = not_run_stage(BASE.model_copy(update={"index": 4, "stage": "merge_dpo"}), dpo, "t")
    assert later.status == Status.NOT_RUN
    assert later.message == (
        "not run: stage 3 (dpo) ended learning_failed: loss did not fall: 0.6931 at step 1, 0.6916 over the last 7 "
        "of 30 steps"
    )
