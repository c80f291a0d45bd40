"""The estimator in a run: every cell's prediction for its record, and which cells are predicted to run out of
memory by a clear margin (recorded `predicted_oom`, not run, unless the run says --run-predicted-oom)."""

import sys
from collections.abc import Callable

from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile, Workload
from bench.results.schema import PredictionSummary
from bench.units import GiB

Predictor = Callable[[Cell], PredictionSummary | None]


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
        range_low_bytes=prediction.range_low_bytes,
        range_high_bytes=prediction.range_high_bytes,
        terms=prediction.terms,
    )


def predictor(profile: HardwareProfile, workload: Workload) -> Predictor:
    """predict(cell) for this run; an estimator failure (e.g. a hub model whose config cannot be read offline)
    leaves the cell without a prediction, says so once, and never stops the run."""
    from bench.estimate.predict import predict_cell

    warned = []

    def predict(cell: Cell) -> PredictionSummary | None:
        try:
            return summary_of(predict_cell(cell, profile, workload))
        except Exception as exc:  # the estimator is advisory: the cell still runs
            if not warned:
                warned.append(exc)
                print(f"warning: no memory prediction for workload {workload.name}: {exc}", file=sys.stderr)
            return None

    return predict


def clearly_out_of_memory(summary: PredictionSummary | None) -> bool:
    """A `predicted_oom` verdict: the whole range of the prediction (bench/estimate/uncertainty.py) is above the
    usable memory. A `tight` cell runs."""
    return summary is not None and summary.verdict == "predicted_oom"


def reason(summary: PredictionSummary) -> str:
    assert summary.total_bytes is not None and summary.usable_bytes is not None
    over = summary.total_bytes / summary.usable_bytes - 1
    low = "" if summary.range_low_bytes is None else f", at least {summary.range_low_bytes / GiB:.2f} GiB"
    return (
        f"predicted to need {summary.total_bytes / GiB:.2f} GiB per device{low}, {summary.usable_bytes / GiB:.2f} "
        f"GiB usable ({over:+.0%}; estimator {summary.estimator_version}); not run: --run-predicted-oom runs it"
    )
