import csv
import io
import json
from types import SimpleNamespace

from bench.matrix.cell import Cell
from bench.matrix.profiles import load_workload
from bench.report.matrix import render
from bench.report.matrix_file import write_matrix
from bench.results.schema import ResultRecord, Status
from bench.results.store import append_result, load_results
from bench.run import runner
from tests.unit.results.test_results import record

NO_EXECUTOR = SimpleNamespace(name="none", concurrent=False, memory_budget_bytes=None)
"""Where `run_cell` is replaced: what the runner reads of an executor, and nothing that runs."""


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

    def fake_run_cell(ctx, cell: Cell, trial: int = 0, prediction=None, **_) -> ResultRecord:
        ran.append(cell.id if trial == 0 else f"{cell.id}#{trial}")
        return record(cell.id).model_copy(update={"trial": trial})

    monkeypatch.setattr("bench.run.trial.run_cell", fake_run_cell)
    cells = [
        Cell(init="one_adapter", quant="none", backend="single", launcher="python"),
        Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun"),
        Cell(init="two_models", quant="int8", backend="single", launcher="python"),
    ]
    ctx = runner.RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets=None, executor=NO_EXECUTOR)
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

    def fake_run_cell(ctx, cell: Cell, trial: int = 0, prediction=None, **_) -> ResultRecord:
        ran.append((cell.id, trial))
        return record(cell.id).model_copy(update={"trial": trial})

    monkeypatch.setattr("bench.run.trial.run_cell", fake_run_cell)
    cell = Cell(init="one_adapter", quant="none", backend="single", launcher="python")
    ctx = runner.RunContext("r1", tmp_path, cpu_profile, load_workload("tiny"), assets=None, executor=NO_EXECUTOR)
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


def test_footnotes_show_the_known_issue_link_and_note():
    issue = "https://github.com/deepspeedai/DeepSpeed/issues/4321"
    failing = {"status": Status.ERROR, "metrics": None, "message": "RuntimeError: zero3 gather"}
    records = [
        record("one_adapter-none-single").model_copy(
            update={**failing, "known_issue": issue, "known_issue_note": "ZeRO-3 + LoRA: fixed in 0.20"}
        ),
        record("one_adapter-none-ddp").model_copy(update={**failing, "backend": "ddp"}),
    ]
    text = render(records, "cpu", [])
    assert (
        f"1. error — RuntimeError: zero3 gather (one_adapter-none-single). Known issue: <{issue}> — "
        "ZeRO-3 + LoRA: fixed in 0.20"
    ) in text
    # the same message without the known issue is another note
    assert "2. error — RuntimeError: zero3 gather (one_adapter-none-ddp)\n" in text
    bare = record("one_adapter-none-ddp").model_copy(update={**failing, "backend": "ddp", "known_issue": "TRL-42"})
    assert "1. error — RuntimeError: zero3 gather (one_adapter-none-ddp). Known issue: TRL-42\n" in render(
        [bare], "", []
    )


def test_trials_are_folded_like_on_the_site():
    trials = [
        record("one_adapter-none-single").model_copy(update={"trial": 0}),
        record("one_adapter-none-single", Status.TIMEOUT).model_copy(update={"trial": 1, "message": "600 s"}),
        record("one_adapter-none-single").model_copy(update={"trial": 2}),
    ]
    text = render(trials, "cpu", [])
    assert "| one_adapter · none | ⏱️ timeout 1,000 tok/s · 0 MiB [1] |" in text
    assert "1. timeout — 600 s (one_adapter-none-single)" in text


def test_write_matrix_writes_matrix_md_and_csv_in_matrix_order(tmp_path):
    run_dir = tmp_path / "cpu" / "20260101-000000"
    run_dir.mkdir(parents=True)
    for cell_id, backend in (("one_adapter-none-ddp", "ddp"), ("one_adapter-none-single", "single"), ("gone", "x")):
        append_result(run_dir, record(cell_id).model_copy(update={"backend": backend}))
    env = {"workload": "tiny", "hardware_profile": "cpu", "image": None, "hardware": {"cpu_model": "AMD EPYC"}}
    (run_dir / "env.json").write_text(json.dumps(env | {"packages": {"trl": "1.16.0", "liger": None}}))
    out = write_matrix(run_dir, ["one_adapter-none-single", "one_adapter-none-ddp"])
    text = out.read_text(encoding="utf-8")
    assert out == tmp_path / "cpu" / "MATRIX.md"
    assert text.startswith("# DPO compatibility matrix — cpu\n")
    assert "· workload `tiny` · measured None · executor None · image none (local venv) · git unknown" in text
    assert "Machine: AMD EPYC, ? cores, no GPU. Versions: trl 1.16.0." in text
    assert "`python -m bench matrix --hw cpu`" in text and "gone" not in text
    assert "| one_adapter · none | ✅ 1,000 tok/s · 0 MiB | ✅ 1,000 tok/s · 0 MiB |" in text
    rows = list(csv.DictReader((tmp_path / "cpu" / "matrix.csv").open(encoding="utf-8")))
    assert [r["cell_id"] for r in rows] == ["one_adapter-none-single", "one_adapter-none-ddp"]
    # records without model memory, budget or learning evidence: those columns are there, empty
    for column in ("model_memory_mib", "peak_mib", "baseline_mib", "kernel_peak_mib", "memory_budget_mib"):
        assert [r[column] for r in rows] == ["", ""]
    assert [r["first_loss"] for r in rows] == ["", ""] and rows[0]["train_peak_mib"] != ""


def test_matrix_files_linked_elsewhere_are_replaced_not_written_through(tmp_path, tmp_path_factory):
    user = tmp_path_factory.mktemp("user")
    for name in ("notes.md", "sheet.csv"):
        (user / name).write_text("the user's own")
    run_dir = tmp_path / "cpu" / "20260101-000000"
    run_dir.mkdir(parents=True)
    append_result(run_dir, record("one_adapter-none-single"))
    (tmp_path / "cpu" / "MATRIX.md").symlink_to(user / "notes.md")
    (tmp_path / "cpu" / "matrix.csv").symlink_to(user / "sheet.csv")
    out = write_matrix(run_dir, ["one_adapter-none-single"])
    assert all((user / name).read_text() == "the user's own" for name in ("notes.md", "sheet.csv"))
    assert not out.is_symlink() and out.read_text(encoding="utf-8").startswith("# DPO compatibility matrix")
    assert not (tmp_path / "cpu" / "matrix.csv").is_symlink()
    assert sorted(p.name for p in (tmp_path / "cpu").iterdir()) == ["20260101-000000", "MATRIX.md", "matrix.csv"]


def test_write_matrix_lists_rows_the_run_predates_as_not_run_yet(tmp_path):
    run_dir = tmp_path / "cpu" / "20260101-000000"
    run_dir.mkdir(parents=True)
    append_result(run_dir, record("one_adapter-none-single"))
    (run_dir / "env.json").write_text(json.dumps({"workload": "tiny", "hardware_profile": "cpu"}))
    text = write_matrix(run_dir, ["one_adapter-none-single", "one_adapter-nf4-zero3+newcomer"]).read_text()
    assert "| one_adapter-nf4-zero3+newcomer |  |  |  | not run yet: the row joined the matrix after this run |" in text


def test_rows_added_after_a_run_show_from_the_later_run_that_measured_them(tmp_path):
    def run(name, started, cell_ids):
        run_dir = tmp_path / "cpu" / name
        run_dir.mkdir(parents=True)
        for cell_id in cell_ids:
            append_result(run_dir, record(cell_id).model_copy(update={"run_id": name}))
        env = {"workload": "tiny", "hardware_profile": "cpu", "created_at": started}
        (run_dir / "env.json").write_text(json.dumps(env))
        return run_dir

    added = "two_models-none-zero2_offload+1rank"
    full = run("20260102-000000", "2026-01-02T00:00:00+00:00", ["one_adapter-none-single"])
    run("20260101-000000", "2026-01-01T00:00:00+00:00", [added])  # older than the full run: not its source
    run("20260103-000000", "2026-01-03T00:00:00+00:00", [added, "one_adapter-none-single"])
    text = write_matrix(full, ["one_adapter-none-single", added, "one_adapter-nf4-zero3+newcomer"]).read_text()
    assert "1 rows that joined the matrix after this run: from run `20260103-000000`" in text
    [row] = [line for line in text.splitlines() if line.startswith(f"| {added} |")]
    assert row.endswith("| ✅ 1,000 tok/s · 0 MiB |")
    assert "| one_adapter-nf4-zero3+newcomer |  |  |  | not run yet" in text  # no run has it
    assert (
        sum("✅" in line for line in text.splitlines() if line.startswith("|")) == 2
    )  # the later run's copy of a cell the full run has is not shown twice


def test_learning_failed_renders_on_the_console_with_its_note():
    failed = record("one_adapter-none-single", Status.LEARNING_FAILED).model_copy(
        update={"message": "first-step loss 0.7412 is not ln 2 (0.6931): the reference is not the initial policy"}
    )
    text = render([failed], "cpu", [])
    assert "| one_adapter · none | 📉 learning [1] |" in text
    assert "1. learning_failed — first-step loss 0.7412 is not ln 2 (0.6931)" in text
