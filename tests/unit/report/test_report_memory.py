"""Model memory, the memory budget and the learning check in the reports: cell labels, MATRIX.md, matrix.csv and
the trial folding. Hand-built records; records without the new fields (committed results) must still render."""

import csv
import io
import math

import pytest

from bench.report.cells import LEGEND, MARKS, budget_line, cell_label
from bench.report.matrix_table import csv_frame, render
from bench.report.summary import OomMemory, summarize
from bench.results.schema import Learning, RankMemoryFigures, ResultRecord, Status
from tests.unit.report.test_compare import MiB, rec

GiB = 2**30
FAILURE = "loss did not fall: 0.6931 at step 1, 0.6850 over the last 7 of 30 steps"


def new_rec(
    cell_id: str,
    status: Status = Status.OK,
    tokens: float = 1234.0,
    model_mib: float = 812.0,
    baseline_mib: float = 560.0,
    trial: int = 0,
    budget: int | None = None,
    failures: tuple[str, ...] = (),
) -> ResultRecord:
    """A record as the runner writes it now: model memory, rank memory, learning evidence."""
    record = rec(cell_id, status, tokens=tokens, peak_mib=baseline_mib + model_mib, trial=trial)
    if record.metrics is None and status == Status.LEARNING_FAILED:
        record = record.model_copy(update={"metrics": rec(cell_id, tokens=tokens).metrics})
    peak = int((baseline_mib + model_mib) * MiB)
    metrics = record.metrics and record.metrics.model_copy(
        update={
            "train_peak_bytes": peak,
            "baseline_bytes": int(baseline_mib * MiB),
            "peak_bytes": peak,
            "model_memory_bytes": int(model_mib * MiB),
        }
    )
    learning = Learning(
        first_loss=math.log(2),
        last_loss=0.69 if failures else 0.41,
        end_loss=0.685 if failures else 0.45,
        reward_accuracy=0.75,
        losses=[math.log(2), None, 0.69],
        failures=list(failures),
    )
    figures = [
        RankMemoryFigures(rank=0, baseline_rss_bytes=int(baseline_mib * MiB), peak_rss_bytes=peak),
        RankMemoryFigures(rank=1, baseline_rss_bytes=int(baseline_mib * MiB), peak_rss_bytes=peak - MiB),
    ]
    return record.model_copy(
        update={
            "metrics": metrics,
            "learning": learning,
            "memory_budget_bytes": budget,
            "rank_memory": figures,
            "message": failures[0] if failures else record.message,
            "world_size": 2,
        }
    )


def oom_rec(cell_id: str, killed: bool = True, budget: int | None = int(1.5 * GiB)) -> ResultRecord:
    """An `oom` cell the kernel killed under a per-rank budget: rank 1 reached the limit."""
    figures = [
        RankMemoryFigures(rank=0, kernel_peak_bytes=int(1.2 * GiB), limit_bytes=budget),
        RankMemoryFigures(rank=1, kernel_peak_bytes=budget and budget - 4096, limit_bytes=budget, oom_killed=killed),
    ]
    record = rec(cell_id, Status.OOM, message="rank 1 was killed by the kernel's OOM killer")
    return record.model_copy(update={"memory_budget_bytes": budget, "rank_memory": figures})


def label(records: list[ResultRecord]) -> str:
    return cell_label(next(iter(summarize(records).values())))


# ---------------------------------------------------------------- labels


def test_every_status_has_a_mark():
    assert set(MARKS) == set(Status)
    assert MARKS[Status.LEARNING_FAILED] == "📉 learning"


def test_label_shows_model_memory_next_to_the_raw_peak():
    assert label([new_rec("one_adapter-none-single")]) == "✅ 1,234 tok/s · model 812 MiB / peak 1,372 MiB"


def test_an_old_record_keeps_its_single_train_peak():
    old = rec("one_adapter-none-single", peak_mib=570)
    assert old.metrics is not None and old.metrics.model_memory_bytes is None and old.learning is None
    assert label([old]) == "✅ 1,000 tok/s · 570 MiB"
    assert label([rec("one_adapter-none-ddp", Status.ERROR)]) == "❌"


def test_learning_failed_shows_its_mark_and_what_it_measured():
    failed = new_rec("one_adapter-none-single", Status.LEARNING_FAILED, failures=(FAILURE,))
    assert label([failed]) == "📉 learning 1,234 tok/s · model 812 MiB / peak 1,372 MiB"


def test_oom_shows_the_killed_rank_its_kernel_peak_and_the_budget():
    assert label([oom_rec("one_adapter-none-ddp")]) == "💥 OOM (rank 1 at 1.50 GiB, budget 1.50 GiB)"
    # raised under the budget (MemoryError), nobody killed: the highest cgroup peak
    assert label([oom_rec("one_adapter-none-ddp", killed=False)]) == "💥 OOM (peak 1.50 GiB, budget 1.50 GiB)"
    # a CUDA OOM without a budget or cgroup figures: the mark alone, as before
    assert label([rec("one_adapter-none-ddp", Status.OOM)]) == "💥 OOM"
    both = oom_rec("one_adapter-none-ddp")
    both.rank_memory[0].oom_killed = True
    assert label([both]) == "💥 OOM (ranks 0, 1 at 1.50 GiB, budget 1.50 GiB)"
    no_peak = oom_rec("one_adapter-none-ddp").model_copy(update={"rank_memory": []})
    assert label([no_peak]) == "💥 OOM (budget 1.50 GiB)"


def test_legend_says_which_memory_figure_each_number_is():
    assert "model = peak − library baseline" in LEGEND and "max over ranks" in LEGEND
    assert "the kernel's cgroup peak under a memory budget, else peak RSS on CPU, CUDA max allocated on GPU" in LEGEND
    assert "📉 learning" in LEGEND and "learning_failed" in LEGEND and "did not fall" in LEGEND


# ---------------------------------------------------------------- trials


def test_headline_memory_is_the_median_over_ok_trials():
    records = [
        new_rec("one_adapter-none-single", trial=0, model_mib=800),
        new_rec("one_adapter-none-single", trial=1, model_mib=900),
        new_rec("one_adapter-none-single", trial=2, model_mib=820),
    ]
    summary = summarize(records)["one_adapter-none-single"]
    assert summary.model_memory_bytes == [800 * MiB, 900 * MiB, 820 * MiB]
    assert summary.headline_model_memory_bytes == 820 * MiB
    assert summary.headline_peak_bytes == (560 + 820) * MiB
    assert summary.oom is None and summary.memory_budget_bytes is None


def test_a_learning_failed_trial_fails_the_cell():
    records = [
        new_rec("one_adapter-none-single", trial=0, model_mib=800),
        new_rec("one_adapter-none-single", Status.LEARNING_FAILED, trial=1, model_mib=700, failures=(FAILURE,)),
    ]
    summary = summarize(records)["one_adapter-none-single"]
    assert (summary.status, summary.flaky, summary.message) == ("learning_failed", True, FAILURE)
    # the headline stays the ok trials' median, like throughput
    assert summary.headline_model_memory_bytes == 800 * MiB and summary.model_memory_bytes == [800 * MiB]


def test_without_an_ok_trial_the_failing_trial_numbers_are_shown():
    records = [new_rec("one_adapter-none-single", Status.LEARNING_FAILED, model_mib=700, failures=(FAILURE,))]
    summary = summarize(records)["one_adapter-none-single"]
    assert summary.tokens_per_s == [] and summary.model_memory_bytes == []
    assert (summary.headline_tokens_per_s, summary.headline_model_memory_bytes) == (1234.0, 700 * MiB)


def test_oom_summary_takes_the_shown_trial_figures():
    summary = summarize([oom_rec("one_adapter-none-ddp")])["one_adapter-none-ddp"]
    assert summary.oom == OomMemory(killed_ranks=(1,), peak_bytes=int(1.5 * GiB) - 4096, limit_bytes=int(1.5 * GiB))
    assert summary.memory_budget_bytes == int(1.5 * GiB)


# ---------------------------------------------------------------- MATRIX.md


def test_matrix_renders_learning_failed_with_its_note_and_old_records_alike():
    records = [
        rec("one_adapter-none-single", peak_mib=570),  # old-style
        new_rec("one_adapter-none-ddp", Status.LEARNING_FAILED, failures=(FAILURE,)),
        oom_rec("one_adapter-none-zero2"),
    ]
    text = render(records, "cpu", [])
    row = next(line for line in text.splitlines() if line.startswith("| one_adapter · none"))
    assert row == (
        "| one_adapter · none | ✅ 1,000 tok/s · 570 MiB | 📉 learning 1,234 tok/s · model 812 MiB / peak 1,372 MiB "
        "[1] | 💥 OOM (rank 1 at 1.50 GiB, budget 1.50 GiB) [2] |"
    )
    assert f"1. learning_failed — {FAILURE} (one_adapter-none-ddp)" in text
    assert "2. oom — rank 1 was killed by the kernel's OOM killer (one_adapter-none-zero2)" in text


def test_matrix_header_states_the_memory_budget():
    budget = int(1.5 * GiB)
    records = [new_rec("one_adapter-none-single", budget=budget), oom_rec("one_adapter-none-ddp")]
    text = render(records, "cpu", ["context"])
    head = text.split("| init · quant")[0]
    assert "Per-rank memory budget: 1.50 GiB (kernel memory cgroup)." in head
    assert "Per-rank memory budget" not in render([rec("one_adapter-none-single")], "cpu", [])
    # cells that never ran do not count as running without one
    na = rec("two_models-int8-single", Status.NOT_APPLICABLE)
    assert budget_line([*records, na]) == "Per-rank memory budget: 1.50 GiB (kernel memory cgroup)."
    mixed = budget_line([*records, rec("one_adapter-none-zero2")])
    assert mixed == "Per-rank memory budget: 1.50 GiB (kernel memory cgroup); some cells ran without one."


# ---------------------------------------------------------------- matrix.csv

NEW_COLUMNS = [
    "baseline_mib",
    "peak_mib",
    "model_memory_mib",
    "kernel_peak_mib",
    "memory_budget_mib",
    "first_loss",
    "end_loss",
    "last_loss",
    "reward_accuracy",
]


def test_csv_has_memory_and_learning_columns_empty_for_old_records():
    records = [
        new_rec("one_adapter-none-single", budget=2 * GiB),
        oom_rec("one_adapter-none-ddp"),
        rec("one_adapter-none-zero2", peak_mib=570),
    ]
    text = csv_frame(records).to_csv(index=False)
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0])
    for column in ("cell_id", "status", "tokens_per_s", "train_peak_mib", "load_peak_mib", "memory_kind", "message"):
        assert column in header
    assert set(NEW_COLUMNS) <= set(header)
    new, oom, old = rows
    assert float(new["baseline_mib"]) == 560 and float(new["peak_mib"]) == 1372
    assert float(new["model_memory_mib"]) == 812 and float(new["memory_budget_mib"]) == 2048
    assert new["kernel_peak_mib"] == ""
    assert float(new["first_loss"]) == pytest.approx(math.log(2)) and float(new["end_loss"]) == 0.45
    assert (float(new["last_loss"]), float(new["reward_accuracy"])) == (0.41, 0.75)
    # a failed cell still has its kernel figures: the max over ranks
    assert float(oom["kernel_peak_mib"]) == pytest.approx(1536 - 4096 / MiB)
    assert float(oom["memory_budget_mib"]) == 1536 and oom["model_memory_mib"] == ""
    assert all(old[c] == "" for c in NEW_COLUMNS)
    assert float(old["train_peak_mib"]) == 570


def test_predicted_oom_is_shown_apart_from_a_measured_oom_and_the_panel_says_it_is_a_prediction():
    from bench.report.site import prediction_section
    from bench.results.schema import PredictionSummary

    prediction = PredictionSummary(
        estimator_version="0.1.0",
        train_bytes=900 * MiB,
        total_bytes=960 * MiB,
        usable_bytes=768 * MiB,
        verdict="predicted_oom",
        margin_bytes=-192 * MiB,
        terms={"weights": 300 * MiB, "optimizer": 400 * MiB},
    )
    skipped = rec("two_models-none-ddp", Status.PREDICTED_OOM).model_copy(
        update={"metrics": None, "prediction": prediction, "message": "predicted to need 0.94 GiB per device"}
    )
    measured = rec("two_models-none-single", Status.OOM).model_copy(update={"metrics": None})
    text = render([skipped, measured], "t", [])
    assert "🔮 predicted OOM" in text and "💥 OOM" in text
    assert "predicted_oom — predicted to need 0.94 GiB per device" in text
    panel = prediction_section(skipped)
    assert "a prediction, not a measurement" in panel and "-192 MiB" in panel and "optimizer 400 MiB" in panel
    assert prediction_section(measured) == ""


def test_docs_state_every_status_as_the_schema_does():
    from bench.paths import PROJECT_ROOT
    from bench.report.cells import status_table
    from bench.results.schema import STATUS_MEANING, Status

    assert set(STATUS_MEANING) == set(Status)
    assert status_table() in (PROJECT_ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    for status in Status:
        assert f"{MARKS[status]} = {STATUS_MEANING[status].short}" in LEGEND
