import pytest

from bench.judge.metrics import aggregate, percentile, slope
from bench.worker.rank_report import RankReport


def report(rank: int, step_s: float = 0.1, warm_s: float = 1.0, peak: int = 100) -> RankReport:
    ends, t = [], 0.0
    for step in range(10):
        t += warm_s if step < 3 else step_s
        ends.append(t)
    return RankReport(
        rank=rank,
        pid=1,
        hostname="h",
        step_ends=ends,
        tokens=[100 * (i + 1) for i in range(10)],
        memory_now=[1000 + 10 * i for i in range(10)],
        load_peak_bytes=peak // 2,
        train_peak_bytes=peak,
    )


def test_warmup_steps_are_excluded_from_throughput():
    metrics = aggregate([report(0)], warmup_steps=3, pairs_per_step=8)
    # steady: steps 4..10 end 0.1 s apart; 100 tokens and 8 pairs per step
    assert metrics.tokens_per_s == pytest.approx(1000.0)
    assert metrics.pairs_per_s == pytest.approx(80.0)
    assert metrics.step_time_median_s == pytest.approx(0.1)
    assert metrics.steps == 10 and metrics.tokens_total == 1000


def test_memory_is_max_over_ranks_and_growth_is_the_slope():
    metrics = aggregate([report(1, peak=300), report(0, peak=100)], warmup_steps=3, pairs_per_step=8)
    assert metrics.train_peak_bytes == 300 and metrics.load_peak_bytes == 150
    assert metrics.mem_growth_per_step_bytes == pytest.approx(10.0)


def test_too_few_steps_is_an_error():
    with pytest.raises(ValueError, match="only 10 steps recorded"):
        aggregate([report(0)], warmup_steps=9, pairs_per_step=8)


def test_percentile_and_slope():
    assert percentile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)
    assert slope([5.0, 5.0, 5.0]) == 0.0
    assert slope([1.0, 2.0]) is None


def test_model_memory_is_peak_minus_baseline_of_the_same_kind_max_over_ranks():
    from bench.judge.metrics import model_memory, rank_memory

    class Kernel:
        def __init__(self, rank, peak, kills=0):
            self.rank, self.limit_bytes, self.peak_bytes, self.oom_kills = rank, 1000, peak, kills

    r0 = report(0, peak=900).model_copy(update={"baseline_rss_bytes": 500, "baseline_cgroup_bytes": 50})
    r1 = report(1, peak=800).model_copy(update={"baseline_rss_bytes": 300, "baseline_cgroup_bytes": 60})
    # RSS only: rank 1 has the larger model memory (800 - 300), rank 0 the larger raw peak
    assert model_memory(rank_memory([r0, r1], []), [r0, r1]) == (900, 300, 500)
    # under a budget the kernel's figures are used, baseline of the same kind
    figures = rank_memory([r0, r1], [Kernel(0, 700), Kernel(1, 400)])
    assert model_memory(figures, [r0, r1]) == (700, 50, 650)
    # a rank the kernel killed has no report, but keeps its cgroup figures
    killed = rank_memory([r0], [Kernel(0, 700), Kernel(1, 1000, kills=1)])
    assert [(f.rank, f.oom_killed, f.kernel_peak_bytes, f.baseline_rss_bytes) for f in killed] == [
        (0, False, 700, 500),
        (1, True, 1000, None),
    ]


def test_each_rank_keeps_its_longest_batch():
    from bench.judge.metrics import rank_memory

    # under DDP each rank reads other batches: here rank 0's longest row is 95 tokens and rank 1's 127
    r0 = report(0).model_copy(update={"batch_widths": [95, 32, 52]})
    r1 = report(1).model_copy(update={"batch_widths": [30, 127, 35]})
    older = report(2)
    assert [f.longest_batch for f in rank_memory([r0, r1, older], [])] == [95, 127, None]
