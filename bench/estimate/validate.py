"""Prediction vs measurement for every measured cell under results/: train-peak error on model memory, and whether
the fits / OOM verdict was right where the cell ran against a memory limit (a CPU budget, or a GPU's memory)."""

from dataclasses import dataclass
from pathlib import Path

from bench.estimate import VERSION
from bench.estimate.calibrate import measured_records
from bench.estimate.predict import Calibration, load_calibration, predict_cell
from bench.paths import PROJECT_ROOT
from bench.units import MiB


@dataclass
class Row:
    source: str
    hardware: str
    cell_id: str
    status: str
    measured: float | None
    predicted: float | None
    verdict_measured: str | None
    verdict_predicted: str | None
    fitted: bool
    measured_both_ways: bool = False
    """The cell was OOM-killed in one run and ran to the end in another under the same limit: it sits at the edge,
    and no single verdict is right for both runs (the latest run's outcome is the one judged)."""
    margin: float | None = None
    """Predicted margin as a fraction of usable memory (negative: over), where the cell ran against a limit."""
    kind: str | None = None
    """The prediction's error kind (bench/estimate/uncertainty.cell_kind): rows of a kind make its range."""

    @property
    def error(self) -> float | None:
        if self.measured is None or self.predicted is None or self.measured <= 0:
            return None
        return (self.predicted - self.measured) / self.measured

    @property
    def verdict_right(self) -> bool | None:
        """None where there is nothing to judge, and for a `tight` prediction: its range straddles the limit, so
        either outcome is within it (summary counts these apart)."""
        if self.verdict_measured is None or self.verdict_predicted in (None, "tight"):
            return None
        return self.verdict_measured == self.verdict_predicted


def _setup(hardware: str):
    from bench.matrix.profiles import load_profile, load_workload
    from bench.matrix.scenario import expand, load_matrix

    profile = load_profile(hardware)
    return profile, load_workload(profile.workload), {c.id: c for c in expand(load_matrix())}


def validate(results: Path = PROJECT_ROOT / "results", calibration: Calibration | None = None) -> tuple[list[Row], int]:
    """Rows for every measured cell, and how many records were skipped (no model-memory figure:
    older records, or a cell not in the current matrix)."""
    calibration = calibration or load_calibration()
    fitted = set(calibration.fitted_on)
    setups: dict[str, tuple] = {}
    rows: list[Row] = []
    skipped = 0
    for m in measured_records(results):
        record = m.record
        if record.hardware not in setups:
            try:
                setups[record.hardware] = _setup(record.hardware)
            except Exception:
                setups[record.hardware] = (None, None, {})
        profile, workload, cells = setups[record.hardware]
        cell = cells.get(record.cell_id)
        if cell is None or workload is None or workload.name != record.workload:
            skipped += 1
            continue
        if m.model_memory is None and not (m.oom and record.memory_budget_bytes is not None):
            skipped += 1
            continue
        p = predict_cell(cell, profile, workload, calibration)
        limited = record.memory_budget_bytes is not None or profile.device != "cpu"
        rows.append(
            Row(
                source=m.source,
                hardware=record.hardware,
                cell_id=record.cell_id,
                status=str(record.status),
                measured=m.model_memory,
                predicted=p.train_bytes,
                verdict_measured=("predicted_oom" if m.oom else "fits") if limited else None,
                verdict_predicted=p.verdict if limited else None,
                fitted=f"{m.source}:{record.cell_id}" in fitted,
                measured_both_ways=limited and len(m.outcomes) == 2,
                margin=p.margin_bytes / p.usable_bytes
                if limited and p.margin_bytes is not None and p.usable_bytes
                else None,
                kind=p.error_kind,
            )
        )
    return rows, skipped


def summary(rows: list[Row]) -> dict[str, float | int | None]:
    errors = [abs(r.error) for r in rows if r.error is not None and r.status == "ok"]
    all_errors = [abs(r.error) for r in rows if r.error is not None]
    verdicts = [r.verdict_right for r in rows if r.verdict_right is not None]
    return {
        "ok_cells": len(errors),
        "max_abs_error_ok": max(errors) if errors else None,
        "mean_abs_error_ok": sum(errors) / len(errors) if errors else None,
        "max_abs_error_all": max(all_errors) if all_errors else None,
        "verdicts": len(verdicts),
        "verdicts_right": sum(verdicts),
        "tight": sum(1 for r in rows if r.verdict_measured is not None and r.verdict_predicted == "tight"),
        "wrong_measured_both_ways": sum(1 for r in rows if r.verdict_right is False and r.measured_both_ways),
    }


def errors_by_kind(rows: list[Row]) -> dict[str, list[float]]:
    """The relative errors of the `ok` rows, by error kind: what a prediction's range is made of."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.error is not None and r.status == "ok" and r.kind is not None:
            out.setdefault(r.kind, []).append(r.error)
    return out


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / MiB:,.0f}"


def to_markdown(rows: list[Row], skipped: int) -> str:
    s = summary(rows)
    lines = [
        f"Estimator {VERSION}: prediction vs measurement (model memory per rank = peak − library baseline on CPU, "
        "CUDA max allocated on GPU; verdicts where the cell ran against a memory limit).",
        "",
        "| source | hardware | cell | status | measured MiB | predicted MiB | error "
        "| verdict measured | predicted | right | fitted on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = "—" if r.error is None else f"{r.error:+.1%}"
        right = {None: "—", True: "✅", False: "❌"}[r.verdict_right] + (
            " (OOM in one run, ran in another)" if r.measured_both_ways else ""
        )
        lines.append(
            f"| {r.source} | {r.hardware} | {r.cell_id} | {r.status} | {_mib(r.measured)} | {_mib(r.predicted)} "
            f"| {err} "
            f"| {r.verdict_measured or '—'} | {r.verdict_predicted or '—'} | {right} | {'yes' if r.fitted else ''} |"
        )
    pct = lambda v: "—" if v is None else f"{v:.1%}"  # noqa: E731
    lines += [
        "",
        f"`ok` cells with a measured model memory: {s['ok_cells']}; max |error| {pct(s['max_abs_error_ok'])}, "
        f"mean |error| {pct(s['mean_abs_error_ok'])}; max |error| over every row with a figure "
        f"{pct(s['max_abs_error_all'])}. Verdicts right: {s['verdicts_right']} of {s['verdicts']}, and "
        f"{s['tight']} `tight` (the range straddles the limit: not judged)"
        f"{_edge_note(s)}. "
        f"Records skipped (no model-memory figure: older records, or no longer in the matrix): {skipped}.",
        "",
    ]
    return "\n".join(lines)


def _edge_note(s: dict) -> str:
    n = s["wrong_measured_both_ways"]
    return f" ({n} of the wrong ones on a cell measured both ways: OOM in one run, ran in another)" if n else ""


def validation_line(rows: list[Row], published_rows: list | None = None) -> str:
    """One line for the PREDICTED files: the estimator's current error on measured cells and, where given, on the
    published GPU figures."""
    s = summary(rows)
    pct = lambda v: "—" if v is None else f"{v:.1%}"  # noqa: E731
    line = (
        f"Current validation on measured cells: {s['ok_cells']} `ok` cells with a measured model memory: max |error| "
        f"{pct(s['max_abs_error_ok'])}, mean {pct(s['mean_abs_error_ok'])}; worst over every measured figure "
        f"{pct(s['max_abs_error_all'])}; fits/OOM verdicts right {s['verdicts_right']} of {s['verdicts']} "
        f"(+ {s['tight']} tight)."
    )
    if published_rows is not None:
        from bench.estimate.published import LIMIT

        comparable = [r for r in published_rows if r.comparable]
        within = sum(1 for r in comparable if abs(r.error) <= LIMIT)
        line += (
            f" No GPU run of this project yet: on published GPU figures (validate-estimate --published) {within} of "
            f"{len(comparable)} within {LIMIT:.0%}, whose spread makes the GPU ranges (docs/estimator.md)."
        )
    return line


def current_spreads(rows: list[Row], published_rows: list | None = None):
    """The ranges' spreads from these rows and the published GPU figures (bench/estimate/uncertainty.py)."""
    from bench.estimate import published, uncertainty

    published_rows = published.published_rows() if published_rows is None else published_rows
    errors = errors_by_kind(rows) | published.errors_by_kind(published_rows)
    return uncertainty.Spreads(estimator_version=VERSION, kinds=uncertainty.spreads_of(errors))


def write_current_spreads(rows: list[Row], published_rows: list | None = None) -> Path:
    from bench.estimate import uncertainty

    uncertainty.write_spreads(current_spreads(rows, published_rows))
    return uncertainty.SPREAD_FILE
