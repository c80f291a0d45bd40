"""Pure aggregation of rank reports into a cell's metrics (definitions in bench/results/schema.py Metrics)."""

import statistics
from collections.abc import Sequence

from bench.isolation.cgroups import RankMemory
from bench.results.schema import Metrics, RankMemoryFigures
from bench.worker.rank_report import RankReport


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


def rank_memory(reports: Sequence[RankReport], kernel: Sequence[RankMemory]) -> list[RankMemoryFigures]:
    """Each rank's memory figures, from its own report (baseline, RSS peak) and the kernel's cgroup (peak, limit,
    OOM kill); a rank the kernel killed has no report but still has its cgroup figures."""
    by_rank = {r.rank: r for r in reports}
    cgroup = {k.rank: k for k in kernel}
    figures = []
    for rank in sorted(set(by_rank) | set(cgroup)):
        report, k = by_rank.get(rank), cgroup.get(rank)
        rss_peaks = [v for v in (report.load_peak_bytes, report.train_peak_bytes) if v] if report else []
        if report and report.memory_kind != "rss":
            rss_peaks = [report.host_peak_rss_bytes] if report.host_peak_rss_bytes else []
        figures.append(
            RankMemoryFigures(
                rank=rank,
                baseline_rss_bytes=report.baseline_rss_bytes if report else None,
                baseline_cgroup_bytes=report.baseline_cgroup_bytes if report else None,
                peak_rss_bytes=max(rss_peaks) if rss_peaks else None,
                kernel_peak_bytes=k.peak_bytes if k else None,
                limit_bytes=k.limit_bytes if k else None,
                oom_killed=bool(k and k.oom_kills > 0),
                longest_batch=max(report.batch_widths) if report and report.batch_widths else None,
                rss_parts=dict(report.rss_parts) if report else {},
            )
        )
    return figures


def model_memory(
    figures: Sequence[RankMemoryFigures], reports: Sequence[RankReport]
) -> tuple[int | None, int | None, int | None]:
    """(peak, baseline, model memory): the largest raw peak over ranks, and the baseline and peak - baseline of
    the rank whose model memory is largest.

    Peak and baseline are of one kind: the kernel's cgroup figures under a memory budget, else RSS on CPU; on
    CUDA the peak is max allocated and the baseline 0 (the libraries allocate no device memory).
    """
    cuda = {
        r.rank: max(v for v in (r.load_peak_bytes, r.train_peak_bytes, 0) if v is not None)
        for r in reports
        if r.memory_kind != "rss"
    }
    pairs = []
    for f in figures:
        if f.rank in cuda:
            pairs.append((cuda[f.rank], 0))
        elif f.kernel_peak_bytes is not None and f.baseline_cgroup_bytes is not None:
            pairs.append((f.kernel_peak_bytes, f.baseline_cgroup_bytes))
        elif f.peak_rss_bytes is not None and f.baseline_rss_bytes is not None:
            pairs.append((f.peak_rss_bytes, f.baseline_rss_bytes))
    if not pairs:
        return None, None, None
    peak, baseline = max(pairs, key=lambda pair: pair[0] - pair[1])
    return max(p for p, _ in pairs), baseline, peak - baseline


def aggregate(
    reports: list[RankReport],
    warmup_steps: int,
    pairs_per_step: int,
    figures: Sequence[RankMemoryFigures] | None = None,
) -> Metrics:
    """Metrics of one cell. Rank 0's clock and TRL's rank-gathered token count; memory max over ranks.
    `figures`: the cell's per-rank memory (`rank_memory`), when the caller already has it; else from the reports."""
    lead = min(reports, key=lambda r: r.rank)
    ends, tokens = lead.step_ends, lead.tokens
    if len(ends) <= warmup_steps + 1:
        raise ValueError(f"only {len(ends)} steps recorded; need more than warm-up ({warmup_steps}) + 1")
    intervals = [b - a for a, b in zip(ends[warmup_steps:-1], ends[warmup_steps + 1 :], strict=True)]
    steady_time = ends[-1] - ends[warmup_steps]
    steady_tokens = tokens[-1] - tokens[warmup_steps]
    steady_steps = len(intervals)
    cpu = lead.cpu_times
    cpu_steps = [b - a for a, b in zip(cpu[warmup_steps:-1], cpu[warmup_steps + 1 :], strict=True)]
    cpu_median = statistics.median(cpu_steps) if len(cpu) == len(ends) else None  # older reports have no CPU times
    growth = [slope([float(v) for v in r.memory_now[warmup_steps:]]) for r in reports]
    growth = [g for g in growth if g is not None]

    def peak(values: list[int | None]) -> int | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    if figures is None:
        figures = rank_memory(reports, ())
    peak_bytes, baseline_bytes, model_bytes = model_memory(figures, reports)
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
        baseline_bytes=baseline_bytes,
        peak_bytes=peak_bytes,
        model_memory_bytes=model_bytes,
        cpu_s_per_step_median=cpu_median,
        step_times_s=[round(i, 6) for i in intervals],
    )
