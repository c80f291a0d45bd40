"""One cell of one run with its trials folded together: what every report shows for that cell."""

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bench.results.schema import Metrics, ResultRecord, Status


@dataclass(frozen=True)
class OomMemory:
    """Where an `oom` cell ran out, from its ranks' memory cgroups (rank_memory)."""

    killed_ranks: tuple[int, ...]
    """Ranks the kernel OOM-killed; empty when none was (a MemoryError or CUDA OOM raised under the budget)."""
    peak_bytes: int | None
    """The kernel's cgroup peak: of the killed ranks when any, else max over ranks; None without a cgroup."""
    limit_bytes: int | None
    """The per-rank memory budget (the cgroup's limit)."""


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
    (a fallback or a learning failure ran)."""
    headline_train_peak_bytes: float | None
    model_memory_bytes: list[float]
    """Metrics.model_memory_bytes (peak - library baseline) over ok trials that have it (older records do not)."""
    peak_bytes: list[float]
    """Metrics.peak_bytes (raw peak) over ok trials that have it."""
    headline_model_memory_bytes: float | None
    headline_peak_bytes: float | None
    memory_budget_bytes: int | None
    """The shown trial's per-rank memory budget (kernel memory cgroup); None: no budget."""
    oom: OomMemory | None
    """For an `oom` cell with memory figures: who ran out, at what, under which budget."""
    emulated_from: str | None = None
    """The real GPU of an emulated trial (--emulate): its throughput is that GPU's, not the profile's."""


def summarize(records: Iterable[ResultRecord]) -> dict[str, CellSummary]:
    """Cell id -> summary, in the order the cells first appear."""
    by_trial: dict[str, dict[int, ResultRecord]] = {}
    for record in records:
        by_trial.setdefault(record.cell_id, {})[record.trial] = record
    return {cell_id: _summary(cell_id, list(trials.values())) for cell_id, trials in by_trial.items()}


def _values(records: list[ResultRecord], field: Callable[[Metrics], float | None]) -> list[float]:
    return [float(v) for r in records if r.metrics is not None and (v := field(r.metrics)) is not None]


def _summary(cell_id: str, trials: list[ResultRecord]) -> CellSummary:
    ok = [r for r in trials if r.status == Status.OK and r.metrics is not None]
    # a trial the harness spoiled says nothing of the cell: shown only where no trial says more
    judged = [r for r in trials if r.status != Status.HARNESS] or trials
    failing = [r for r in judged if r.status != Status.OK]
    # A setup that works two times out of three does not "work".
    shown = failing[-1] if failing else judged[-1]
    tokens = [r.metrics.tokens_per_s for r in ok]
    peaks = _values(ok, lambda m: m.train_peak_bytes)
    models = _values(ok, lambda m: m.model_memory_bytes)
    raw_peaks = _values(ok, lambda m: m.peak_bytes)
    # headline: medians over ok trials; without one, what the shown (failing) trial measured, if it ran
    headline = [median(tokens), median(peaks), median(models), median(raw_peaks)]
    if not ok and shown.metrics is not None:
        m = shown.metrics
        memory = (m.train_peak_bytes, m.model_memory_bytes, m.peak_bytes)
        headline = [m.tokens_per_s, *(None if v is None else float(v) for v in memory)]
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
        model_memory_bytes=models,
        peak_bytes=raw_peaks,
        headline_model_memory_bytes=headline[2],
        headline_peak_bytes=headline[3],
        memory_budget_bytes=shown.memory_budget_bytes,
        oom=oom_memory(shown),
        emulated_from=shown.emulated_from,
    )


def oom_memory(record: ResultRecord) -> OomMemory | None:
    """An `oom` record's memory figures; None for other statuses and for an OOM without budget or cgroup figures
    (a CUDA OOM, a host MemoryError under RLIMIT_AS)."""
    if record.status != Status.OOM:
        return None
    figures = record.rank_memory
    killed = [f for f in figures if f.oom_killed]
    peaks = [f.kernel_peak_bytes for f in (killed or figures) if f.kernel_peak_bytes is not None]
    limits = [f.limit_bytes for f in (killed or figures) if f.limit_bytes is not None]
    limit = max(limits) if limits else record.memory_budget_bytes
    if not killed and not peaks and limit is None:
        return None
    return OomMemory(tuple(f.rank for f in killed), max(peaks) if peaks else None, limit)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
