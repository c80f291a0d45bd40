"""MFU in MATRIX.md's cells (a GPU record carries metrics.mfu, bench/judge/mfu.py) and in matrix.csv: shown as the
cell's tokens/s are (the median over ok trials, else what the shown failing trial measured), nothing where no record
has one (CPU profiles: no peak)."""

import pytest

from bench.report.matrix_table import csv_frame, headline_mfu, mfu_text, render
from bench.results.schema import Status
from tests.unit.report.test_compare import rec


def gpu(cell_id: str, mfu: float | None, status: Status = Status.OK, trial: int = 0):
    record = rec(cell_id, status, tokens=9684.9, trial=trial)
    if record.metrics is None:
        record = record.model_copy(update={"metrics": rec(cell_id, tokens=9684.9).metrics})
    return record.model_copy(update={"metrics": record.metrics.model_copy(update={"mfu": mfu})})


def test_a_gpu_cell_shows_its_mfu_after_its_memory():
    text = render([gpu("two_adapters-nf4-zero2_offload", 0.10207)], "1xH200", [])
    assert "✅ 9,685 tok/s · 500 MiB · MFU 10.2% |" in text


def test_a_cpu_cell_shows_none():
    text = render([gpu("one_adapter-none-single", None)], "cpu", [])
    assert "MFU" not in text.split("## ")[0].split("| init")[1]


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        ([("ok", 0.1, 0), ("ok", 0.3, 1), ("ok", 0.2, 2)], 0.2),  # the median of the ok trials
        ([("ok", 0.1, 0), ("error", None, 1)], 0.1),  # a failing trial marks the cell; its figures are the ok ones
        ([("learning_failed", 0.05, 0)], 0.05),  # no ok trial: what the shown trial measured
        ([("ok", None, 0)], None),
    ],
)
def test_the_headline_mfu_is_taken_as_the_headline_tokens_are(trials, expected):
    records = [gpu("one_adapter-none-single", mfu, Status(status), trial) for status, mfu, trial in trials]
    assert headline_mfu(records) == (pytest.approx(expected) if expected is not None else None)


def test_the_text_and_the_csv_column():
    assert (mfu_text(0.36789), mfu_text(None)) == (" · MFU 36.8%", "")
    frame = csv_frame([gpu("one_adapter-none-single", 0.25), gpu("one_adapter-none-ddp", None)])
    assert list(frame["mfu"].isna()) == [False, True] and frame["mfu"][0] == 0.25
    assert list(frame.columns).index("mfu") == list(frame.columns).index("tokens_per_s") + 1
