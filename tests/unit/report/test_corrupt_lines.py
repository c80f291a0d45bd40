"""A corrupt line in results.jsonl: every reader (compare, matrix, publish, the runner) names its file, line and the
field that failed, once, and reads every other line."""

import json
from pathlib import Path

from bench.cli import main
from bench.results.store import load_results
from tests.unit.report.test_compare import rec, write_run
from tests.unit.report.test_publish import build_results, site_text

CELLS = ("one_adapter-none-single", "two_models-none-single")


def corrupt(run_dir: Path, line: int = 2) -> Path:
    """Replace line `line` of the run's results.jsonl with a record whose status is not a status."""
    path = run_dir / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    bad = json.loads(lines[line - 1]) | {"status": "great"}
    lines[line - 1] = json.dumps(bad) + "\n"
    path.write_text("".join(lines))
    return path


def warned(err: str, path: Path, line: int) -> None:
    """Exactly one warning, naming the file, the line and the field."""
    warnings = [w for w in err.splitlines() if w.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"warning: {path}:{line}: unreadable result line (status: Input should be 'ok', "), (
        err
    )


def three_cells(run_dir: Path) -> Path:
    return write_run(run_dir, [rec(CELLS[0]), rec("one_adapter-none-ddp"), rec(CELLS[1])])


def test_the_problem_names_the_field_that_failed(tmp_path):
    path = corrupt(three_cells(tmp_path / "r"))
    loaded = load_results(path.parent, quiet=True)
    assert [r.cell_id for r in loaded.records] == list(CELLS)
    (problem,) = loaded.problems
    assert problem.startswith(f"{path}:2: unreadable result line (status: Input should be 'ok', 'oom', "), problem
    path.write_text(path.read_text().replace('"cell_id"', '"cell"', 1))
    assert (
        load_results(path.parent, quiet=True).problems[0]
        == f"{path}:1: unreadable result line (cell_id: Field required)"
    )
    path.write_text("{not json\n" + path.read_text())
    first = load_results(path.parent, quiet=True).problems[0]
    assert first.startswith(f"{path}:1: unreadable result line (invalid JSON: key must be a string"), first


def test_compare_warns_and_compares_the_other_lines(tmp_path, capsys):
    base = three_cells(tmp_path / "base")
    head = three_cells(tmp_path / "head")
    path = corrupt(head)
    assert main(["compare", str(base), str(head)]) == 0
    out, err = capsys.readouterr()
    warned(err, path, 2)
    assert f"`{CELLS[0]}`" in out and f"`{CELLS[1]}`" in out
    assert "➖ removed" in out  # the corrupt line's cell is missing from the head, and said so


def test_matrix_warns_and_tabulates_the_other_lines(tmp_path, capsys, scenario_copy):
    results = tmp_path / "results"
    path = corrupt(three_cells(results / "cpu" / "r"))
    assert main(["--results", str(results), "--scenarios", str(scenario_copy), "matrix", "--run-id", "r"]) == 0
    warned(capsys.readouterr().err, path, 2)
    matrix = (results / "cpu" / "MATRIX.md").read_text()
    assert all(cell in (results / "cpu" / "matrix.csv").read_text() for cell in CELLS), matrix


def test_publish_warns_and_publishes_the_other_lines(tmp_path, capsys):
    results, scenarios = build_results(tmp_path)
    path = corrupt(results / "2xA10" / "20260101-000000", line=3)
    assert main(["--results", str(results), "--scenarios", str(scenarios), "publish"]) == 0
    warned(capsys.readouterr().err, path, 3)
    page = site_text(results / "site")
    assert "two_models-none-single" in page
