"""validate on the committed results: the table is produced, every fits/OOM verdict on the budgeted profiles is
right (but on a cell at the edge, measured both ways), every `ok` cell of the calibrated workload is within the 10 %
goal held out, and the held-out figures really leave each cell out of its own fit."""

import pytest

from bench.estimate.calibrate import calibration_records, fit
from bench.estimate.predict import load_calibration
from bench.estimate.validate import Row, _leave_one_cell_out, summary, to_markdown, validate, validation_line


# Module fixtures, not functools.cache: make mutants forks each mutant's test run from a process that has run every
# test once, and a cached result would be the unmutated code's.
@pytest.fixture(scope="module")
def committed() -> tuple[list[Row], int]:
    return validate()


@pytest.fixture(scope="module")
def folds():
    from bench.paths import RESULTS_DIR

    return _leave_one_cell_out(RESULTS_DIR)


def test_validate_committed_results(committed):
    rows, skipped = committed
    table = to_markdown(rows, skipped)
    assert "| source | hardware | cell |" in table
    budgeted = [
        r for r in rows if r.hardware in ("cpu-budget", "cpu-budget-4g") and r.held_out_verdict_right is not None
    ]
    assert {r.hardware for r in budgeted} == {"cpu-budget", "cpu-budget-4g"}
    # a wrong verdict is tolerated only on a cell measured both ways (OOM-killed in one run, ran in another) that
    # the estimator itself puts within 5 % of the limit
    wrong = [r for r in budgeted if not r.held_out_verdict_right]
    assert [r.cell_id for r in wrong if not (r.measured_both_ways and abs(r.margin_held_out) < 0.05)] == []
    assert len(wrong) <= 1
    # every `ok` small-workload cell, 4 GiB profile included, is within the 10 % goal, held out
    ok = [r for r in rows if r.calibrated and r.status == "ok" and r.held_out_error is not None]
    assert ok and max(abs(r.held_out_error) for r in ok) <= 0.10
    assert summary(rows)["max_abs_error_ok"] == max(abs(r.held_out_error) for r in ok)


def test_the_committed_calibration_is_what_fit_gives_on_the_committed_runs(committed):
    # fitted_on names the records really used: a new run under a budgeted profile needs
    # `python -m bench.estimate.calibrate` and `make predicted`
    assert load_calibration() == fit()
    rows, _ = committed
    fitted = {f"{r.source}:{r.cell_id}" for r in rows if r.fitted}
    assert fitted == set(load_calibration().fitted_on)


def test_held_out_constants_are_fitted_without_any_record_of_the_cell(committed, folds):
    records = calibration_records()
    assert set(folds) == {m.record.cell_id for m in records}
    for cell_id, calibration in folds.items():
        assert not [f for f in calibration.fitted_on if f.endswith(f":{cell_id}")]
        assert calibration.fitted_on  # the others still are
    rows, _ = committed
    fitted = [r for r in rows if r.fitted]
    # every row has a held-out prediction; a median need not move when one cell leaves, but some do
    assert all(r.held_out is not None for r in rows)
    assert fitted and any(r.held_out != r.predicted for r in fitted)


def row(measured: float, held_out: float, fitted_pred: float, fitted: bool, calibrated: bool = True) -> Row:
    return Row("r", "cpu", "c", "ok", measured, fitted_pred, None, None, fitted, calibrated, held_out=held_out)


def test_headline_figures_are_held_out_and_fitted_on_figures_in_sample():
    s = summary([row(100, 105, 101, True), row(100, 97, 97, False), row(100, 400, 400, False, calibrated=False)])
    assert s["ok_cells"] == 2 and s["max_abs_error_ok"] == pytest.approx(0.05)
    assert s["mean_abs_error_ok"] == pytest.approx(0.04)
    assert s["fitted_ok_cells"] == 1 and s["fitted_max_abs_error"] == pytest.approx(0.01)
    assert s["other_workload_ok_cells"] == 1 and s["other_workload_max_abs_error"] == pytest.approx(3.0)
    line = validation_line([row(100, 105, 101, True)])
    assert "held out" in line and "max |error| 5.0%" in line and "In-sample on the 1 cells" in line
    table = to_markdown([row(100, 105, 101, True)], 0)
    assert "Held out: `ok` cells" in table and "Fitted on (in-sample): 1 `ok` cells; max |error| 1.0%" in table


def test_write_calibration_writes_the_committed_file(tmp_path):
    from bench.estimate.predict import CALIBRATION_FILE, write_calibration

    write_calibration(load_calibration(), tmp_path / "calibration.json")
    assert (tmp_path / "calibration.json").read_bytes() == CALIBRATION_FILE.read_bytes()


def test_other_methods_are_summed_up_apart_from_dpos_fitted_figures():
    from bench.estimate.validate import Row, method_summary

    def row(method: str, error_pct: float) -> Row:
        return Row(
            "r",
            "cpu-budget-4g",
            "c",
            "ok",
            100.0,
            100.0 + error_pct,
            "fits",
            "fits",
            False,
            held_out=100.0 + error_pct,
            method=method,
        )

    rows = [row("dpo", 2), row("reward", 240), row("reward", -10), row("sft", 40)]
    assert summary(rows)["ok_cells"] == 1 and abs(summary(rows)["max_abs_error_ok"] - 0.02) < 1e-9
    by_method = method_summary(rows)
    assert list(by_method) == ["reward", "sft"]
    assert by_method["reward"]["ok_cells"] == 2 and abs(by_method["reward"]["max_abs_error_ok"] - 2.4) < 1e-9
    assert abs(by_method["reward"]["mean_error_ok"] - 1.15) < 1e-9 and by_method["reward"]["verdicts_right"] == 2
    assert "- reward: 2 cells, mean error 115.0%, max |error| 240.0%" in to_markdown(rows, 0)
