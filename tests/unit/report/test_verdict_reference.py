"""verdict.mann_whitney_p (scipy.stats.mannwhitneyu) against the hand-written test it replaced, kept here verbatim as
the reference (`reference_p`), on every pair of recorded trial series and on generated samples.

Where the two differ, why, and by how much (each is asserted below):

- No ties, exact (C(n + m, n) <= EXACT_LIMIT). The p-value depends on n, m and U only, so every case is checked.
  scipy's exact distribution of U adds floating-point probabilities where the reference divided one integer count:
  about a quarter of the cases differ, by at most 2 ulp, never across ALPHA.
- Ties, exact. scipy's exact distribution of U has no ties ("no correction is made for ties", its documentation),
  so with ties it is given `PermutationMethod`, as that documentation advises: the same null as the reference,
  every split of the pooled mid-ranks. The two-sided p-value differs in definition: scipy doubles the smaller tail
  (capped at 1), the reference counted the splits at least as far from the centre on either side. Equal to the bit
  where the split sums are symmetric around the centre; otherwise they differ by P(R <= r) - P(R >= 2c - r) for an
  observed rank sum r below the centre c (mirrored above it), e.g. [1, 1, 1] vs [1, 2]: 0.8 vs 0.4.
- Normal approximation (above EXACT_LIMIT). The same z (tie and continuity corrections); scipy computes
  2 * ndtr(-z), the reference erfc(z / sqrt 2). The rounding of the argument is amplified by erfc's condition number
  2x^2 (x = z / sqrt 2): |new - old| <= 4 eps (1 + 2x^2) old.
"""

import json
import math
from collections import Counter
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from bench.report.compare import cpu_per_step, load_run
from bench.report.summary import summarize
from bench.report.verdict import ALPHA, EXACT_LIMIT, mann_whitney_p
from bench.results.runs import run_dirs
from bench.results.tracked import tracked_results

EPS = 2.0**-52

# ---------------------------------------------------------------- the replaced implementation (bench/report/verdict.py
# before scipy), verbatim


def reference_p(x: list[float], y: list[float]) -> float:
    n, m = len(x), len(y)
    ranks2 = _doubled_midranks([*x, *y])
    centre2 = n * (n + m + 1)
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
            ranks2[i] = start + end + 2
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


# ---------------------------------------------------------------- the documented relation


def split_sums(x: list[float], y: list[float]) -> tuple[list[int], int, int]:
    """The reference's enumeration: the doubled rank sum of every split, the observed one, the doubled centre."""
    n, m = len(x), len(y)
    ranks2 = _doubled_midranks([*x, *y])
    return [sum(split) for split in combinations(ranks2, n)], sum(ranks2[:n]), n * (n + m + 1)


def doubled_smaller_tail(x: list[float], y: list[float]) -> tuple[float, bool]:
    """Two-sided p as scipy's permutation test defines it, from the reference's own enumeration; and whether the
    split sums are symmetric around the centre (where both definitions agree)."""
    sums, observed, centre = split_sums(x, y)
    low, high = sum(s <= observed for s in sums), sum(s >= observed for s in sums)
    symmetric = sorted(sums) == sorted(2 * centre - s for s in sums)
    return min(1.0, min(low / len(sums), high / len(sums)) * 2), symmetric


def has_ties(x: list[float], y: list[float]) -> bool:
    return len(set(x) | set(y)) < len(x) + len(y)


def check(x: list[float], y: list[float]) -> str:
    return relation(x, y, mann_whitney_p(x, y), reference_p(x, y))


def relation(x: list[float], y: list[float], new: float, old: float) -> str:
    """Assert the relation the module docstring states between the new and the reference p-value; return which
    case applied."""
    assert 0.0 <= new <= 1.0
    if math.comb(len(x) + len(y), len(x)) > EXACT_LIMIT:
        arg = float(special.erfcinv(old))
        assert abs(new - old) <= 4 * EPS * (1 + 2 * arg**2) * old, (x, y, new, old)
        return "normal"
    if not has_ties(x, y):
        assert abs(new - old) <= 2 * math.ulp(old), (x, y, new, old)
        assert (new <= ALPHA) == (old <= ALPHA)
        return "exact"
    doubled, symmetric = doubled_smaller_tail(x, y)
    assert new == doubled, (x, y, new, doubled)
    if symmetric:
        assert new == old, (x, y, new, old)
    return "ties"


# ---------------------------------------------------------------- every untied case, enumerated


def untied_samples(n: int, m: int) -> Iterator[tuple[list[float], list[float]]]:
    """One sample pair for every value of U (0 .. n*m): x takes the ranks 0..n-1 moved up by U in total."""
    for u in range(n * m + 1):
        ranks, left = list(range(n)), u
        for i in reversed(range(n)):
            ranks[i] += min(left, m)
            left -= min(left, m)
        taken = set(ranks)
        yield [float(r) for r in ranks], [float(r) for r in range(n + m) if r not in taken]


def test_without_ties_every_exact_case_is_within_two_ulp_of_the_reference():
    """Every n <= m <= 9 (both sides at most 9 trials, where EXACT_LIMIT allows an exact p-value) and every U. The
    reference's count for each U comes from one enumeration per size (its split sums), held to reference_p itself
    at the two ends and the middle of U."""
    cases = differ = 0
    for n in range(2, 10):
        for m in range(n, 10):
            sums, _, centre = split_sums([float(i) for i in range(n)], [float(i) for i in range(n, n + m)])
            distances = Counter(abs(s - centre) for s in sums)
            for u, (x, y) in enumerate(untied_samples(n, m)):
                observed = abs(2 * (u + n * (n + 1) // 2) - centre)  # x's doubled rank sum minus the centre
                old = sum(count for d, count in distances.items() if d >= observed) / len(sums)
                if u in (0, n * m // 2, n * m):
                    assert old == reference_p(x, y)
                new = mann_whitney_p(x, y)
                assert relation(x, y, new, old) == "exact"
                cases += 1
                differ += new != old
    assert cases == 1146 and 0 < differ < cases / 2, (cases, differ)  # the docstring's "about a quarter"


def test_ties_double_the_smaller_tail_where_the_reference_counted_both_sides():
    # ranks 2.5, 2.5, 2.5 | 2.5, 5: rank sum 7.5 in 4 of 10 splits, 10 in the other 6; the centre is 9
    assert reference_p([1, 1, 1], [1, 2]) == pytest.approx(4 / 10)
    assert mann_whitney_p([1, 1, 1], [1, 2]) == pytest.approx(2 * 4 / 10)
    # symmetric split sums: both definitions agree, to the bit
    assert mann_whitney_p([1, 2, 2], [2, 3, 3]) == reference_p([1, 2, 2], [2, 3, 3]) == pytest.approx(6 / 20)
    assert check([500.0, 500.0, 501.0, 500.0], [600.0, 600.0, 601.0, 600.0]) == "ties"


def test_one_value_on_a_side_is_refused():
    with pytest.raises(ValueError, match="two or more values per side"):
        mann_whitney_p([1.0], [2.0, 3.0, 4.0])


# ---------------------------------------------------------------- generated samples

values = st.integers(min_value=0, max_value=6).map(float)  # few distinct values: ties are common


@settings(max_examples=60, deadline=None)
@given(st.lists(values, min_size=2, max_size=6), st.lists(values, min_size=2, max_size=6))
def test_small_samples_with_ties(x, y):
    check(x, y)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=4, max_size=18, unique=True), st.data())
def test_small_samples_without_ties(pooled, data):
    n = data.draw(st.integers(2, len(pooled) - 2))
    assert check(pooled[:n], pooled[n:]) in ("exact", "normal")


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 40).map(float), min_size=10, max_size=40),
    st.lists(st.floats(0, 40, allow_nan=False), min_size=10, max_size=40),
)
def test_large_samples_take_the_normal_approximation(x, y):
    assert check(x, y) == "normal"


# ---------------------------------------------------------------- recorded trials

Series = dict[tuple[str, str], list[list[float]]]
"""(hardware folder, metric) -> trial series."""


def recorded_series() -> Series:
    """From every committed run, read as compare reads it (load_run, summarize, cpu_per_step): per cell, its ok
    trials in every run of its hardware folder (committed runs have one trial per cell); per run, every ok cell."""
    series: Series = {}
    for hw in sorted(p for p in tracked_results().iterdir() if p.is_dir()):
        per_cell: dict[tuple[str, str], list[float]] = {}
        for run_dir in run_dirs(hw):
            per_run: dict[str, list[float]] = {}
            for metric, cell_id, trial_values in run_values(run_dir):
                per_cell.setdefault((metric, cell_id), []).extend(trial_values)
                per_run.setdefault(metric, []).extend(trial_values)
            for metric, trial_values in per_run.items():
                series.setdefault((hw.name, f"{metric}, per run"), []).append(trial_values)
        for (metric, _), trial_values in per_cell.items():
            series.setdefault((hw.name, f"{metric}, per cell"), []).append(trial_values)
    return {key: [s for s in found if len(s) >= 2] for key, found in series.items()}


def run_values(run_dir: Path) -> Iterator[tuple[str, str, list[float]]]:
    """(metric, cell id, values of its ok trials) for every cell of the run and every metric compare judges."""
    records = load_run(run_dir).records
    cpu = cpu_per_step(records)
    for cell_id, cell in summarize(records).items():
        yield "tokens_per_s", cell_id, cell.tokens_per_s
        yield "model_memory_bytes", cell_id, cell.model_memory_bytes
        yield "train_peak_bytes", cell_id, cell.train_peak_bytes
        yield "cpu_s_per_step", cell_id, cpu.get(cell_id, [])


def test_every_pair_of_recorded_trial_series():
    """Both p-values are functions of the split of the pooled mid-ranks: pairs that split them alike are checked
    once."""
    checked: dict[tuple[tuple[int, ...], tuple[int, ...]], str] = {}
    cases: Counter[str] = Counter()
    for found in recorded_series().values():
        for x, y in combinations(found, 2):
            ranks2 = _doubled_midranks([*x, *y])
            key = (tuple(sorted(ranks2[: len(x)])), tuple(sorted(ranks2[len(x) :])))
            if key not in checked:
                checked[key] = check(x, y)
            cases[checked[key]] += 1
    # all three cases occur in the committed runs (counts as results/ held when this test was written: 2,645 pairs
    # without ties, 3 with, 28 large enough for the normal approximation)
    assert cases["exact"] > 1000 and cases["ties"] > 0 and cases["normal"] > 10, cases


def test_the_p_values_recorded_in_the_ab_summary():
    """results/ab/SUMMARY.json keeps the p-values of 10 + 10 trials (normal approximation), not the trials: each
    recorded p-value is the reference's for one U without ties, and the new code's for that U is within the bound."""
    summary = json.loads((tracked_results() / "ab" / "SUMMARY.json").read_text(encoding="utf-8"))
    rows = summary["aa"] + [row for entry in summary["slowdowns"] for row in entry["rows"]]
    recorded = [row["p_value"] for row in rows if row["p_value"] is not None]
    pairs = summary["facts"]["pairs"]
    by_u = {reference_p(x, y): (x, y) for x, y in untied_samples(pairs, pairs)}
    assert recorded and all(p in by_u for p in recorded)
    for p in recorded:
        assert check(*by_u[p]) == "normal"


def test_the_reference_is_the_code_that_was_replaced():
    """The reference's p-values from the test file before scipy (commit 87b2629's hand counts)."""
    assert reference_p([1, 2, 3], [4, 5, 6]) == 2 / 20
    assert reference_p([1, 2, 4], [3, 5, 6]) == 4 / 20
    assert reference_p([1, 2, 2], [2, 3, 3]) == 6 / 20
    assert reference_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == 2 / 252
