"""verdict: the exact Mann–Whitney U p-value and the evidence-backed throughput/memory decision."""

import pytest

from bench.report import verdict
from bench.report.verdict import ALPHA, MIN_TRIALS, Verdict, decide, mann_whitney_p, no_verdict_label

# ---------------------------------------------------------------- exact p-values, counted by hand


def test_complete_separation_of_three_and_three_is_two_of_twenty_splits():
    # C(6, 3) = 20 splits; only {1,2,3} and {4,5,6} are as extreme as the observed rank sum 6
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    assert mann_whitney_p([4, 5, 6], [1, 2, 3]) == pytest.approx(2 / 20)


def test_one_swap_counts_four_of_twenty_splits():
    # rank sum 7, expected 10.5: the rank sums 6, 7, 14 and 15 are at least 3.5 away, one split each
    assert mann_whitney_p([1, 2, 4], [3, 5, 6]) == pytest.approx(4 / 20)


def test_ties_get_mid_ranks():
    # ranks 1, 3, 3 | 3, 5.5, 5.5: rank sum 7; sums 7 (3 splits) and 14 (3 splits) are as extreme
    assert mann_whitney_p([1, 2, 2], [2, 3, 3]) == pytest.approx(6 / 20)
    assert mann_whitney_p([500.0] * 4, [500.0] * 4) == 1.0


def test_smallest_p_values_for_the_sizes_that_matter():
    assert mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # why MIN_TRIALS is 4: with 3 trials a side even complete separation cannot reach ALPHA
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) > ALPHA >= mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8])


def test_normal_approximation_is_close_to_the_exact_value(monkeypatch):
    base = [1129, 1145, 1007, 924, 891, 1003, 898, 856, 1020]
    head = [1093, 1135, 989, 1081, 1074, 929, 1134, 1112, 1319]
    exact = mann_whitney_p(base, head)
    monkeypatch.setattr(verdict, "EXACT_LIMIT", 0)
    assert mann_whitney_p(base, head) == pytest.approx(exact, abs=0.005)
    assert mann_whitney_p([1.0] * 9, [1.0] * 9) == 1.0


# ---------------------------------------------------------------- decisions


def test_a_single_trial_gets_no_verdict_however_large_the_change():
    decision = decide([1000.0], [500.0], threshold=0.05, bigger_is_better=True)
    assert decision.verdict == Verdict.NO_VERDICT and decision.p_value is None
    assert decision.change == pytest.approx(-0.5)
    assert no_verdict_label(1) == "no verdict (1 trial)" and no_verdict_label(2) == "no verdict (2 trials)"


def test_too_few_trials_on_either_side_get_no_verdict():
    many = [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    few = [500.0] * (MIN_TRIALS - 1)
    assert decide(many, few, 0.05, True).verdict == Verdict.NO_VERDICT
    assert decide(few, many, 0.05, True).verdict == Verdict.NO_VERDICT


def test_same_distribution_with_a_twenty_percent_spread_is_no_change():
    base = [900.0, 950.0, 1000.0, 1050.0, 1100.0]
    head = [1100.0, 1060.0, 900.0, 1080.0, 960.0]
    for bigger_is_better in (True, False):
        decision = decide(base, head, threshold=0.05, bigger_is_better=bigger_is_better)
        # the medians differ by more than the threshold, the test says it is noise
        assert decision.change == pytest.approx(0.06)
        assert decision.verdict == Verdict.NO_CHANGE and decision.p_value is not None and decision.p_value > 0.5


def test_a_clear_thirty_percent_drop_in_throughput_is_a_regression():
    base = [950.0, 1000.0, 1050.0, 980.0, 1020.0]
    decision = decide(base, [v * 0.7 for v in base], threshold=0.05, bigger_is_better=True)
    assert decision.verdict == Verdict.REGRESSION
    assert decision.p_value == pytest.approx(2 / 252) and decision.change == pytest.approx(-0.3)
    faster = decide(base, [v * 1.3 for v in base], threshold=0.05, bigger_is_better=True)
    assert faster.verdict == Verdict.IMPROVEMENT


def test_memory_is_better_lower():
    base = [500.0, 500.0, 501.0, 500.0]
    assert decide(base, [600.0, 600.0, 601.0, 600.0], 0.05, bigger_is_better=False).verdict == Verdict.REGRESSION
    assert decide(base, [400.0, 400.0, 401.0, 400.0], 0.05, bigger_is_better=False).verdict == Verdict.IMPROVEMENT


def test_a_significant_change_below_the_threshold_is_no_change():
    base, head = [1000.0, 1001.0, 1002.0, 1003.0], [1010.0, 1011.0, 1012.0, 1013.0]
    decision = decide(base, head, threshold=0.05, bigger_is_better=True)
    assert decision.p_value is not None and decision.p_value <= ALPHA
    assert decision.verdict == Verdict.NO_CHANGE
    assert decide(base, head, threshold=0.005, bigger_is_better=True).verdict == Verdict.IMPROVEMENT


# ---------------------------------------------------------------- boundaries


def test_a_p_value_equal_to_alpha_rejects(monkeypatch):
    base, head = [1.0, 2.0, 3.0, 4.0], [10.0, 11.0, 12.0, 13.0]
    assert mann_whitney_p(base, head) == pytest.approx(2 / 70)
    monkeypatch.setattr(verdict, "ALPHA", mann_whitney_p(base, head))
    assert decide(base, head, threshold=0.05, bigger_is_better=True).verdict == Verdict.IMPROVEMENT


def test_a_change_equal_to_the_threshold_is_no_change():
    base, head = [100.0, 100.0, 100.0, 100.0], [110.0, 110.0, 110.0, 110.0]
    assert decide(base, head, threshold=0.1, bigger_is_better=True).verdict == Verdict.NO_CHANGE
    assert decide(base, head, threshold=0.099, bigger_is_better=True).verdict == Verdict.IMPROVEMENT


def test_exact_up_to_the_split_limit_then_the_normal_approximation(monkeypatch):
    base, head = [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]
    monkeypatch.setattr(verdict, "EXACT_LIMIT", 70)  # C(8, 4): still exact
    assert mann_whitney_p(base, head) == 2 / 70
    monkeypatch.setattr(verdict, "EXACT_LIMIT", 69)
    assert mann_whitney_p(base, head) == pytest.approx(0.0304, abs=1e-4) and mann_whitney_p(base, head) != 2 / 70


def test_normal_approximation_with_ties_matches_scipy(monkeypatch):
    # the literals are scipy.stats.mannwhitneyu(x, y, method="asymptotic", use_continuity=True).pvalue (scipy 1.17.1)
    monkeypatch.setattr(verdict, "EXACT_LIMIT", 0)
    assert mann_whitney_p([1, 2, 2, 3, 3, 3, 5], [2, 3, 4, 4, 5, 5, 6, 6]) == pytest.approx(0.0451269488886761)
    base = [1129, 1145, 1007, 924, 891, 1003, 898, 856, 1020]
    head = [1093, 1135, 989, 1081, 1074, 929, 1134, 1112, 1319]
    assert mann_whitney_p(base, head) == pytest.approx(0.07738861114200664)
    assert mann_whitney_p([1.0, 4.0], [2.0, 3.0]) == 1.0  # rank sum at its expectation


def test_the_method_is_exact_without_ties_every_split_with_ties_and_normal_above_the_limit(monkeypatch):
    """scipy's exact distribution of U assumes no ties; with ties the p-value enumerates every split of the pooled
    mid-ranks (PermutationMethod with unlimited resamples), and above EXACT_LIMIT splits the normal approximation."""
    from scipy import stats

    methods = []
    real = stats.mannwhitneyu

    def spy(x, y, **kwargs):
        methods.append(kwargs["method"])
        return real(x, y, **kwargs)

    monkeypatch.setattr(stats, "mannwhitneyu", spy)
    mann_whitney_p([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
    mann_whitney_p([1.0, 2.0, 2.0, 4.0], [2.0, 6.0, 7.0, 8.0])
    monkeypatch.setattr(verdict, "EXACT_LIMIT", 69)  # below C(8, 4) = 70
    mann_whitney_p([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
    exact, ties, normal = methods
    assert exact == "exact" and normal == "asymptotic"
    assert isinstance(ties, stats.PermutationMethod) and ties.n_resamples == float("inf")


def test_fewer_than_two_values_on_a_side_is_refused_with_the_counts():
    with pytest.raises(ValueError, match=r"^Mann–Whitney U needs two or more values per side, got 1 and 3$"):
        mann_whitney_p([1.0], [1.0, 2.0, 3.0])
