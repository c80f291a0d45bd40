"""Pure aggregation of rank reports into a cell's metrics (definitions in results_schema.Metrics)."""

import statistics

from bench.rank_report import RankReport
from bench.results_schema import Metrics


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def slope(values: list[float]) -> float | None:
    """Least-squares slope per step; None with fewer than 3 points."""
    n = len(values)
    if n < 3:
        return None
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


def aggregate(reports: list[RankReport], warmup_steps: int, pairs_per_step: int) -> Metrics:
    """Metrics of one cell. Rank 0's clock and TRL's rank-gathered token count; memory max over ranks."""
    lead = min(reports, key=lambda r: r.rank)
    ends, tokens = lead.step_ends, lead.tokens
    if len(ends) <= warmup_steps + 1:
        raise ValueError(f"only {len(ends)} steps recorded; need more than warm-up ({warmup_steps}) + 1")
    intervals = [b - a for a, b in zip(ends[warmup_steps:-1], ends[warmup_steps + 1 :], strict=True)]
    steady_time = ends[-1] - ends[warmup_steps]
    steady_tokens = tokens[-1] - tokens[warmup_steps]
    steady_steps = len(intervals)
    growth = [slope([float(v) for v in r.memory_now[warmup_steps:]]) for r in reports]
    growth = [g for g in growth if g is not None]

    def peak(values: list[int | None]) -> int | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    return Metrics(
        tokens_per_s=steady_tokens / steady_time,
        pairs_per_s=steady_steps * pairs_per_step / steady_time,
        step_time_median_s=statistics.median(intervals),
        step_time_p90_s=percentile(intervals, 0.9),
        steps=len(ends),
        warmup_steps=warmup_steps,
        tokens_total=tokens[-1],
        memory_kind=lead.memory_kind,
        load_peak_bytes=peak([r.load_peak_bytes for r in reports]),
        train_peak_bytes=peak([r.train_peak_bytes for r in reports]),
        cuda_reserved_peak_bytes=peak([r.cuda_reserved_peak_bytes for r in reports]),
        host_peak_rss_bytes=peak([r.host_peak_rss_bytes for r in reports]),
        nvml_peak_bytes=peak([r.nvml_peak_bytes for r in reports]),
        mem_growth_per_step_bytes=max(growth, key=abs) if growth else None,
        load_s=max((r.load_s for r in reports if r.load_s is not None), default=None),
    )
