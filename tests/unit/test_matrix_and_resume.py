import io

from bench import runner
from bench.profiles import load_workload
from bench.report.matrix import render
from bench.results import load_results
from bench.results_schema import ResultRecord, Status
from bench.scenario import Cell
from tests.unit.test_results import record


def test_matrix_grid_marks_and_footnotes():
    records = [
        record("one_adapter-none-single"),
        record("one_adapter-none-ddp", Status.ERROR).model_copy(
            update={"backend": "ddp", "error_class": "comm", "message": "gloo connection reset"}
        ),
        record("one_adapter-none-ddp+mpirun").model_copy(update={"backend": "ddp", "launcher": "mpirun"}),
    ]
    text = render(records, "cpu", ["context line"])
    assert "| init · quant | single | ddp |" in text
    assert "| one_adapter · none | ✅ 1,000 tok/s · 0 MiB | ❌ (comm) [1] |" in text
    assert "## Variants" in text and "one_adapter-none-ddp+mpirun" in text
    assert "1. error — gloo connection reset (one_adapter-none-ddp)" in text


def test_resume_runs_only_cells_without_a_result(tmp_path, cpu_profile, monkeypatch):
    ran: list[str] = []

    def fake_run_cell(ctx, cell: Cell, trial: int = 0) -> ResultRecord:
        ran.append(cell.id if trial == 0 else f"{cell.id}#{trial}")
        return record(cell.id).model_copy(update={"trial": trial})

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    cells = [
        Cell(init="one_adapter", quant="none", backend="single", launcher="python"),
        Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun"),
        Cell(init="two_models", quant="int8", backend="single", launcher="python"),
    ]
    ctx = runner.RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets=None, executor=None)
    runner.execute(ctx, cells[:1], out=io.StringIO())
    assert ran == ["one_adapter-none-single"]
    records = runner.execute(ctx, cells, out=io.StringIO())
    assert ran == ["one_adapter-none-single", "one_adapter-none-ddp"]
    assert [r.status for r in records] == [Status.OK, Status.OK, Status.NOT_APPLICABLE]
    runner.execute(ctx, cells, out=io.StringIO())
    assert len(ran) == 2 and len(load_results(tmp_path).records) == 3
    runner.execute(ctx, cells[:1], force=True, out=io.StringIO())
    assert len(ran) == 3


def test_repeats_record_every_trial_and_resume_per_trial(tmp_path, cpu_profile, monkeypatch):
    ran: list[tuple[str, int]] = []
    monkeypatch.setattr(
        runner,
        "run_cell",
        lambda ctx, cell, trial=0: ran.append((cell.id, trial)) or record(cell.id).model_copy(update={"trial": trial}),
    )
    cell = Cell(init="one_adapter", quant="none", backend="single", launcher="python")
    ctx = runner.RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets=None, executor=None)
    runner.execute(ctx, [cell], repeats=2, out=io.StringIO())
    runner.execute(ctx, [cell], repeats=3, out=io.StringIO())
    assert ran == [(cell.id, 0), (cell.id, 1), (cell.id, 2)]
    assert [r.trial for r in load_results(tmp_path).records] == [0, 1, 2]


def test_cells_with_the_same_reason_share_one_footnote():
    same = {
        "init": "two_models",
        "status": Status.NOT_APPLICABLE,
        "metrics": None,
        "message": "quantized weights need adapters",
    }
    records = [
        record("two_models-int8-single").model_copy(update={"quant": "int8", **same}),
        record("two_models-int8-ddp").model_copy(update={"quant": "int8", "backend": "ddp", **same}),
    ]
    text = render(records, "cpu", [])
    assert "| two_models · int8 | N/A [1] | N/A [1] |" in text
    assert "1. not_applicable — quantized weights need adapters (two_models-int8-single, two_models-int8-ddp)" in text
    assert "2." not in text
