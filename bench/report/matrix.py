"""The compatibility matrix as Markdown (MATRIX.md, the console) and as a flat table (matrix.csv).

Markdown: rows init · quant, columns backend, one cell label each (on a GPU its MFU after the memory), variant rows
below, and a numbered note with the reason (and known issue) of every cell that is not ok (a learning_failed cell's
note says which check failed); DPO first, then the same per other training method, each in a section of its own.
"""

from collections.abc import Mapping, Sequence
from statistics import median

import pandas as pd

from bench.matrix.axes import Method
from bench.report.cells import LEGEND, budget_line, cell_label, known_issue_markdown, method_title
from bench.report.grid import build_grid, in_axis_order, row_label
from bench.report.summary import CellSummary, summarize
from bench.results.schema import EMULATED_NOTE, ResultRecord, Status
from bench.units import MiB


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def footnotes(summaries: dict[str, CellSummary]) -> tuple[dict[str, int], list[str]]:
    """(cell id -> note number, note lines). Cells that are not ok for the same reason share one note."""
    groups: dict[tuple[str, str], list[str]] = {}
    for s in summaries.values():
        if s.status != Status.OK:
            reason = f"{s.status} — {s.message or 'no message'}"
            groups.setdefault((reason, known_issue_markdown(s)), []).append(s.cell_id)
    numbers = {cell: n for n, cells in enumerate(groups.values(), start=1) for cell in cells}
    lines = [
        f"{n}. {reason} ({', '.join(cells)})" + (f". Known issue: {known}" if known else "")
        for n, ((reason, known), cells) in enumerate(groups.items(), start=1)
    ]
    return numbers, lines


NOT_RUN_YET = "not run yet: the row joined the matrix after this run"


def headline_mfu(trials: Sequence[ResultRecord]) -> float | None:
    """A cell's MFU as its tokens/s are shown (bench/report/summary.py): the median over its ok trials, else what its
    last failing trial measured; None where no trial has one (a CPU profile: no peak)."""
    ok = [r.metrics.mfu for r in trials if r.status == Status.OK and r.metrics is not None]
    if any(r.status == Status.OK and r.metrics is not None for r in trials):
        return median(ok_mfu) if (ok_mfu := [v for v in ok if v is not None]) else None
    failing = [r for r in trials if r.status != Status.OK]
    shown = failing[-1] if failing else trials[-1]
    return shown.metrics.mfu if shown.metrics is not None else None


def mfu_text(mfu: float | None) -> str:
    """` · MFU 10.2%`, or nothing."""
    return "" if mfu is None else f" · MFU {mfu:.1%}"


def _tables(records: list[ResultRecord], pending: Sequence[str], level: str) -> list[str]:
    """One method's grid, its variant rows and its notes, as Markdown blocks (`level`: the notes' heading)."""
    summaries = summarize(records)
    newest = {r.cell_id: r for r in records}
    trials: dict[str, dict[int, ResultRecord]] = {}
    for r in records:
        trials.setdefault(r.cell_id, {})[r.trial] = r  # the newest line of each trial, as summarize folds them
    grid = build_grid(records)
    numbers, notes = footnotes(summaries)

    def text(cell_id: str | None) -> str:
        if cell_id is None:
            return "not run"
        note = numbers.get(cell_id)
        label = cell_label(summaries[cell_id]) + mfu_text(headline_mfu(list(trials[cell_id].values())))
        return label + (f" [{note}]" if note else "")

    rows = [[row_label(i, q), *(text(grid.cell(i, q, b)) for b in grid.backends)] for i, q in grid.rows]
    parts = [_markdown_table(["init · quant", *grid.backends], rows)] if rows else []
    if grid.variants or pending:
        variants = [
            [c, newest[c].launcher, "+".join(newest[c].options), newest[c].setup, text(c)] for c in grid.variants
        ]
        variants += [[c, "", "", "", NOT_RUN_YET] for c in pending if c not in newest]
        table = _markdown_table(["cell_id", "launcher", "options", "setup", "result"], variants)
        parts += ["", f"{level} Variants (other launchers, options and the newcomer setup)", "", table]
    if notes:
        parts += ["", f"{level} Notes", "", *notes]
    return parts


def render(
    records: list[ResultRecord],
    title: str,
    context_lines: list[str],
    pending: Sequence[str] = (),
    method_context: Mapping[str, list[str]] | None = None,
) -> str:
    """The matrix of `records` (every trial of every cell; trials are folded, cells keep their first order): DPO's
    cells first, then a section per other training method. `pending`: variant rows of the matrix this run has no
    record of (added after it), listed as not run yet. `method_context`: lines above a method's section (its own
    run, when it is not the DPO run's)."""
    by_method: dict[str, list[ResultRecord]] = {}
    for r in records:
        by_method.setdefault(r.method, []).append(r)
    if real := sorted({r.emulated_from for r in records if r.emulated_from}):
        title += f" · EMULATED on {', '.join(real)}"
        context_lines = [*context_lines, f"**{EMULATED_NOTE}**"]
    if budget := budget_line(records):
        context_lines = [*context_lines, budget]
    parts = [f"# {title}", "", *context_lines, "", LEGEND, ""]
    dpo = by_method.pop(Method.DPO.value, [])
    if dpo or pending or not by_method:
        parts += _tables(dpo, pending, "##")
    for method in in_axis_order(by_method, Method):
        extra = (method_context or {}).get(method, [])
        section = ["", f"## Method: {method_title(method)}", "", *([*extra, ""] if extra else [])]
        parts += section + _tables(by_method[method], (), "###")
    return "\n".join(parts).rstrip("\n") + "\n"


def _mib(value: float | None) -> float | None:
    return None if value is None else value / MiB


def csv_frame(records: list[ResultRecord]) -> pd.DataFrame:
    """One row per record, every number unrounded. Memory (MiB): train/load peak; baseline, peak and
    model memory (= peak - baseline, max over ranks) from Metrics, empty for older records; kernel_peak = max over
    ranks of the kernel's cgroup peak (also for failed cells), memory_budget = the per-rank budget. Learning:
    first, end (mean of the last quarter of the steps) and last loss, and the last step's reward accuracy."""
    rows = []
    for r in records:
        m, learning = r.metrics, r.learning
        kernel_peaks = [f.kernel_peak_bytes for f in r.rank_memory if f.kernel_peak_bytes is not None]
        rows.append(
            {
                "cell_id": r.cell_id,
                "method": r.method,
                "init": r.init,
                "quant": r.quant,
                "backend": r.backend,
                "launcher": r.launcher,
                "options": "+".join(r.options),
                "setup": r.setup,
                "status": str(r.status),
                "error_class": str(r.error_class) if r.error_class else "",
                "tokens_per_s": m.tokens_per_s if m else None,
                "mfu": m.mfu if m else None,
                "pairs_per_s": m.pairs_per_s if m else None,
                "step_time_median_s": m.step_time_median_s if m else None,
                "train_peak_mib": m.train_peak_bytes / MiB if m and m.train_peak_bytes else None,
                "load_peak_mib": m.load_peak_bytes / MiB if m and m.load_peak_bytes else None,
                "memory_kind": m.memory_kind if m else "",
                "baseline_mib": _mib(m.baseline_bytes) if m else None,
                "peak_mib": _mib(m.peak_bytes) if m else None,
                "model_memory_mib": _mib(m.model_memory_bytes) if m else None,
                "kernel_peak_mib": _mib(max(kernel_peaks)) if kernel_peaks else None,
                "memory_budget_mib": _mib(r.memory_budget_bytes),
                "first_loss": learning.first_loss if learning else None,
                "end_loss": learning.end_loss if learning else None,
                "last_loss": learning.last_loss if learning else None,
                "reward_accuracy": learning.reward_accuracy if learning else None,
                "wall_s": r.wall_s,
                "message": r.message,
            }
        )
    return pd.DataFrame(rows)
