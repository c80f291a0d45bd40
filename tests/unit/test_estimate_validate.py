"""validate on the committed results: the table is produced, every fits/OOM verdict on the budgeted profiles is
right, and every `ok` cell of the budgeted profile (cpu-budget) is within the 10 % goal."""

from bench.estimate.validate import summary, to_markdown, validate


def test_validate_committed_results():
    rows, skipped = validate()
    table = to_markdown(rows, skipped)
    assert "| source | hardware | cell |" in table
    budgeted = [r for r in rows if r.hardware in ("cpu-budget", "cpu-budget-4g") and r.verdict_right is not None]
    assert {r.hardware for r in budgeted} == {"cpu-budget", "cpu-budget-4g"}
    assert [r.cell_id for r in budgeted if not r.verdict_right] == []
    ok = [r for r in rows if r.hardware == "cpu-budget" and r.status == "ok"]
    assert ok and max(abs(r.error) for r in ok) <= 0.10
    assert summary(rows)["max_abs_error_ok"] is not None
