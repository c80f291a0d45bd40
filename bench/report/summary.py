"""One cell of one run with its trials folded together: what every report shows for that cell."""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from bench.results_schema import ResultRecord, Status


@dataclass(frozen=True)
class CellSummary:
    """The newest line of each trial wins; one failing trial makes the cell fail."""

    cell_id: str
    status: str
    error_class: str | None
    message: str
    known_issue: str | None
    known_issue_note: str | None
    trials: int
    flaky: bool
    tokens_per_s: list[float]
    """Over ok trials only: a fallback's numbers are not those of the setup that was asked for."""
    train_peak_bytes: list[float]
    headline_tokens_per_s: float | None
    """What the cell shows: the median over ok trials; a cell without one shows what its failing trial measured
    (a fallback ran)."""
    headline_train_peak_bytes: float | None


def summarize(records: Iterable[ResultRecord]) -> dict[str, CellSummary]:
    """Cell id -> summary, in the order the cells first appear."""
    by_trial: dict[str, dict[int, ResultRecord]] = {}
    for record in records:
        by_trial.setdefault(record.cell_id, {})[record.trial] = record
    return {cell_id: _summary(cell_id, list(trials.values())) for cell_id, trials in by_trial.items()}


def _summary(cell_id: str, trials: list[ResultRecord]) -> CellSummary:
    ok = [r for r in trials if r.status == Status.OK and r.metrics is not None]
    failing = [r for r in trials if r.status != Status.OK]
    # A setup that works two times out of three does not "work".
    shown = failing[-1] if failing else trials[-1]
    tokens = [r.metrics.tokens_per_s for r in ok]
    peaks = [float(r.metrics.train_peak_bytes) for r in ok if r.metrics.train_peak_bytes is not None]
    headline = (median(tokens), median(peaks))
    if headline[0] is None and shown.metrics is not None:
        peak = shown.metrics.train_peak_bytes
        headline = (shown.metrics.tokens_per_s, None if peak is None else float(peak))
    return CellSummary(
        cell_id=cell_id,
        status=str(shown.status),
        error_class=str(shown.error_class) if shown.error_class else None,
        message=shown.message,
        known_issue=shown.known_issue,
        known_issue_note=shown.known_issue_note,
        trials=len(trials),
        flaky=bool(ok) and bool(failing),
        tokens_per_s=tokens,
        train_peak_bytes=peaks,
        headline_tokens_per_s=headline[0],
        headline_train_peak_bytes=headline[1],
    )


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
