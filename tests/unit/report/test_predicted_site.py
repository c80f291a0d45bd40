"""The committed PREDICTED matrices on the site and in the results index: read back, placed, labelled."""

import pytest

from bench.errors import BenchError
from bench.estimate.prediction_tables import write_predicted
from bench.report.cells import VERDICT_BADGES
from bench.report.predicted_site import (
    PREDICTED_CSV,
    load_predicted,
    predicted_index,
    predicted_section,
    read_predicted,
)
from bench.report.site import render_site


@pytest.fixture(scope="module")
def predicted_dir(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    write_predicted("2xA10", results, "Current validation on measured cells: a line for the test.")
    return results


def test_reads_back_what_predict_wrote(predicted_dir):
    (matrix,) = load_predicted(predicted_dir)
    assert (matrix.hardware, matrix.workload) == ("2xA10", "phi-2")
    assert matrix.validation == "Current validation on measured cells: a line for the test."
    row = next(r for r in matrix.rows if r.cell_id == "two_models-none-ddp")
    assert (row.init, row.quant, row.backend) == ("two_models", "none", "ddp")
    assert row.verdict in ("fits", "likely_fits", "likely_oom", "oom")
    assert row.usable_mib == pytest.approx(24e9 / 2**20, rel=0.1)
    assert row.range_low_mib < row.range_high_mib and 0.0 <= row.fit_probability <= 1.0


def test_section_is_labelled_and_marks_every_oom_and_likely_oom(predicted_dir):
    (matrix,) = load_predicted(predicted_dir)
    html = predicted_section([matrix])
    assert "PREDICTED, not measured" in html and 'id="predicted-2xA10"' in html
    for verdict in ("oom", "likely_oom"):
        found = sum(r.verdict == verdict for r in matrix.rows if r.status != "not_applicable")
        assert found > 0 and html.count(f">{VERDICT_BADGES[verdict]}</span>") == found + 1  # + the legend's
    assert "🔮" not in html and "✅" not in html, "the site's marks are text (no emoji font needed)"
    assert "P(fit)" in html  # each cell's title gives its probability of fitting
    site = render_site([], "now", html)
    assert site.index("<h2>Matrices</h2>") < site.index("Predicted matrices")


def test_index_row_counts_verdicts(predicted_dir):
    (matrix,) = load_predicted(predicted_dir)
    lines = predicted_index([matrix])
    row = next(line for line in lines if line.startswith("| 2xA10"))
    counts = [
        sum(r.verdict == v for r in matrix.rows if r.status != "not_applicable")
        for v in ("fits", "likely_fits", "likely_oom", "oom")
    ]
    assert "[PREDICTED.md](2xA10/PREDICTED.md)" in row and row.endswith(" | ".join(map(str, counts)) + " |")
    assert predicted_index([]) == [] and predicted_section([]) == ""


def test_a_csv_from_an_older_estimator_is_a_clear_error(tmp_path):
    (tmp_path / PREDICTED_CSV).write_text("estimator_version,hardware,workload,cell_id,status\n0.1.0,x,y,z,predicted\n")
    with pytest.raises(BenchError, match=r"older estimator.*make predicted"):
        read_predicted(tmp_path)
