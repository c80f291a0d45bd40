"""Stated intervals of comparable rows, the probability of fitting and the fits / likely_fits / likely_oom / oom
verdict (bench/estimate/uncertainty.py)."""

import numpy as np
import pytest

from bench.estimate import uncertainty
from bench.estimate.uncertainty import Spread, Spreads
from tests.unit.estimate.fit_tolerance import mismatches


def pool(*errors: float) -> Spread:
    return Spread(errors=sorted(errors))


def test_kinds_are_device_figure_setup_and_backend_family():
    assert uncertainty.cell_kind("cpu", "cgroup", "zero3_offload") == "cpu:cgroup:full:zero"
    assert uncertainty.cell_kind("cpu", "rss", "fsdp", setup="adapter") == "cpu:rss:adapter:multi"
    assert uncertainty.cell_kind("cuda", "cuda_allocated", "single", setup="quantized") == (
        "cuda:cuda_allocated:quantized:single"
    )
    # another method's errors make its own pools: they never widen DPO's
    assert uncertainty.cell_kind("cpu", "rss", "single", "kto", "adapter") == "kto:cpu:rss:adapter:single"
    assert uncertainty.setup_kind(adapters=True, quantized=True) == "quantized"
    assert uncertainty.setup_kind(adapters=True, quantized=False) == "adapter"
    assert uncertainty.setup_kind(adapters=False, quantized=False) == "full"


def test_wider_pools_come_in_order_and_stay_on_the_device():
    assert uncertainty.fallbacks("cpu:cgroup:adapter:zero") == [
        "cpu:cgroup:adapter:zero",
        "cpu:cgroup:adapter",
        "cpu:cgroup",
        "cpu",
    ]
    # a method: its own pools, then DPO's of the same device, never another device's
    assert uncertainty.fallbacks("kto:cuda:cuda_allocated:full:single") == [
        "kto:cuda:cuda_allocated:full:single",
        "kto:cuda:cuda_allocated:full",
        "kto:cuda:cuda_allocated",
        "kto:cuda",
        "cuda:cuda_allocated:full:single",
        "cuda:cuda_allocated:full",
        "cuda:cuda_allocated",
        "cuda",
    ]


def test_spreads_pool_every_kind_into_its_wider_ones():
    s = uncertainty.spreads_of({"cpu:cgroup:full:zero": [0.05, -0.1], "cpu:rss:adapter:single": [0.2]})
    assert s["cpu:cgroup:full:zero"].errors == [-0.1, 0.05]
    assert s["cpu"].errors == [-0.1, 0.05, 0.2] and s["cpu"].rows == 3
    assert set(s) == {
        "cpu:cgroup:full:zero",
        "cpu:cgroup:full",
        "cpu:cgroup",
        "cpu:rss:adapter:single",
        "cpu:rss:adapter",
        "cpu:rss",
        "cpu",
    }


@pytest.mark.parametrize("n", [1, 2, 3, 7, 25, 100])
def test_the_interval_is_the_weibull_quantiles_of_its_pool(n):
    errors = list(np.random.default_rng(n).normal(0.0, 0.1, n))
    s = Spread(errors=sorted(errors))
    assert s.low == pytest.approx(np.quantile(errors, 0.1, method="weibull"))
    assert s.high == pytest.approx(np.quantile(errors, 0.9, method="weibull"))
    # a pool too small for its stated coverage spans all of it
    if n <= 8:
        assert (s.low, s.high) == (min(errors), max(errors))
    else:
        assert min(errors) < s.low < s.high < max(errors)


def test_a_kind_without_enough_comparable_rows_takes_the_nearest_wider_pool_and_says_so():
    spreads = Spreads(
        estimator_version="x",
        kinds={
            "cuda": pool(*[0.01 * i for i in range(-20, 20)]),
            "cuda:cuda_allocated:full": pool(-0.1, 0.0),
            "cuda:cuda_allocated:adapter": pool(-0.1, -0.05, 0.0, 0.02, 0.05),
        },
    )
    kind, found = uncertainty.spread_for("cuda:cuda_allocated:adapter:single", spreads)
    assert kind == "cuda:cuda_allocated:adapter" and found.rows == uncertainty.MIN_ROWS
    kind, found = uncertainty.spread_for("cuda:cuda_allocated:full:single", spreads)
    assert kind == "cuda" and found.rows == 40  # two full rows are no interval: the device's pool
    label = uncertainty.pool_label("cuda:cuda_allocated:full:single", kind, found.rows)
    assert "wider pool" in label and "40 rows" in label
    assert "5 comparable rows" in uncertainty.pool_label("a", "a", 5)
    # nothing wider with enough rows: the widest there is
    one = Spreads(estimator_version="x", kinds={"kto:cuda": pool(0.1)})
    assert uncertainty.spread_for("kto:cuda:cuda_allocated:full:single", one)[0] == "kto:cuda"
    assert uncertainty.spread_for("hpu:device:full:single", one) is None
    assert uncertainty.spread_for("cpu:rss:full:single", None) is None


def test_measured_range_inverts_the_errors():
    # errors -50 % .. +10 %: the measurement between 110 / 1.1 and 110 / 0.5
    low, high = uncertainty.measured_range(110.0, pool(-0.5, 0.1))
    assert low == pytest.approx(100.0) and high == pytest.approx(220.0)
    # a kind that only ever over-predicted: the interval lies below the prediction
    assert uncertainty.measured_range(100.0, pool(0.05, 0.1)) == pytest.approx((100 / 1.1, 100 / 1.05))
    # a CPU cell's baseline is added to both ends
    assert uncertainty.measured_range(100.0, pool(0.0), base=50.0) == pytest.approx((150.0, 150.0))
    assert uncertainty.measured_range(100.0, None) is None


def test_the_probability_of_fitting_is_the_share_of_errors_that_keep_it_inside():
    errors = pool(-0.3, -0.2, -0.1, 0.0, 0.1)  # measurements 100/0.7, 100/0.8, 100/0.9, 100, 100/1.1
    assert uncertainty.fit_probability(100.0, 100.0, errors) == pytest.approx(0.4)
    assert uncertainty.fit_probability(100.0, 112.0, errors) == pytest.approx(0.6)
    assert uncertainty.fit_probability(100.0, 200.0, errors) == 1.0
    assert uncertainty.fit_probability(100.0, 80.0, errors) == 0.0
    assert uncertainty.fit_probability(50.0, 100.0, errors, base=50.0) == pytest.approx(0.4)


def test_verdicts_from_the_probability():
    assert uncertainty.verdict(95, 100, 0.95) == "fits"
    assert uncertainty.verdict(95, 100, 0.9) == "fits"
    assert uncertainty.verdict(95, 100, 0.6) == "likely_fits"
    assert uncertainty.verdict(103, 100, 0.3) == "likely_oom"
    assert uncertainty.verdict(103, 100, 0.1) == "oom"
    assert uncertainty.verdict(103, 100, 0.0) == "oom"
    assert uncertainty.verdict(110, None, 0.5) == "unknown"
    # no pool: the point prediction alone
    assert uncertainty.verdict(110, 100, None) == "oom"
    assert uncertainty.verdict(100, 100, None) == "fits"


def test_a_point_prediction_exactly_at_the_side_margin_leaves_the_probability_its_verdict():
    above = 100 * (1 + uncertainty.SIDE_MARGIN)
    below = 100 * (1 - uncertainty.SIDE_MARGIN)
    assert uncertainty.verdict(above, 100, 0.95) == "fits"  # only beyond the margin is it moved to likely_oom
    assert uncertainty.verdict(below, 100, 0.05) == "oom"  # only beneath it to likely_fits


def test_a_point_prediction_far_past_the_limit_keeps_its_side():
    # 127 % of the card is never on the side of fitting, whatever another setup's errors say
    assert uncertainty.verdict(127, 100, 1.0) == "likely_oom"
    assert uncertainty.verdict(127, 100, 0.6) == "likely_oom"
    assert uncertainty.verdict(127, 100, 0.05) == "oom"
    # nor 70 % of it on the side of running out
    assert uncertainty.verdict(70, 100, 0.0) == "likely_fits"
    # within the margin the probability decides
    assert uncertainty.verdict(105, 100, 0.95) == "fits"
    assert uncertainty.verdict(95, 100, 0.05) == "oom"


def test_the_committed_spreads_are_the_current_validation():
    """spread.json is what `python -m bench predict --write` computes from the committed results and the published
    rows: an estimator change that moves an error without rewriting it fails here."""
    from bench.estimate.validate import current_spreads, validate

    rows, _ = validate()
    assert not mismatches(current_spreads(rows), uncertainty.load_spreads())


def test_no_held_out_row_is_in_a_pool():
    from bench.estimate import published
    from bench.estimate.validate import errors_by_kind, validate

    held_out = uncertainty.held_out_ids()
    assert len(held_out) >= 30 and any(i.startswith("published:") for i in held_out)
    rows, _ = validate()
    kept = sum(len(v) for v in errors_by_kind(rows, held_out).values())
    every = sum(len(v) for v in errors_by_kind(rows).values())
    assert 0 < kept < every
    pub = published.published_rows()
    assert sum(map(len, published.errors_by_kind(pub, held_out).values())) < sum(
        map(len, published.errors_by_kind(pub).values())
    )


def test_published_rows_are_held_out_by_the_stated_rule_alone():
    # held_out.txt's head: a row is held out exactly when the first byte of the SHA-256 of its id is 0 mod 3, so a
    # row admitted later is held out or pooled by its id, never by its error
    import hashlib

    from bench.estimate import published

    held_out = uncertainty.held_out_ids()
    for row in published.published_rows():
        by_rule = hashlib.sha256(row.row_id.encode()).digest()[0] % 3 == 0
        assert (row.row_id in held_out) == by_rule, row.row_id
    assert all(hashlib.sha256(i.encode()).digest()[0] % 3 == 0 for i in held_out)


def test_spreads_file_round_trip(tmp_path):
    # rewriting the committed file changes nothing, byte for byte; a missing file is no spreads
    committed = uncertainty.load_spreads()
    assert committed is not None and committed.estimator_version and committed.level == uncertainty.LEVEL
    uncertainty.write_spreads(committed, tmp_path / "spread.json")
    assert (tmp_path / "spread.json").read_bytes() == uncertainty.SPREAD_FILE.read_bytes()
    assert uncertainty.load_spreads(tmp_path / "spread.json") == committed
    assert uncertainty.load_spreads(tmp_path / "missing.json") is None


def test_the_pool_label_says_how_the_range_was_made():
    assert uncertainty.pool_label("a", "a", 5) == "80% interval of 5 comparable rows (a)"
    assert uncertainty.pool_label("a:b", "a", 40) == "80% interval of a wider pool, 40 rows (a): too few rows like a:b"
    for kind, rows in ((None, 5), ("a", None), (None, None)):
        assert uncertainty.pool_label("a", kind, rows) == "no range: no measured rows of this device"


def test_held_out_ids_skip_the_head_comments_and_blank_lines(tmp_path):
    listed = tmp_path / "held_out.txt"
    listed.write_text("# named before any pool was derived\n\ncpu:one\n#cpu:commented\npublished:two\n", "utf-8")
    assert uncertainty.held_out_ids(listed) == frozenset({"cpu:one", "published:two"})
    assert uncertainty.held_out_ids(tmp_path / "none.txt") == frozenset()


def test_a_gpu_range_is_its_total_over_one_plus_each_bound_of_the_comparable_errors():
    """On a GPU the errors are of the whole figure, nothing added to it (a CPU cell's library baseline is added)."""
    from bench.estimate.predict import predict_cell
    from bench.matrix.axes import Backend, Init, Quant
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import load_profile, load_workload

    cell = Cell(init=Init.ONE_ADAPTER, quant=Quant.NONE, backend=Backend.SINGLE, launcher="python")
    p = predict_cell(cell, load_profile("1xH100"), load_workload("llama-3.2-1b"))
    spread = uncertainty.load_spreads().kinds[p.range_kind]
    assert (p.range_low_bytes, p.range_high_bytes) == (
        p.total_bytes / (1 + spread.high),
        p.total_bytes / (1 + spread.low),
    )
