import os

import pytest

from bench.selfbench import overhead


def test_a_suite_slower_in_every_round_has_its_overhead_and_a_bound_above_it():
    result = overhead.summarise([(0.98, 1.0), (0.97, 1.0), (0.99, 1.0)])
    assert result["ratio_median"] == pytest.approx(0.98)
    assert result["overhead"] == pytest.approx(0.02)
    # mean 0.98, sd 0.01, t(2) 4.30: the lower end of the mean ratio is 0.98 - 4.30 * 0.01 / sqrt(3)
    assert result["overhead_bound"] == pytest.approx(1 - (0.98 - 4.30 * 0.01 / 3**0.5))
    assert result["overhead_bound"] > overhead.GOAL


def test_equal_sides_with_little_spread_are_shown_within_the_goal():
    pairs = [(1.0 + d, 1.0) for d in (0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001, 0.0)]
    assert overhead.summarise(pairs)["overhead_bound"] <= overhead.GOAL


def test_one_round_has_no_interval_so_its_bound_is_its_overhead():
    result = overhead.summarise([(0.995, 1.0)])
    assert result["overhead_bound"] == pytest.approx(result["overhead"]) == pytest.approx(0.005)


def test_the_cores_are_split_in_two_equal_halves(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4})
    assert overhead.core_halves() == ({0, 1}, {2, 3})
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {3})
    assert overhead.core_halves() is None


def test_an_unbound_side_gets_no_preexec_function():
    assert overhead.pinned(None) is None
    assert callable(overhead.pinned({0}))
