"""Prediction vs measurement for every measured cell under results/: train-peak error on model memory, and whether
the fits / OOM verdict was right where the cell ran against a memory limit (a CPU budget, or a GPU's memory).

No model-memory term is fitted (estimator 0.3.0: bench/estimate/cpu_terms.py holds measured process terms), so the
predicted model memory of every row is out of sample. Only the CPU library baseline is fitted (calibrate.py), and
it enters the verdict against a budget: `held_out` predicts each row with baselines fitted without any record of
its cell (leave-one-cell-out over the calibration records), and the verdicts judged are the held-out ones.
Figures are given per workload (tiny, small: the goal is every `ok` cell within 15 % on both) and per training
method.
"""

from dataclasses import dataclass
from pathlib import Path

from bench.estimate import VERSION, uncertainty
from bench.estimate.calibrate import calibration_records, fit_records, measured_records
from bench.estimate.predict import Calibration, load_calibration, predict_cell
from bench.estimate.uncertainty import FITTING
from bench.paths import PROJECT_ROOT
from bench.results.tracked import tracked_results
from bench.units import bytes_text


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
    workload: str = ""
    measured_both_ways: bool = False
    """The cell was OOM-killed in one run and ran to the end in another under the same limit: it sits at the edge,
    and no single verdict is right for both runs (the latest run's outcome is the one judged)."""
    margin: float | None = None
    """Predicted margin as a fraction of usable memory (negative: over), where the cell ran against a limit."""
    held_out: float | None = None
    """Predicted by constants fitted without any record of this cell (see the module docstring)."""
    verdict_held_out: str | None = None
    margin_held_out: float | None = None
    method: str = "dpo"
    """The cell's training method: the headline figures are DPO's; every other method's rows are summed up apart
    (method_summary)."""
    kind: str | None = None
    """The prediction's error kind (bench/estimate/uncertainty.cell_kind): rows of a kind make its range."""
    device: str = "cpu"
    """The profile's device: the headline figures are the CPU rows'; the GPU rows are gpu_markdown's."""
    reserved: tuple[float | None, float | None] = (None, None)
    """GPU: (measured, predicted) torch.cuda.max_memory_reserved."""
    nvml: tuple[float | None, float | None] = (None, None)
    """GPU: (measured, predicted) the process's device memory as NVML shows it (the figure held against the card)."""

    @property
    def row_id(self) -> str:
        """Its id in bench/estimate/held_out.txt."""
        return f"{self.source}:{self.cell_id}"

    @property
    def range_error(self) -> float | None:
        """The error a prediction's range is made of: a GPU row's NVML figure's (the one held against the card), a
        CPU row's model memory's."""
        return _error(self.nvml[1], self.nvml[0]) if self.nvml[0] is not None else self.error

    @property
    def error(self) -> float | None:
        return _error(self.predicted, self.measured)

    @property
    def held_out_error(self) -> float | None:
        return _error(self.held_out, self.measured)

    @property
    def verdict_right(self) -> bool | None:
        return _right(self.verdict_measured, self.verdict_predicted)

    @property
    def held_out_verdict_right(self) -> bool | None:
        return _right(self.verdict_measured, self.verdict_held_out)


def _error(predicted: float | None, measured: float | None) -> float | None:
    if measured is None or predicted is None or measured <= 0:
        return None
    return (predicted - measured) / measured


def _right(measured: str | None, predicted: str | None) -> bool | None:
    """Whether the verdict's side is the outcome's (`likely_fits` is right for a cell that ran, `likely_oom` for one
    that ran out); None where there is nothing to judge."""
    if measured is None or predicted in (None, "unknown"):
        return None
    return (measured == "fits") == (predicted in FITTING)


def _setup(hardware: str):
    from bench.matrix.profiles import load_profile, load_workload
    from bench.matrix.scenario import expand, load_matrix

    profile = load_profile(hardware)
    return profile, load_workload(profile.workload), {c.id: c for c in expand(load_matrix())}


def validate(results: Path | None = None, calibration: Calibration | None = None) -> tuple[list[Row], int]:
    """Rows for every measured cell under `results` (default: the runs git tracks), and how many records were
    skipped (no model-memory figure: older records, or a cell not in the current matrix)."""
    results = results or tracked_results()
    calibration = calibration or load_calibration()
    fitted = set(calibration.fitted_on)
    held_out = _leave_one_cell_out(results)
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
        if m.model_memory is None and not (
            m.oom and (record.memory_budget_bytes is not None or profile.device != "cpu")
        ):
            skipped += 1
            continue
        limited = record.memory_budget_bytes is not None or profile.device != "cpu"
        p = predict_cell(cell, profile, workload, calibration, cpu=m.cpu)
        fold = held_out.get(record.cell_id, calibration)
        h = None if fold is None else predict_cell(cell, profile, workload, fold, cpu=m.cpu)
        rows.append(
            Row(
                source=m.source,
                hardware=record.hardware,
                cell_id=record.cell_id,
                status=str(record.status),
                measured=m.model_memory,
                predicted=p.train_bytes,
                verdict_measured=("oom" if m.oom else "fits") if limited else None,
                verdict_predicted=p.verdict if limited else None,
                fitted=f"{m.source}:{record.cell_id}" in fitted,
                measured_both_ways=limited and len(m.outcomes) == 2,
                margin=_margin(p) if limited else None,
                workload=record.workload,
                held_out=None if h is None else h.train_bytes,
                verdict_held_out=h.verdict if limited and h is not None else None,
                margin_held_out=_margin(h) if limited and h is not None else None,
                method=record.method,
                kind=p.error_kind,
                device=str(profile.device),
                reserved=(getattr(record.metrics, "cuda_reserved_peak_bytes", None), p.reserved_bytes),
                nvml=(getattr(record.metrics, "nvml_peak_bytes", None), p.nvidia_smi_bytes),
            )
        )
    return rows, skipped


LIKELY = ("likely_fits", "likely_oom")


def _margin(p) -> float | None:
    return p.margin_bytes / p.usable_bytes if p.margin_bytes is not None and p.usable_bytes else None


def _leave_one_cell_out(results: Path) -> dict[str, Calibration | None]:
    """For every cell id among the calibration records, the constants fitted on the others (None: the others
    cannot fit every constant, so the cell has no held-out prediction)."""
    records = calibration_records(results)
    return {
        cell_id: _fit_or_none([m for m in records if m.record.cell_id != cell_id])
        for cell_id in dict.fromkeys(m.record.cell_id for m in records)
    }


def _fit_or_none(records) -> Calibration | None:
    try:
        return fit_records(records)
    except ValueError:
        return None


def method_summary(rows: list[Row]) -> dict[str, dict[str, float | int | None]]:
    """Per training method other than DPO: its `ok` rows, max and mean |error|, and its right verdicts."""
    found: dict[str, dict[str, float | int | None]] = {}
    for method in dict.fromkeys(r.method for r in rows if r.method != "dpo"):
        mine = [r for r in rows if r.method == method]
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


def workload_summary(rows: list[Row]) -> dict[str, dict[str, float | int | None]]:
    """Per workload, every method's `ok` rows: how many and their max |error| (the goal: within 15 % on each)."""
    found: dict[str, dict[str, float | int | None]] = {}
    for workload in sorted({r.workload for r in rows}):
        errors = [abs(r.error) for r in rows if r.workload == workload and r.error is not None and r.status == "ok"]
        found[workload] = {"ok_cells": len(errors), "max_abs_error_ok": max(errors, default=None)}
    return found


def plus_one_rank_summary(rows: list[Row]) -> dict[str, float | int | None]:
    """DPO's offload backends' cells on one rank (`+1rank`): how many `ok` ones and their error range (the other
    methods' are in method_summary's, with the rest of their cells)."""
    errors = [
        r.error
        for r in rows
        if r.method == "dpo" and "+1rank" in r.cell_id and r.error is not None and r.status == "ok"
    ]
    return {
        "ok_cells": len(errors),
        "min_error_ok": min(errors, default=None),
        "max_error_ok": max(errors, default=None),
    }


def summary(rows: list[Row]) -> dict[str, float | int | None]:
    """Figures over DPO's CPU rows (every workload; the other methods' rows are method_summary's, the GPU rows
    gpu_markdown's): held out (each row's baselines fitted without its own cell's records: the verdicts) and
    fitted-on (the rows the baselines were fitted on, in-sample)."""
    rows = [r for r in rows if r.method == "dpo" and r.device == "cpu"]
    errors = [abs(r.held_out_error) for r in rows if r.held_out_error is not None and r.status == "ok"]
    all_errors = [abs(r.held_out_error) for r in rows if r.held_out_error is not None]
    fitted = [abs(r.error) for r in rows if r.fitted and r.error is not None and r.status == "ok"]
    verdicts = [r.held_out_verdict_right for r in rows if r.held_out_verdict_right is not None]
    return {
        "ok_cells": len(errors),
        "max_abs_error_ok": max(errors) if errors else None,
        "mean_abs_error_ok": sum(errors) / len(errors) if errors else None,
        "max_abs_error_all": max(all_errors) if all_errors else None,
        "fitted_ok_cells": len(fitted),
        "fitted_max_abs_error": max(fitted) if fitted else None,
        "fitted_mean_abs_error": sum(fitted) / len(fitted) if fitted else None,
        "verdicts": len(verdicts),
        "verdicts_right": sum(verdicts),
        "likely": sum(1 for r in rows if r.verdict_measured is not None and r.verdict_held_out in LIKELY),
        "likely_right": sum(1 for r in rows if r.verdict_held_out in LIKELY and r.held_out_verdict_right),
        "wrong_measured_both_ways": sum(1 for r in rows if r.held_out_verdict_right is False and r.measured_both_ways),
    }


def gpu_markdown(rows: list[Row]) -> list[str]:
    """The GPU rows' three figures: allocated (the model memory above), reserved and NVML, each against its
    prediction."""
    gpu = [r for r in rows if r.reserved[0] is not None or r.nvml[0] is not None]
    if not gpu:
        return []
    lines = [
        "",
        "GPU cells: measured / PREDICTED MiB and error of torch's allocated and reserved peaks and NVML's process "
        "figure (the one held against the card).",
        "",
        "| source | cell | status | allocated | error | reserved | error | NVML | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in gpu:
        figures = [(r.measured, r.predicted), r.reserved, r.nvml]
        cols = " | ".join(f"{_mib(m)} / {_mib(p)} | {_signed(_error(p, m))}" for m, p in figures)
        lines.append(f"| {r.source} | {r.cell_id} | {r.status} | {cols} |")
    pickers = {
        "allocated": lambda r: (r.measured, r.predicted),
        "reserved": lambda r: r.reserved,
        "NVML": lambda r: r.nvml,
    }
    errors = {name: [_error(*reversed(pick(r))) for r in gpu if r.status == "ok"] for name, pick in pickers.items()}
    errors = {name: [e for e in found if e is not None] for name, found in errors.items()}
    lines += [
        "",
        "GPU `ok` cells: "
        + "; ".join(
            f"{name} {len(e)} cells, errors {_signed(min(e))} .. {_signed(max(e))}" for name, e in errors.items() if e
        )
        + ".",
    ]
    return lines


def _mib(value: float | None) -> str:
    return bytes_text(value, "MiB", 0, suffix=False)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def to_markdown(rows: list[Row], skipped: int, covered: "list[Covered] | None" = None) -> str:
    """The table and its figures; `covered`: the held-out rows against their intervals (coverage)."""
    s = summary(rows)
    lines = [
        f"Estimator {VERSION}: prediction vs measurement (model memory per rank = peak − library baseline on CPU, "
        "CUDA max allocated on GPU; verdicts where the cell ran against a memory limit). `held out`: predicted by "
        "constants fitted without any record of the cell; `fitted`: by the committed constants, in-sample on the "
        "rows marked fitted on.",
        "",
        "| source | hardware | cell | status | measured MiB | held out MiB | held-out error | fitted MiB "
        "| fitted error | verdict measured | held out | right | fitted on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        right = {None: "—", True: "✅", False: "❌"}[r.held_out_verdict_right] + (
            " (OOM in one run, ran in another)" if r.measured_both_ways else ""
        )
        lines.append(
            f"| {r.source} | {r.hardware} | {r.cell_id} | {r.status} | {_mib(r.measured)} | {_mib(r.held_out)} "
            f"| {_signed(r.held_out_error)} | {_mib(r.predicted)} | {_signed(r.error)} "
            f"| {r.verdict_measured or '—'} | {r.verdict_held_out or '—'} | {right} | {'yes' if r.fitted else ''} |"
        )
    lines += _summary_lines(rows, skipped, s)
    one_rank = plus_one_rank_summary(rows)
    if one_rank["ok_cells"]:
        lines[-1:-1] = [
            f"DPO's offload backends on one rank (`+1rank`): {one_rank['ok_cells']} `ok` cells, errors "
            f"{_signed(one_rank['min_error_ok'])} .. {_signed(one_rank['max_error_ok'])}.",
        ]
    lines[-1:-1] = gpu_markdown(rows)
    if covered is not None:
        lines[-1:-1] = ["", coverage_line(covered)]
    by_method = method_summary(rows)
    if by_method:
        lines[-1:-1] = [
            "",
            "Other training methods (their terms derived from their trainers' code, nothing fitted on them), `ok` "
            "cells:",
            "",
            *(
                f"- {method}: {m['ok_cells']} cells, mean error {_pct(m['mean_error_ok'])}, max |error| "
                f"{_pct(m['max_abs_error_ok'])}; verdicts right {m['verdicts_right']} of {m['verdicts']}"
                for method, m in by_method.items()
            ),
        ]
    return "\n".join(lines)


def _edge_note(s: dict) -> str:
    n = s["wrong_measured_both_ways"]
    return f" ({n} of the wrong ones on a cell measured both ways: OOM in one run, ran in another)" if n else ""


def validation_line(rows: list[Row], published_rows: list | None = None) -> str:
    """One line for the PREDICTED files: the estimator's current error on measured cells and, where given, on the
    published GPU figures."""
    s = summary(rows)
    line = (
        f"Current validation on measured cells (no model-memory constant fitted): {s['ok_cells']} DPO `ok` CPU cells "
        f"with a measured model memory: max |error| {_pct(s['max_abs_error_ok'])}, mean "
        f"{_pct(s['mean_abs_error_ok'])}; worst over every measured figure {_pct(s['max_abs_error_all'])}; "
        f"fits/OOM verdicts right {s['verdicts_right']} of {s['verdicts']} ({s['likely_right']} of {s['likely']} "
        f"`likely_*`){_edge_note(s)}."
    )
    gpu = [e for r in rows if r.status == "ok" and r.nvml[0] is not None and (e := _error(r.nvml[1], r.nvml[0]))]
    if gpu:
        line += (
            f" GPU cells measured by this project: {len(gpu)} `ok`, NVML figure errors {_signed(min(gpu))} .. "
            f"{_signed(max(gpu))}."
        )
    if published_rows is not None:
        from bench.estimate.published import LIMIT

        comparable = [r for r in published_rows if r.comparable]
        within = sum(1 for r in comparable if abs(r.error) <= LIMIT)
        line += (
            f" On published GPU figures (validate-estimate --published) {within} of {len(comparable)} within "
            f"{LIMIT:.0%}; with this project's GPU cells they make the GPU ranges (docs/estimator.md). "
            + coverage_line(coverage(rows, published_rows, current_spreads(rows, published_rows)))
        )
    return line


def errors_by_kind(rows: list[Row], held_out: frozenset[str] = frozenset()) -> dict[str, list[float]]:
    """The range errors of the `ok` rows by error kind, the held-out rows left out: what the pools are made of."""
    out: dict[str, list[float]] = {}
    for r in rows:
        error = r.range_error
        if error is not None and r.status == "ok" and r.kind is not None and r.row_id not in held_out:
            out.setdefault(r.kind, []).append(error)
    return out


def current_spreads(rows: list[Row], published_rows: list | None = None) -> uncertainty.Spreads:
    """The pools from these rows and the published GPU figures, the held-out rows left out."""
    from bench.estimate import published

    published_rows = published.published_rows() if published_rows is None else published_rows
    held_out = uncertainty.held_out_ids()
    found = errors_by_kind(rows, held_out)
    for kind, errors in published.errors_by_kind(published_rows, held_out).items():
        found.setdefault(kind, []).extend(errors)
    return uncertainty.Spreads(estimator_version=VERSION, kinds=uncertainty.spreads_of(found))


@dataclass
class Covered:
    row_id: str
    device: str
    error_kind: str
    range_kind: str | None
    error: float
    interval: tuple[float, float] | None

    @property
    def inside(self) -> bool:
        return self.interval is not None and self.interval[0] <= self.error <= self.interval[1]


def coverage(rows: list[Row], published_rows: list, spreads: uncertainty.Spreads) -> list[Covered]:
    """Every held-out row with an error, against the interval the other rows give its kind: the measurement is inside
    the stated interval exactly where its error lies between the pool's 10th and 90th percentiles."""
    held_out = uncertainty.held_out_ids()
    found = [
        (r.row_id, r.device, r.kind, r.range_error)
        for r in rows
        if r.row_id in held_out and r.status == "ok" and r.kind is not None and r.range_error is not None
    ]
    found += [
        (r.row_id, "cuda", r.error_kind, r.memory_error)
        for r in published_rows
        if r.row_id in held_out and r.comparable and r.memory_error is not None
    ]
    covered = []
    for row_id, device, kind, error in found:
        pool = uncertainty.spread_for(kind, spreads)
        interval = None if pool is None else (pool[1].low, pool[1].high)
        covered.append(Covered(row_id, device, kind, None if pool is None else pool[0], error, interval))
    return covered


def coverage_line(covered: list[Covered]) -> str:
    """How often a held-out measurement fell inside its stated interval, per device and in all."""
    parts = []
    for name, mine in [("all", covered), *((d, [c for c in covered if c.device == d]) for d in ("cpu", "cuda"))]:
        if mine:
            wider = sum(c.range_kind != c.error_kind for c in mine)
            parts.append(
                f"{name} {sum(c.inside for c in mine)} of {len(mine)} ({sum(c.inside for c in mine) / len(mine):.0%}"
                f"; {wider} from a wider pool)"
            )
    return (
        f"Held-out rows (bench/estimate/held_out.txt) inside their stated {uncertainty.LEVEL:.0%} interval: "
        + "; ".join(parts or ["none"])
        + "."
    )


def write_current_spreads(rows: list[Row], published_rows: list | None = None) -> Path:
    from bench.estimate import uncertainty

    uncertainty.write_spreads(current_spreads(rows, published_rows))
    return uncertainty.SPREAD_FILE


def _summary_lines(rows: list[Row], skipped: int, s: dict) -> list[str]:
    """The DPO CPU figures, the fitted rows', each workload's and the skipped records' count; a blank line last."""
    return [
        "",
        f"DPO on CPU, `ok` cells with a measured model memory (nothing fitted on model memory): {s['ok_cells']}; "
        f"max |error| {_pct(s['max_abs_error_ok'])}, mean |error| {_pct(s['mean_abs_error_ok'])}; max |error| over "
        f"every row with a figure {_pct(s['max_abs_error_all'])}. Verdicts right (baselines held out; `likely_fits` "
        f"right where the cell ran, `likely_oom` where it ran out): {s['verdicts_right']} of {s['verdicts']}, "
        f"{s['likely_right']} of them of the {s['likely']} `likely_*` verdicts{_edge_note(s)}.",
        f"Fitted on (in-sample baselines): {s['fitted_ok_cells']} `ok` cells; max |error| "
        f"{_pct(s['fitted_max_abs_error'])}, mean |error| {_pct(s['fitted_mean_abs_error'])}.",
        "Per workload, every method's `ok` cells: "
        + "; ".join(
            f"{w} {m['ok_cells']} cells, max |error| {_pct(m['max_abs_error_ok'])}"
            for w, m in workload_summary(rows).items()
        )
        + ".",
        f"Records skipped (no model-memory figure: older records, or no longer in the matrix): {skipped}.",
        "",
    ]


VALIDATION_DOC = PROJECT_ROOT / "docs" / "estimator-validation.md"
"""The generated validation tables (`validate-estimate --write`); docs/estimator.md is the reference that links here."""


def validation_document() -> str:
    """docs/estimator-validation.md: every committed measured cell, then every published GPU figure, against its
    prediction, with the held-out coverage; generated whole, so that no table is edited by hand."""
    from bench.estimate import published

    rows, skipped = validate()
    published_rows = published.published_rows()
    covered = coverage(rows, published_rows, current_spreads(rows, published_rows))
    return "\n".join(
        [
            "# Memory estimator: validation (generated)",
            "",
            "Written by `dpo-bench validate-estimate --write` from the runs git tracks and scenarios/published/; "
            "`tests/unit/estimate/test_validation_document.py` holds this file to what the code writes. How to read "
            'it: docs/estimator.md, "Validation".',
            "",
            "## This project's runs (`dpo-bench validate-estimate`)",
            "",
            to_markdown(rows, skipped, covered).rstrip("\n"),
            "",
            "## Published GPU measurements (`dpo-bench validate-estimate --published`)",
            "",
            published.to_markdown(published_rows).rstrip("\n"),
            "",
        ]
    )
