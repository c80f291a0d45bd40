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


def test_a_range_that_touches_the_limit():
    # the whole range at or under the usable memory fits; a range whose low end is exactly the limit may still fit
    assert uncertainty.verdict(90, 100, (80, 100)) == "fits"
    assert uncertainty.verdict(100, 100, (100, 120)) == "tight"
    assert uncertainty.verdict(100, 100, None) == "fits"


def test_measured_range_of_a_kind_that_only_over_or_only_under_predicted():
    # errors +5 % .. +10 %: the measurement is expected between 100 / 1.1 and the prediction itself
    assert uncertainty.measured_range(100.0, Spread(low=0.05, high=0.1, rows=2)) == pytest.approx((100 / 1.1, 100.0))
    # errors -20 % .. -10 %: between the prediction and 100 / 0.8
    assert uncertainty.measured_range(100.0, Spread(low=-0.2, high=-0.1, rows=2)) == pytest.approx((100.0, 125.0))
    assert uncertainty.measured_range(100.0, None) is None


def test_kinds_of_every_backend_family():
    assert uncertainty.cell_kind("cuda", "cuda_allocated", "ddp") == "cuda:cuda_allocated:multi"
    assert uncertainty.cell_kind("cpu", "cgroup", "single") == "cpu:cgroup:single"
    assert uncertainty.cell_kind("cpu", "cgroup", "zero2", "dpo") == "cpu:cgroup:zero"
    assert uncertainty.fallbacks("cpu") == ["cpu"]


def test_spreads_of_a_kind_and_the_kinds_it_falls_back_to():
    s = uncertainty.spreads_of({"cpu:rss:single": [0.2, -0.05, 0.1]})
    assert set(s) == {"cpu:rss:single", "cpu:rss", "cpu"}
    assert s["cpu:rss"] == Spread(low=-0.05, high=0.2, rows=3)
    spreads = Spreads(
        estimator_version="x",
        kinds={"cpu": Spread(low=-0.2, high=0.1, rows=3), "cpu:rss": Spread(low=-0.1, high=0.05, rows=2)},
    )
    # the finest kind with MIN_ROWS rows: two are no range yet
    assert uncertainty.spread_for("cpu:rss:single", spreads).rows == 3
    spreads.kinds["cpu:rss"] = Spread(low=-0.1, high=0.05, rows=uncertainty.MIN_ROWS)
    assert uncertainty.spread_for("cpu:rss:single", spreads).low == -0.1
    one = Spreads(estimator_version="x", kinds={"kto": Spread(low=0.1, high=0.1, rows=1)})
    assert uncertainty.spread_for("kto:cuda", one).rows == 1  # nothing coarser: the one there is
    assert uncertainty.spread_for("cpu:rss:single", None) is None


def test_spreads_file_round_trip(tmp_path):
    # rewriting the committed file changes nothing, byte for byte; a missing file is no spreads
    committed = uncertainty.load_spreads()
    assert committed is not None and committed.estimator_version
    uncertainty.write_spreads(committed, tmp_path / "spread.json")
    assert (tmp_path / "spread.json").read_bytes() == uncertainty.SPREAD_FILE.read_bytes()
    assert uncertainty.load_spreads(tmp_path / "spread.json") == committed
    assert uncertainty.load_spreads(tmp_path / "missing.json") is None
