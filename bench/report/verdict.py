"""Whether a throughput or memory change between two runs is real: an exact Mann–Whitney U test plus a threshold.

Method. For one cell and one metric, the per-trial values of the base and the head are two independent samples.
A change is a `regression` or an `improvement` only when both hold:

1. the two-sided Mann–Whitney U test rejects "same distribution" at `ALPHA` = 0.05, and
2. the medians differ by more than the threshold (relative to the base median).

Otherwise it is `no change`. The p-value is exact: every way of splitting the pooled trials into a base of the
same size is enumerated (ties get mid-ranks, so tied values such as identical memory peaks are handled exactly).
Above `EXACT_LIMIT` splits the normal approximation with tie and continuity corrections is used instead.

Minimum trials. With n and m trials the smallest two-sided p-value the test can give is 2 / C(n + m, n): 0.1 for
3 + 3 and 0.057 for 3 + 4, so below 4 trials per side it can never reach 0.05, whatever the data. Hence
`MIN_TRIALS` = 4 per side; fewer gives `no verdict` rather than a guess (CPU runs spread 5–30 % between trials).

Direction: throughput is better higher, memory better lower (`bigger_is_better`). Pure and deterministic.
"""

import math
import statistics
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

ALPHA = 0.05
MIN_TRIALS = 4
EXACT_LIMIT = 50_000
"""Most base/head splits enumerated for an exact p-value (C(18, 9) = 48,620: up to 9 trials per side)."""


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
    """Two-sided p-value of the Mann–Whitney U test: exact by enumeration, normal approximation when too many."""
    n, m = len(x), len(y)
    ranks2 = _doubled_midranks([*x, *y])  # doubled so that mid-ranks stay integers and comparisons exact
    centre2 = n * (n + m + 1)  # doubled expected rank sum of x
    observed = abs(sum(ranks2[:n]) - centre2)
    if math.comb(n + m, n) <= EXACT_LIMIT:
        splits = combinations(ranks2, n)
        extreme = sum(abs(sum(split) - centre2) >= observed for split in splits)
        return extreme / math.comb(n + m, n)
    return _normal_p(ranks2, n, m, observed / 2)


def _doubled_midranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks2 = [0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks2[i] = start + end + 2  # (start + 1) + (end + 1): twice the mid-rank
        start = end + 1
    return ranks2


def _normal_p(ranks2: list[int], n: int, m: int, deviation: float) -> float:
    total = n + m
    ties = {r: ranks2.count(r) for r in ranks2}
    tie_term = sum(t**3 - t for t in ties.values()) / (total * (total - 1))
    variance = n * m / 12 * (total + 1 - tie_term)
    if variance == 0:
        return 1.0
    z = max(deviation - 0.5, 0.0) / math.sqrt(variance)
    return min(1.0, math.erfc(z / math.sqrt(2)))
