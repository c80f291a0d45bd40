"""Whether a throughput or memory change between two runs is real: an exact Mann–Whitney U test plus a threshold.

A cell's per-trial values of base and head are two independent samples; a change is a `regression` or an
`improvement` only when the two-sided test rejects "same distribution" at `ALPHA` and the medians differ by more than
the threshold; otherwise `no change`. The p-value is exact up to `EXACT_LIMIT` splits of the pooled trials (with ties,
by enumerating every split: a permutation test), above it the normal approximation with tie and continuity
corrections. With n and m trials the smallest p-value is 2 / C(n + m, n): below 4 trials per side it can never reach
0.05, hence `MIN_TRIALS` = 4 (fewer gives `no verdict`). Throughput is better higher, memory lower
(`bigger_is_better`). Pure and deterministic."""

import math
import statistics
from dataclasses import dataclass
from enum import StrEnum

from scipy import stats

ALPHA = 0.05
MIN_TRIALS = 4
EXACT_LIMIT = 50_000
"""Most base/head splits for an exact p-value (C(18, 9) = 48,620: up to 9 trials per side)."""


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no_change"
    NO_VERDICT = "no_verdict"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    change: float
    """(head median - base median) / base median."""
    p_value: float | None
    """Two-sided Mann–Whitney U p-value; None when there were too few trials to test."""


def decide(base: list[float], head: list[float], threshold: float, bigger_is_better: bool) -> Decision:
    """The verdict on head vs base; both need at least one trial and the base median must not be 0."""
    b = statistics.median(base)
    change = (statistics.median(head) - b) / b
    if min(len(base), len(head)) < MIN_TRIALS:
        return Decision(Verdict.NO_VERDICT, change, None)
    p = mann_whitney_p(base, head)
    if p > ALPHA or abs(change) <= threshold:
        return Decision(Verdict.NO_CHANGE, change, p)
    better = (change > 0) == bigger_is_better
    return Decision(Verdict.IMPROVEMENT if better else Verdict.REGRESSION, change, p)


def no_verdict_label(trials: int) -> str:
    return f"no verdict ({trials} trial{'' if trials == 1 else 's'})"


def mann_whitney_p(x: list[float], y: list[float]) -> float:
    """Two-sided Mann–Whitney U p-value (both samples need two or more values): exact up to `EXACT_LIMIT` splits,
    the normal approximation above."""
    if min(len(x), len(y)) < 2:
        raise ValueError(f"Mann–Whitney U needs two or more values per side, got {len(x)} and {len(y)}")
    method: str | stats.PermutationMethod = "asymptotic"
    if math.comb(len(x) + len(y), len(x)) <= EXACT_LIMIT:
        ties = len(set(x) | set(y)) < len(x) + len(y)
        method = stats.PermutationMethod(n_resamples=math.inf) if ties else "exact"
    return float(stats.mannwhitneyu(x, y, alternative="two-sided", method=method).pvalue)
