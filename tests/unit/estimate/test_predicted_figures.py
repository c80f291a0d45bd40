"""PREDICTED.md gives each GPU cell's three memory figures, the ones `validate-estimate` holds against measurements of
that kind: `train` (CUDA max allocated), `reserved` (max reserved) and `total` (the nvidia-smi figure), each the same
number as predicted.csv's train_mib, reserved_mib and nvidia_smi_mib; a CPU cell has no reserved figure."""

import csv

from bench.estimate.predict import load_calibration, predict_cell
from bench.estimate.prediction_tables import to_markdown
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix
from bench.paths import RESULTS_DIR
from bench.units import MiB, bytes_text


def _table(markdown: str) -> list[dict[str, str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[1:]]


def test_the_committed_gpu_table_shows_allocated_reserved_and_nvidia_smi_as_the_csv_has_them():
    folder = RESULTS_DIR / "1xH100"
    shown = {row["cell"]: row for row in _table((folder / "PREDICTED.md").read_text())}
    with (folder / "predicted.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "predicted"]
    assert len(rows) > 20
    for r in rows:
        for column, field in (("train", "train_mib"), ("reserved", "reserved_mib"), ("total", "nvidia_smi_mib")):
            assert shown[r["cell_id"]][column] == bytes_text(float(r[field]) * MiB, "GB", 1), (r["cell_id"], column)
        assert float(r["train_mib"]) < float(r["reserved_mib"]) <= float(r["nvidia_smi_mib"])


def test_a_cpu_cell_has_no_reserved_figure():
    profile, workload = load_profile("cpu"), load_workload("tiny")
    cells = [c for c in expand(load_matrix()) if c.id == "one_adapter-none-single"]
    prediction = predict_cell(cells[0], profile, workload, load_calibration())
    row = _table(to_markdown([prediction], "cpu"))[0]
    assert row["reserved"] == "—" and row["train"].endswith("MiB")
