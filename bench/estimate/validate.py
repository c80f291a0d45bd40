"""Prediction vs measurement for every measured cell under results/: train-peak error on model memory, and whether
the fits / OOM verdict was right where the cell ran against a memory limit (a CPU budget, or a GPU's memory)."""

from dataclasses import dataclass
from pathlib import Path

from bench.estimate import VERSION
from bench.estimate.calibrate import CALIBRATION_WORKLOAD, measured_records
from bench.estimate.predict import Calibration, load_calibration, predict_cell
from bench.paths import PROJECT_ROOT

MIB = 2**20


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
    calibrated: bool = True
    """False for a CPU cell of another workload than the one the CPU constants are fitted on (an extrapolation:
    the goal and the headline figures leave it out; the table shows it)."""
    measured_both_ways: bool = False
    """The cell was OOM-killed in one run and ran to the end in another under the same limit: it sits at the edge,
    and no single verdict is right for both runs (the latest run's outcome is the one judged)."""
    margin: float | None = None
    """Predicted margin as a fraction of usable memory (negative: over), where the cell ran against a limit."""
    method: str = "dpo"
    """The cell's training method: the headline figures are DPO's, on whose cells the constants are fitted; every
    other method's rows are summed up apart (method_summary)."""

    @property
    def error(self) -> float | None:
        if self.measured is None or self.predicted is None or self.measured <= 0:
            return None
        return (self.predicted - self.measured) / self.measured

    @property
    def verdict_right(self) -> bool | None:
        if self.verdict_measured is None or self.verdict_predicted is None:
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
                calibrated=profile.device != "cpu" or record.workload == CALIBRATION_WORKLOAD,
                method=record.method,
            )
        )
    return rows, skipped


def method_summary(rows: list[Row]) -> dict[str, dict[str, float | int | None]]:
    """Per training method other than DPO: its `ok` rows of the calibrated scope, max and mean |error|, and its
    right verdicts."""
    found: dict[str, dict[str, float | int | None]] = {}
    for method in dict.fromkeys(r.method for r in rows if r.method != "dpo" and r.calibrated):
        mine = [r for r in rows if r.method == method and r.calibrated]
        errors = [r.error for r in mine if r.error is not None and r.status == "ok"]
        verdicts = [r.verdict_right for r in mine if r.verdict_right is not None]
        found[method] = {
            "ok_cells": len(errors),
            "max_abs_error_ok": max((abs(e) for e in errors), default=None),
            "mean_error_ok": sum(errors) / len(errors) if errors else None,
            "verdicts": len(verdicts),
            "verdicts_right": sum(verdicts),
        }
    return found


def summary(rows: list[Row]) -> dict[str, float | int | None]:
    """Figures over DPO's calibrated rows (GPU, and CPU cells of the calibration workload), plus the extrapolated
    CPU rows of other workloads on their own; the other methods' rows are method_summary's."""
    rows = [r for r in rows if r.method == "dpo"]
    outside = [abs(r.error) for r in rows if r.error is not None and r.status == "ok" and not r.calibrated]
    rows = [r for r in rows if r.calibrated]
    errors = [abs(r.error) for r in rows if r.error is not None and r.status == "ok"]
    all_errors = [abs(r.error) for r in rows if r.error is not None]
    verdicts = [r.verdict_right for r in rows if r.verdict_right is not None]
    return {
        "other_workload_ok_cells": len(outside),
        "other_workload_max_abs_error": max(outside) if outside else None,
        "ok_cells": len(errors),
        "max_abs_error_ok": max(errors) if errors else None,
        "mean_abs_error_ok": sum(errors) / len(errors) if errors else None,
        "max_abs_error_all": max(all_errors) if all_errors else None,
        "verdicts": len(verdicts),
        "verdicts_right": sum(verdicts),
        "wrong_measured_both_ways": sum(1 for r in rows if r.verdict_right is False and r.measured_both_ways),
    }


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / MIB:,.0f}"


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
        f"DPO: `ok` cells of the calibrated scope (GPU; CPU workload `{CALIBRATION_WORKLOAD}`) with a measured model "
        f"memory: {s['ok_cells']}; max |error| {pct(s['max_abs_error_ok'])}, "
        f"mean |error| {pct(s['mean_abs_error_ok'])}; max |error| over every row with a figure "
        f"{pct(s['max_abs_error_all'])}. Verdicts right: {s['verdicts_right']} of {s['verdicts']}"
        f"{_edge_note(s)}. "
        f"Records skipped (no model-memory figure: older records, or no longer in the matrix): {skipped}.",
        "",
    ]
    by_method = method_summary(rows)
    if by_method:
        lines[-1:-1] = [
            "",
            "Other training methods (their terms derived from their trainers' code, nothing fitted on them; the "
            "CPU constants are DPO's), `ok` cells of the calibrated scope:",
            "",
            *(
                f"- {method}: {m['ok_cells']} cells, mean error {pct(m['mean_error_ok'])}, max |error| "
                f"{pct(m['max_abs_error_ok'])}; verdicts right {m['verdicts_right']} of {m['verdicts']}"
                for method, m in by_method.items()
            ),
        ]
    if s["other_workload_ok_cells"]:
        lines[-1:-1] = [
            f"Left out of these figures: {s['other_workload_ok_cells']} `ok` CPU cells of other workloads than "
            f"`{CALIBRATION_WORKLOAD}`, on which the CPU constants are fitted (an extrapolation): max |error| "
            f"{pct(s['other_workload_max_abs_error'])}.",
        ]
    return "\n".join(lines)


def _edge_note(s: dict) -> str:
    n = s["wrong_measured_both_ways"]
    return f" ({n} of the wrong ones on a cell measured both ways: OOM in one run, ran in another)" if n else ""


def validation_line(rows: list[Row]) -> str:
    """One line for the PREDICTED files: the estimator's current error on measured cells."""
    s = summary(rows)
    pct = lambda v: "—" if v is None else f"{v:.1%}"  # noqa: E731
    gpu = any(r.hardware not in ("cpu", "cpu-budget", "cpu-budget-4g") for r in rows)
    return (
        f"Current validation on measured cells: {s['ok_cells']} `ok` cells with a measured model memory (GPU; CPU "
        f"workload `{CALIBRATION_WORKLOAD}`): max |error| "
        f"{pct(s['max_abs_error_ok'])}, mean {pct(s['mean_abs_error_ok'])}; worst over every measured figure "
        f"{pct(s['max_abs_error_all'])}; fits/OOM verdicts right {s['verdicts_right']} of {s['verdicts']}"
        f"{_edge_note(s)}. "
        + ("" if gpu else "No GPU measurement exists yet: the GPU constants are priors (docs/estimator.md).")
    )
