"""Ranges and the fits / tight / predicted_oom verdict (bench/estimate/uncertainty.py)."""

import pytest

from bench.estimate import uncertainty
from bench.estimate.uncertainty import Spread, Spreads


def test_kinds_fall_back_to_coarser_ones():
    assert uncertainty.cell_kind("cpu", "cgroup", "zero3_offload") == "cpu:cgroup:zero"
    assert uncertainty.cell_kind("cpu", "rss", "fsdp") == "cpu:rss:multi"
    # another method's errors make its own ranges: they never widen DPO's
    assert uncertainty.cell_kind("cpu", "rss", "single", "kto") == "kto:cpu:rss:single"
    assert uncertainty.fallbacks("kto:cpu:rss:single")[-1] == "kto"
    assert uncertainty.fallbacks("cpu:cgroup:zero") == ["cpu:cgroup:zero", "cpu:cgroup", "cpu"]
    spreads = Spreads(estimator_version="x", kinds={"cpu": Spread(low=-0.2, high=0.1, rows=3)})
    assert uncertainty.spread_for("cpu:rss:single", spreads).low == -0.2
    assert uncertainty.spread_for("cuda:cuda_allocated:single", spreads) is None


def test_spreads_pool_every_kind_into_its_coarser_ones():
    s = uncertainty.spreads_of({"cpu:cgroup:zero": [0.05, -0.1], "cpu:rss:single": [0.2]})
    assert (s["cpu:cgroup:zero"].low, s["cpu:cgroup:zero"].high) == (-0.1, 0.05)
    assert (s["cpu"].low, s["cpu"].high, s["cpu"].rows) == (-0.1, 0.2, 3)


def test_measured_range_inverts_the_errors_and_holds_the_prediction():
    low, high = uncertainty.measured_range(110.0, Spread(low=-0.5, high=0.1, rows=2))
    assert low == pytest.approx(100.0) and high == pytest.approx(220.0)
    # a kind that only ever over-predicted still has the prediction inside its range
    low, high = uncertainty.measured_range(100.0, Spread(low=0.05, high=0.1, rows=2))
    assert high == 100.0 and low < 100.0


def test_verdicts():
    assert uncertainty.verdict(90, 100, (80, 99)) == "fits"
    assert uncertainty.verdict(90, 100, (80, 120)) == "tight"
    assert uncertainty.verdict(110, 100, (101, 130)) == "predicted_oom"
    assert uncertainty.verdict(110, 100, None) == "predicted_oom"  # no range: the point prediction decides
    assert uncertainty.verdict(110, None, (1, 2)) == "unknown"


def test_the_committed_spreads_are_the_current_validation():
    """spread.json is what `python -m bench predict --write` computes from the committed results and the published
    rows: an estimator change that moves an error without rewriting it fails here."""
    from bench.estimate.validate import current_spreads, validate

    rows, _ = validate()
    assert uncertainty.load_spreads() == current_spreads(rows)
