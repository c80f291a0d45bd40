"""The committed PREDICTED matrices (results/<HW>/predicted.csv, written by `python -m bench predict --write`) on the
site and in the results index, beside the measured ones and never mistaken for them.

Reading the CSVs and rendering them are separate: `load_predicted` reads, the rest are pure.
"""

import csv
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from bench.errors import BenchError
from bench.matrix.axes import Method
from bench.report.cells import method_title
from bench.report.grid import build_grid, in_axis_order
from bench.report.site import GridView, grid_view
from bench.report.templating import call
from bench.units import MiB, bytes_text

PREDICTED_CSV = "predicted.csv"
PREDICTED_MD = "PREDICTED.md"
VALIDATION_PREFIX = "Current validation"
"""The line of PREDICTED.md that carries the estimator's validation error (bench/estimate/prediction_tables.py)."""


class PredictedRow(BaseModel):
    """One cell of predicted.csv (the columns the site shows)."""

    cell_id: str
    method: str = "dpo"
    """Files written before methods were an axis have no method column: their cells are DPO's."""
    init: str
    quant: str
    backend: str
    status: str
    verdict: str
    margin_mib: float | None
    total_mib: float | None
    usable_mib: float | None
    range_low_mib: float | None = None
    range_high_mib: float | None = None
    """Where the measured total is expected (bench/estimate/uncertainty.py); absent in older files."""
    fit_probability: float | None = None
    """The share of comparable errors under which it fits; absent in older files."""


class PredictedMatrix(BaseModel):
    hardware: str
    workload: str
    estimator_version: str
    validation: str
    """PREDICTED.md's validation line, as committed with the matrix."""
    rows: list[PredictedRow]


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def read_predicted(folder: Path) -> PredictedMatrix:
    path = folder / PREDICTED_CSV
    with path.open(encoding="utf-8", newline="") as fh:
        lines = list(csv.DictReader(fh))
    if not lines:
        raise BenchError(f"{path}: no predicted cells")
    missing = {"init", "quant", "backend"} - set(lines[0])
    if missing:
        raise BenchError(
            f"{path}: written by an older estimator (no {', '.join(sorted(missing))} column): run make predicted"
        )
    rows = [
        PredictedRow(
            cell_id=line["cell_id"],
            method=line.get("method") or "dpo",
            init=line["init"],
            quant=line["quant"],
            backend=line["backend"],
            status=line["status"],
            verdict=line["verdict"] or line["status"],
            margin_mib=_number(line["margin_mib"]),
            total_mib=_number(line["total_mib"]),
            usable_mib=_number(line["usable_mib"]),
            range_low_mib=_number(line.get("range_low_mib", "")),
            range_high_mib=_number(line.get("range_high_mib", "")),
            fit_probability=_number(line.get("fit_probability", "")),
        )
        for line in lines
    ]
    md = folder / PREDICTED_MD
    validation = ""
    if md.is_file():
        validation = next(
            (
                line.strip()
                for line in md.read_text(encoding="utf-8").splitlines()
                if line.startswith(VALIDATION_PREFIX)
            ),
            "",
        )
    first = lines[0]
    return PredictedMatrix(
        hardware=first["hardware"],
        workload=first["workload"],
        estimator_version=first["estimator_version"],
        validation=validation,
        rows=rows,
    )


def load_predicted(results_dir: Path) -> list[PredictedMatrix]:
    """Every results/<HW>/predicted.csv, by hardware name."""
    return [read_predicted(p.parent) for p in sorted(results_dir.glob(f"*/{PREDICTED_CSV}"))]


def _gb(mib: float | None) -> str:
    return bytes_text(None if mib is None else mib * MiB, "GB", 1)


@dataclass(frozen=True)
class PredictedCell:
    cell_id: str
    verdict: str | None
    """None: not applicable."""
    mark: str
    total: str
    title: str


def predicted_cell(row: PredictedRow) -> PredictedCell:
    if row.status == "not_applicable":
        return PredictedCell(row.cell_id, None, "", "", "")
    mark = {"fits": "✅", "likely_fits": "☑️", "likely_oom": "⚠️", "oom": "🔮"}.get(row.verdict, "?")
    span = (
        "—"
        if row.range_low_mib is None or row.range_high_mib is None
        else f"{_gb(row.range_low_mib)} – {_gb(row.range_high_mib)}"
    )
    chance = "" if row.fit_probability is None else f", P(fit) {row.fit_probability:.0%}"
    title = (
        f"PREDICTED {row.verdict}{chance}: {_gb(row.total_mib)} (80 % range {span}) of {_gb(row.usable_mib)} "
        f"usable (margin {_gb(row.margin_mib)})"
    )
    return PredictedCell(row.cell_id, row.verdict, mark, _gb(row.total_mib), title)


@dataclass(frozen=True)
class PredictedView:
    hardware: str
    workload: str
    estimator_version: str
    validation: str
    grids: list[tuple[str, GridView]]
    """One grid per training method, DPO's first and untitled (DPO is the default method)."""
    cells: dict[str, PredictedCell]


def predicted_view(matrix: PredictedMatrix) -> PredictedView:
    return PredictedView(
        hardware=matrix.hardware,
        workload=matrix.workload,
        estimator_version=matrix.estimator_version,
        validation=matrix.validation,
        grids=[
            (
                "" if method == Method.DPO else method_title(method),
                grid_view(build_grid(r for r in matrix.rows if r.method == method)),
            )
            for method in in_axis_order((r.method for r in matrix.rows), Method)
        ],
        cells={r.cell_id: predicted_cell(r) for r in matrix.rows},
    )


def predicted_section(matrices: list[PredictedMatrix]) -> str:
    """The site's "Predicted" part: one matrix per profile, each labelled as a prediction."""
    if not matrices:
        return ""
    return call("predicted.html", "predicted_section", [predicted_view(m) for m in matrices])


VERDICTS_COUNTED = ("fits", "likely_fits", "likely_oom", "oom")


def predicted_index(matrices: list[PredictedMatrix]) -> list[str]:
    """results/README.md lines: one row per predicted profile, linking its PREDICTED.md."""
    if not matrices:
        return []
    lines = [
        "",
        "## Predicted (memory estimator; not measured)",
        "",
        "| hardware | predicted matrix | workload | estimator | fits | likely_fits | likely_oom | oom |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in matrices:
        counts = [sum(r.verdict == v for r in m.rows if r.status != "not_applicable") for v in VERDICTS_COUNTED]
        lines.append(
            f"| {m.hardware} | [{PREDICTED_MD}]({m.hardware}/{PREDICTED_MD}) | {m.workload} | {m.estimator_version} "
            f"| {' | '.join(str(n) for n in counts)} |"
        )
    return lines
