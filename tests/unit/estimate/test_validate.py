"""validate on the committed results: the table is produced, every `ok` CPU cell of both workloads (tiny, measured by
RSS; small, by its cgroup) is within 15 % with no model-memory constant fitted, and every fits/OOM verdict on the
budgeted profiles is right or `tight` (its range straddles the limit)."""

from bench.estimate.predict import load_calibration
from bench.estimate.validate import Row, summary, to_markdown, validate


def test_validate_committed_results():
    rows, skipped = validate()
    table = to_markdown(rows, skipped)
    assert "| source | hardware | cell |" in table
    budgeted = [r for r in rows if r.hardware in ("cpu-budget", "cpu-budget-4g") and r.verdict_measured is not None]
    assert {r.hardware for r in budgeted} == {"cpu-budget", "cpu-budget-4g"}
    assert [r.cell_id for r in budgeted if r.verdict_right is False] == []
    # tight is the edge, not an escape: the ranges leave most verdicts decided
    assert sum(r.verdict_predicted == "tight" for r in budgeted) <= len(budgeted) // 8
    ok = [r for r in rows if r.status == "ok" and r.error is not None]
    assert {r.hardware for r in ok} >= {"cpu", "cpu-budget", "cpu-budget-4g"}
    assert max(abs(r.error) for r in ok) <= 0.15
    assert summary(rows)["max_abs_error_ok"] is not None


def test_no_model_memory_constant_is_fitted():
    calibration = load_calibration()
    assert calibration.fitted_on == []
    assert set(calibration.devices["cpu"].fitted) == {"context_bytes", "deepspeed_context_bytes"}


def test_a_tight_verdict_is_not_judged_and_a_wrong_one_is():
    def row(predicted: str) -> Row:
        return Row("r", "cpu-budget", "c", "oom", None, 1.0, "predicted_oom", predicted, False)

    assert row("tight").verdict_right is None
    assert row("fits").verdict_right is False
    s = summary([row("tight"), row("fits"), row("predicted_oom")])
    assert (s["verdicts"], s["verdicts_right"], s["tight"]) == (2, 1, 1)
