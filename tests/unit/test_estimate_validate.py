"""validate on the committed results: the table is produced and every fits/OOM verdict on cpu-budget is right."""

from bench.estimate.validate import summary, to_markdown, validate


def test_validate_committed_results():
    rows, skipped = validate()
    table = to_markdown(rows, skipped)
    assert "| source | hardware | cell |" in table
    budget = [r for r in rows if r.hardware == "cpu-budget" and r.verdict_right is not None]
    assert budget, "the committed cpu-budget run has measured cells"
    wrong = [r.cell_id for r in budget if not r.verdict_right]
    assert not wrong
    s = summary(rows)
    assert s["max_abs_error_ok"] is not None and s["max_abs_error_ok"] <= 0.10
