"""The committed PREDICTED matrices (results/<HW>/predicted.csv, written by `python -m bench predict --write`) on the
site and in the results index, beside the measured ones and never mistaken for them.

Reading the CSVs and rendering them are separate: `load_predicted` reads, the rest are pure.
"""

import csv
from html import escape
from pathlib import Path

from pydantic import BaseModel

from bench.errors import BenchError
from bench.report.grid import build_grid
from bench.report.site import grid_table
from bench.units import MiB

PREDICTED_CSV = "predicted.csv"
PREDICTED_MD = "PREDICTED.md"
VALIDATION_PREFIX = "Current validation"
"""The line of PREDICTED.md that carries the estimator's validation error (bench/estimate/report.py)."""
PREDICTED_CSS = (
    ".predicted-matrix a,.predicted-matrix span.cell{border:1px dashed #999}"
    ".p-fits{background:#eef7ef}.p-tight{background:#fdf6dd;color:#775}.p-predicted_oom{background:#fbeee8;color:#844}"
    ".p-not_applicable{background:#eee;color:#666}.p-unknown{background:#e4ebf5;color:#555}"
    ".predicted-banner{font-weight:600;color:#844}"
)


class PredictedRow(BaseModel):
    """One cell of predicted.csv (the columns the site shows)."""

    cell_id: str
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
    return "—" if mib is None else f"{mib * MiB / 1e9:,.1f} GB"


def cell_html(row: PredictedRow) -> str:
    if row.status == "not_applicable":
        return '<span class="cell p-not_applicable">N/A</span>'
    mark = {"fits": "✅", "tight": "⚠️", "predicted_oom": "🔮"}.get(row.verdict, "?")
    span = (
        ""
        if row.range_low_mib is None or row.range_high_mib is None
        else f"{_gb(row.range_low_mib)} – {_gb(row.range_high_mib)}"
    )
    title = (
        f"PREDICTED {row.verdict}: {_gb(row.total_mib)} (range {span or '—'}) of {_gb(row.usable_mib)} usable "
        f"(margin {_gb(row.margin_mib)})"
    )
    return (
        f'<span class="cell p-{escape(row.verdict)}" title="{escape(title)}" data-cell="{escape(row.cell_id)}">'
        f"{mark} {escape(_gb(row.total_mib))}{'<br><small>' + escape(span) + '</small>' if span else ''}</span>"
    )


def predicted_table(matrix: PredictedMatrix) -> str:
    by_id = {r.cell_id: r for r in matrix.rows}
    grid = build_grid(matrix.rows)
    return grid_table(grid, lambda cell_id: cell_html(by_id[cell_id]), matrix.hardware, "matrix predicted-matrix")


def predicted_section(matrices: list[PredictedMatrix]) -> str:
    """The site's "Predicted" part: one matrix per profile, each labelled as a prediction."""
    if not matrices:
        return ""
    profiles = "".join(
        f'<section class="profile predicted" id="predicted-{escape(m.hardware)}"><h3>{escape(m.hardware)} '
        f'<span class="predicted-banner">PREDICTED, not measured</span></h3><p class="meta">workload '
        f"{escape(m.workload)} · estimator {escape(m.estimator_version)} · per-device total (the nvidia-smi figure: "
        f"allocated + allocator overhead + CUDA context + NCCL) and its range against usable memory; hover a cell for "
        f"its margin</p>"
        f'<p class="meta">{escape(m.validation)}</p>{predicted_table(m)}</section>'
        for m in matrices
    )
    return (
        f"<style>{PREDICTED_CSS}</style><h2>Predicted matrices (memory estimator, no GPU run)</h2>"
        '<p class="meta">From model configs only (docs/estimator.md): ✅ fits (the whole range), ⚠️ tight (the range '
        "straddles the device's memory), 🔮 predicted_oom (the whole range above it). "
        f'Regenerate with <code>make predicted</code>.</p><div class="matrices">{profiles}</div>'
    )


def predicted_index(matrices: list[PredictedMatrix]) -> list[str]:
    """results/README.md lines: one row per predicted profile, linking its PREDICTED.md."""
    if not matrices:
        return []
    lines = [
        "",
        "## Predicted (memory estimator; not measured)",
        "",
        "| hardware | predicted matrix | workload | estimator | fits | tight | predicted_oom |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in matrices:
        fits = sum(r.verdict == "fits" for r in m.rows if r.status != "not_applicable")
        tight = sum(r.verdict == "tight" for r in m.rows if r.status != "not_applicable")
        ooms = sum(r.verdict == "predicted_oom" for r in m.rows if r.status != "not_applicable")
        lines.append(
            f"| {m.hardware} | [{PREDICTED_MD}]({m.hardware}/{PREDICTED_MD}) | {m.workload} | {m.estimator_version} "
            f"| {fits} | {tight} | {ooms} |"
        )
    return lines
