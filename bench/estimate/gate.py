"""The estimator in a run: every cell's prediction for its record, and which cells are predicted to run out of
memory by a clear margin (verdict `oom` and 20 % over: recorded `predicted_oom`, not run, unless the run says
--run-predicted-oom)."""

import sys
from collections.abc import Callable

from bench.matrix.plan import Plan, plan_for
from bench.matrix.profiles import HardwareProfile, Workload
from bench.results.cpu_features import CpuFeatures
from bench.results.schema import PredictionSummary
from bench.units import GiB

CLEAR_MARGIN = 0.20
"""A cell is skipped only when its predicted total exceeds the usable memory by more than this fraction; closer
cells run, so a prediction error of up to CLEAR_MARGIN never skips a cell that would fit. Twice the estimator's
10 % error goal: on GPUs its constants are still priors (docs/estimator.md)."""

Predictor = Callable[[Plan], PredictionSummary | None]


def summary_of(prediction) -> PredictionSummary | None:
    if prediction.status != "predicted":
        return None
    return PredictionSummary(
        estimator_version=prediction.estimator_version,
        train_bytes=prediction.train_bytes,
        total_bytes=prediction.total_bytes,
        usable_bytes=prediction.usable_bytes,
        verdict=prediction.verdict or "unknown",
        margin_bytes=prediction.margin_bytes,
        terms=prediction.terms,
        reserved_bytes=prediction.reserved_bytes,
    )


def predictor(profile: HardwareProfile, workload: Workload, cpu: CpuFeatures | None = None) -> Predictor:
    """predict(plan) against `profile` and `workload` on a CPU with `cpu`'s features (env.json's): the plan itself
    where it is of both, else its cell planned on them (a GPU run holds predictions against the device's real
    memory). An estimator failure (e.g. a hub model whose config cannot be read offline) leaves the cell without a
    prediction, says so once, and never stops the run."""
    from bench.estimate.predict import predict as predict_plan

    warned = []

    def predict(plan: Plan) -> PredictionSummary | None:
        try:
            if plan.profile != profile or plan.workload != workload:
                plan = plan_for(plan.cell, profile, workload)
            return summary_of(predict_plan(plan, cpu=cpu))
        except Exception as exc:  # the estimator is advisory: the cell still runs
            if not warned:
                warned.append(exc)
                print(f"warning: no memory prediction for workload {workload.name}: {exc}", file=sys.stderr)
            return None

    return predict


def clearly_out_of_memory(summary: PredictionSummary | None) -> bool:
    if summary is None or summary.verdict != "oom" or not summary.usable_bytes or not summary.total_bytes:
        return False
    return summary.total_bytes > summary.usable_bytes * (1 + CLEAR_MARGIN)


def reason(summary: PredictionSummary) -> str:
    assert summary.total_bytes is not None and summary.usable_bytes is not None
    over = summary.total_bytes / summary.usable_bytes - 1
    return (
        f"predicted to need {summary.total_bytes / GiB:.2f} GiB per device, {summary.usable_bytes / GiB:.2f} GiB "
        f"usable ({over:+.0%}; estimator {summary.estimator_version}); not run: --run-predicted-oom runs it"
    )
