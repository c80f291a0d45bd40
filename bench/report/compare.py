"""Diff two runs cell by cell: status changes first, then noise-aware throughput and memory deltas.

Everything here is pure (records and environment fingerprints in, dataclasses out) except `load_run`.
"""

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.errors import BenchError
from bench.report.cells import known_issue_markdown
from bench.report.summary import CellSummary, summarize
from bench.report.verdict import ALPHA, MIN_TRIALS, Verdict, decide, no_verdict_label
from bench.results.env import read_env
from bench.results.env_schema import EnvFingerprint
from bench.results.layout import ENV_FILE, RESULTS_FILE
from bench.results.schema import ResultRecord, Status
from bench.results.store import load_results
from bench.secrets import redact
from bench.units import bytes_text

DEFAULT_THRESHOLD = 0.05
FAIL_KINDS = ("status", "throughput", "memory", "cpu")
METRIC_KINDS = ("throughput", "memory")
"""Metric deltas every comparison has; `cpu` joins them where both runs recorded CPU time per step."""


@dataclass(frozen=True)
class Run:
    name: str
    records: list[ResultRecord]
    env: EnvFingerprint | None
    """None when the run has no env.json."""


@dataclass(frozen=True)
class MetricDelta:
    base: float
    head: float
    change: float
    """(head - base) / base."""
    spread: float
    """The larger max-min range of the trials on either side, relative to the base median."""
    trials: tuple[int, int]
    verdict: Verdict
    """regression or improvement only with evidence (see bench/report/verdict.py); no_verdict below MIN_TRIALS."""
    p_value: float | None
    """Two-sided Mann–Whitney U p-value; None for no_verdict."""
    measure: str = ""
    """What was compared, for memory: MODEL_MEMORY when both sides have it, else TRAIN_PEAK (older records)."""


MODEL_MEMORY = "model memory"
"""Metrics.model_memory_bytes: peak - library baseline, max over ranks."""
TRAIN_PEAK = "train peak"
"""Metrics.train_peak_bytes: the training peak per process, max over ranks (what older records have)."""


@dataclass(frozen=True)
class CellDiff:
    cell_id: str
    base: CellSummary | None
    head: CellSummary | None
    status_change: str | None
    """regression (ok -> not ok, learning_failed included), improvement (not ok -> ok), changed, new, removed;
    None when equal."""
    throughput: MetricDelta | None
    memory: MetricDelta | None
    cpu: MetricDelta | None = None
    """Process CPU seconds per step of the lead rank (lower is better), where both sides recorded it."""


@dataclass
class Comparison:
    base: str
    head: str
    threshold: float
    not_comparable: list[str]
    cells: list[CellDiff] = field(default_factory=list)
    overlapped: list[str] = field(default_factory=list)
    """The trials left out of the metric verdicts: measured while another run shared the machine (overlapped_by)."""

    def of_kind(self, kind: str) -> list[CellDiff]:
        """Cells with a regression of `kind` (status, throughput or memory)."""
        if kind == "status":
            return [c for c in self.cells if c.status_change == "regression"]
        return [c for c in self.cells if (d := getattr(c, kind)) is not None and d.verdict == Verdict.REGRESSION]

    def untested(self, kind: str) -> list[CellDiff]:
        """Cells whose `kind` (throughput or memory) change has no verdict: too few trials on a side."""
        return [c for c in self.cells if (d := getattr(c, kind)) is not None and d.verdict == Verdict.NO_VERDICT]


def load_run(path: Path) -> Run:
    """A run dir (results.jsonl + env.json) or a results.jsonl file; env.json is looked up beside it. A corrupt
    line is warned about (file, line, field) and the others are compared."""
    run_dir = path if path.is_dir() else path.parent
    loaded = load_results(path)
    if not (run_dir / RESULTS_FILE).is_file() and not path.is_file():
        raise BenchError(f"{path}: no {RESULTS_FILE} here; pass a run dir results/<HW>/<run-id> or its {RESULTS_FILE}")
    if not loaded.records:
        raise BenchError(f"{path}: no result records")
    return Run(name=run_dir.name, records=loaded.records, env=read_env(run_dir))


def metric_delta(
    base: list[float], head: list[float], threshold: float, bigger_is_better: bool, measure: str = ""
) -> MetricDelta | None:
    """Medians compared; the verdict comes from `decide` (a rank test plus the threshold)."""
    if not base or not head or statistics.median(base) == 0:
        return None
    decision = decide(base, head, threshold, bigger_is_better)
    b = statistics.median(base)
    spread = max(max(base) - min(base), max(head) - min(head)) / abs(b)
    trials = (len(base), len(head))
    median_head = statistics.median(head)
    return MetricDelta(b, median_head, decision.change, spread, trials, decision.verdict, decision.p_value, measure)


CPU_MEASURE = "CPU s/step"
"""Metrics.cpu_s_per_step_median: process CPU seconds (user + system, all threads) per steady step, lead rank."""
CO_TENANT_NOTE = (
    "CPU s/step is the measure less sensitive to co-tenant load: it counts only the CPU time the lead rank's "
    "process itself used per step, so other processes on the same cores stretch wall time (and cut tokens/s) "
    "but barely change it. It does not see time spent waiting (communication, I/O, sleeps): a change there "
    "shows in tokens/s only."
)


def cpu_per_step(records: Iterable[ResultRecord]) -> dict[str, list[float]]:
    """Cell id -> CPU s/step of its ok trials, folded as `summarize` folds trials (the newest line of a trial
    wins); only cells whose every ok trial recorded it (records from before the measure have none)."""
    by_trial: dict[str, dict[int, ResultRecord]] = {}
    for record in records:
        by_trial.setdefault(record.cell_id, {})[record.trial] = record
    out = {}
    for cell_id, trials in by_trial.items():
        ok = [r for r in trials.values() if r.status == Status.OK and r.metrics is not None]
        values = [r.metrics.cpu_s_per_step_median for r in ok]
        if ok and all(v is not None for v in values):
            out[cell_id] = [float(v) for v in values]
    return out


def _has_model_memory(cell: CellSummary) -> bool:
    """Every ok trial of the cell recorded model memory (newer records)."""
    return bool(cell.model_memory_bytes) and len(cell.model_memory_bytes) == len(cell.tokens_per_s)


def memory_delta(base: CellSummary, head: CellSummary, threshold: float) -> MetricDelta | None:
    """Model memory (peak - library baseline) when both sides have it for every ok trial, else the train peak as
    older records have it: a baseline that moves with the libraries does not count as the model's memory."""
    if _has_model_memory(base) and _has_model_memory(head):
        return metric_delta(base.model_memory_bytes, head.model_memory_bytes, threshold, False, MODEL_MEMORY)
    return metric_delta(base.train_peak_bytes, head.train_peak_bytes, threshold, False, TRAIN_PEAK)


def status_change(base: CellSummary | None, head: CellSummary | None) -> str | None:
    if base is None:
        return "new"
    if head is None:
        return "removed"
    if Status.HARNESS in (base.status, head.status) and base.status != head.status:
        return "harness"  # the harness failed on one side: nothing to hold against the cell
    if base.status == Status.OK and head.status != Status.OK:
        return "regression"
    if base.status != Status.OK and head.status == Status.OK:
        return "improvement"
    if (base.status, base.error_class) != (head.status, head.error_class):
        return "changed"
    return None


def _facts(env: EnvFingerprint, packages: list[str]) -> dict[str, str]:
    """What must be equal for two runs' numbers to be compared directly, as shown to people."""
    return {
        "hardware profile": str(env.hardware_profile),
        "workload": str(env.workload),
        "image": env.image_label,
        "lock file hash": str(env.lock_hash),
        "executor": str(env.executor),
        **{f"package {name}": str(env.packages.get(name)) for name in packages},
        "machine": env.hardware.summary,
    }


def comparability(base_env: EnvFingerprint | None, head_env: EnvFingerprint | None) -> list[str]:
    """Reasons the two runs' numbers should not be compared directly; empty when they can be."""
    if base_env is None or head_env is None:
        side = "base" if base_env is None else "head"
        return [f"the {side} run has no {ENV_FILE}: its hardware, image and versions are unknown"]
    packages = sorted(set(base_env.packages) | set(head_env.packages))
    base, head = _facts(base_env, packages), _facts(head_env, packages)
    if base_env.cpu_features is not None and head_env.cpu_features is not None:
        # what the CPU switches on in torch, oneDNN and bitsandbytes: the same code takes other kernels (an env.json
        # written before these were recorded is compared on its machine line alone)
        base |= base_env.cpu_features.facts()
        head |= head_env.cpu_features.facts()
    return [f"{name}: {base[name]} → {head[name]}" for name in base if base[name] != head[name]]


def overlapped_trials(side: str, records: Iterable[ResultRecord]) -> list[str]:
    """`head: <cell> trials 1, 2 (overlapped by <run>)` per cell with trials measured on a machine another run
    shared, and `head: <cell> trial 1 (beside <cells> on other devices: memory compared)` (or `in slots of one
    device`) for trials of cells that ran side by side."""
    by_cell: dict[str, dict[int, ResultRecord]] = {}
    for record in records:
        by_cell.setdefault(record.cell_id, {})[record.trial] = record  # the newest line of a trial wins
    lines = []
    for cell_id, trials in by_cell.items():
        ordered = [r for _, r in sorted(trials.items())]
        for shared, what in (
            ([r for r in ordered if r.overlapped_by], lambda rs: f"overlapped by {_names(rs, 'overlapped_by')}"),
            (
                [r for r in ordered if r.shared_with and not r.overlapped_by and not r.gpu_shared],
                lambda rs: f"beside {_names(rs, 'shared_with')} on other devices: memory compared",
            ),
            (
                [r for r in ordered if r.gpu_shared and not r.overlapped_by],
                lambda rs: f"beside {_names(rs, 'shared_with')} in slots of one device: memory compared",
            ),
        ):
            if shared:
                numbers = ", ".join(str(r.trial + 1) for r in shared)
                lines.append(f"{side}: {cell_id} trial{'s' if len(shared) > 1 else ''} {numbers} ({what(shared)})")
    return lines


def _names(records: list[ResultRecord], field: str) -> str:
    return ", ".join(sorted({name for r in records for name in getattr(r, field)}))


def measured_alone(records: list[ResultRecord]) -> list[ResultRecord]:
    """The records whose cell had the machine to itself: no other runner, no other cell beside it (ResultRecord
    speed_shared)."""
    return [r for r in records if not r.speed_shared]


def own_devices(records: list[ResultRecord]) -> list[ResultRecord]:
    """The records whose memory is the cell's own: no other runner ran meanwhile (it may have shared the cell's
    devices); cells of its own run beside it ran on other devices, and memory is measured per process."""
    return [r for r in records if not r.overlapped_by]


def compare(base: Run, head: Run, threshold: float = DEFAULT_THRESHOLD, include_overlapped: bool = False) -> Comparison:
    """Statuses from every trial; speed verdicts from the trials measured alone, memory verdicts from the trials on
    their own devices, unless `include_overlapped`."""
    base_cells, head_cells = summarize(base.records), summarize(head.records)
    base_measured, head_measured = base.records, head.records
    base_memory, head_memory = base.records, head.records
    overlapped: list[str] = []
    if not include_overlapped:
        overlapped = overlapped_trials("base", base.records) + overlapped_trials("head", head.records)
        base_measured, head_measured = measured_alone(base.records), measured_alone(head.records)
        base_memory, head_memory = own_devices(base.records), own_devices(head.records)
    base_metrics, head_metrics = summarize(base_measured), summarize(head_measured)
    base_mem, head_mem = summarize(base_memory), summarize(head_memory)
    base_cpu, head_cpu = cpu_per_step(base_measured), cpu_per_step(head_measured)
    order = list(base_cells) + [c for c in head_cells if c not in base_cells]
    result = Comparison(base.name, head.name, threshold, comparability(base.env, head.env), overlapped=overlapped)
    for cell_id in order:
        b, h = base_cells.get(cell_id), head_cells.get(cell_id)
        bm, hm = base_metrics.get(cell_id), head_metrics.get(cell_id)
        both = bm is not None and hm is not None
        bmem, hmem = base_mem.get(cell_id), head_mem.get(cell_id)
        cpu = None
        if both and cell_id in base_cpu and cell_id in head_cpu:
            cpu = metric_delta(base_cpu[cell_id], head_cpu[cell_id], threshold, False, CPU_MEASURE)
        result.cells.append(
            CellDiff(
                cell_id=cell_id,
                base=b,
                head=h,
                status_change=status_change(b, h),
                throughput=metric_delta(bm.tokens_per_s, hm.tokens_per_s, threshold, True) if both else None,
                memory=memory_delta(bmem, hmem, threshold) if bmem is not None and hmem is not None else None,
                cpu=cpu,
            )
        )
    return result


def parse_fail_on(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip() and k.strip() != "none")
    unknown = [k for k in kinds if k not in FAIL_KINDS]
    if unknown:
        raise BenchError(f"--fail-on: unknown kind {unknown[0]!r}; use a comma-separated subset of {FAIL_KINDS}")
    return kinds


def failing_kinds(comparison: Comparison, kinds: Iterable[str]) -> list[str]:
    return [k for k in kinds if comparison.of_kind(k)]


def ignored_fail_on(comparison: Comparison, kinds: Iterable[str]) -> list[str]:
    """One line per metric kind in `kinds` that --fail-on cannot judge on some cells, saying why."""
    lines = []
    for kind in kinds:
        if kind != "status" and (untested := comparison.untested(kind)):
            lines.append(
                f"compare: --fail-on {kind} ignored for {len(untested)} cells with fewer than {MIN_TRIALS} trials "
                f"per side; rerun with --repeats {MIN_TRIALS}"
            )
    return lines


def to_json(comparison: Comparison, fail_on: Iterable[str] = ()) -> dict:
    return {
        "base": comparison.base,
        "head": comparison.head,
        "threshold": comparison.threshold,
        "comparable": not comparison.not_comparable,
        "not_comparable": comparison.not_comparable,
        "regressions": {k: [c.cell_id for c in comparison.of_kind(k)] for k in FAIL_KINDS},
        "failed": failing_kinds(comparison, fail_on),
        "overlapped_excluded": comparison.overlapped,
        "cells": [asdict(c) for c in comparison.cells],
    }


MARKER = "<!-- dpo-bench-compare -->"
STATUS_ORDER = ("regression", "improvement", "changed", "harness", "new", "removed")
STATUS_LABEL = {
    "regression": "🔴 regression",
    "improvement": "🟢 improvement",
    "changed": "🟡 changed",
    "harness": "🛠️ harness failed, not the cell",
    "new": "🆕 new",
    "removed": "➖ removed",
}
FLAGGED = (Verdict.REGRESSION, Verdict.IMPROVEMENT)
VERDICT_LABEL = {Verdict.REGRESSION: "🔴 regression", Verdict.IMPROVEMENT: "🟢 better", Verdict.NO_CHANGE: "no change"}


def to_markdown(comparison: Comparison, fail_on: Iterable[str] = ()) -> str:
    """A PR-comment report: banner, summary, status changes, then flagged and all metric deltas."""
    c = comparison
    lines = [MARKER, f"## DPO bench: `{c.head}` (head) vs `{c.base}` (base)", ""]
    if c.not_comparable:
        lines += [
            "> [!WARNING]",
            "> **These runs are not comparable**: differences below may come from the environment, not the change.",
            *[f"> - {reason}" for reason in c.not_comparable],
            "",
        ]
    if c.overlapped:
        lines += [
            "> [!NOTE]",
            "> **Trials measured on a shared machine** are left out of the throughput and CPU time verdicts, and "
            "of the memory verdicts where another run shared it (`--include-overlapped` counts them):",
            *[f"> - {line}" for line in c.overlapped],
            "",
        ]
    lines += [_summary_line(c, fail_on), ""]
    lines += _status_section(c)
    lines += _metric_section(c, "throughput", "Throughput (tokens/s, higher is better)", _tokens)
    if any(d.cpu is not None for d in c.cells):
        title = "CPU time per step (lead rank, lower is better)"
        lines += _metric_section(c, "cpu", title, _cpu_ms, CO_TENANT_NOTE, show_measure=False)
    lines += _metric_section(c, "memory", "Memory (lower is better)", _mib, _memory_note(c))
    lines += [
        f"<sub>Medians over trials. A metric change is flagged only when a two-sided Mann–Whitney U test on the "
        f"trials rejects equal distributions (p ≤ {ALPHA}) and the medians differ by more than the threshold "
        f"({c.threshold:.0%}); a cell with fewer than {MIN_TRIALS} trials on a side gets no verdict. "
        f"Status: ok → anything else (learning_failed: ran but did not train correctly, included) is a "
        f"regression, but for `harness` (the harness or the machine failed, not the cell).</sub>",
    ]
    return redact("\n".join(lines) + "\n")


def _summary_line(c: Comparison, fail_on: Iterable[str]) -> str:
    counts = {kind: sum(d.status_change == kind for d in c.cells) for kind in STATUS_ORDER}
    parts = [f"{n} {kind}" for kind, n in counts.items() if n]
    metric_kinds = ("throughput", "cpu", "memory") if any(d.cpu is not None for d in c.cells) else METRIC_KINDS
    for kind in metric_kinds:
        deltas = [d for cell in c.cells if (d := getattr(cell, kind)) is not None]
        tested = [d for d in deltas if d.verdict != Verdict.NO_VERDICT]
        worse = sum(d.verdict == Verdict.REGRESSION for d in tested)
        better = sum(d.verdict == Verdict.IMPROVEMENT for d in tested)
        missing = len(deltas) - len(tested)
        untested = f", {missing} without verdict (< {MIN_TRIALS} trials)" if missing else ""
        label = "CPU s/step" if kind == "cpu" else kind
        parts.append(f"{label}: {worse} worse, {better} better of {len(tested)} tested{untested}")
    failed = failing_kinds(c, fail_on)
    verdict = f"**❌ fails on {', '.join(failed)}**" if failed else "**✅ no blocking regression**"
    n = len(metric_kinds)
    status = "status: " + (", ".join(parts[:-n]) if parts[:-n] else "no change")
    return f"{verdict} · {len(c.cells)} cells · {status} · " + " · ".join(parts[-n:])


def _status_section(c: Comparison) -> list[str]:
    changed = sorted((d for d in c.cells if d.status_change), key=lambda d: STATUS_ORDER.index(d.status_change))
    lines = ["### Status changes", ""]
    if not changed:
        return [*lines, "No cell changed status.", ""]
    lines += ["| cell | change | base | head | head message |", "|---|---|---|---|---|"]
    for d in changed:
        message = d.head.message if d.head and d.head.status != Status.OK else ""
        text = " · ".join(part for part in (_shorten(message), _known_issue(d)) if part).replace("|", "\\|")
        lines.append(
            f"| `{d.cell_id}` | {STATUS_LABEL[d.status_change]} | {_status(d.base)} | {_status(d.head)} | {text} |"
        )
    return [*lines, ""]


def _known_issue(d: CellDiff) -> str:
    """The head's known issue; else the base's (for a cell that works now: the issue it no longer hits)."""
    for summary, label in ((d.head, "known issue"), (d.base, "base's known issue")):
        if summary is not None and summary.known_issue:
            return f"{label}: {known_issue_markdown(summary)}"
    return ""


def _memory_note(c: Comparison) -> str:
    """Which memory figure the memory deltas compare, and how many cells each."""
    measures = [d.memory.measure for d in c.cells if d.memory is not None]
    model, peak = measures.count(MODEL_MEMORY), measures.count(TRAIN_PEAK)
    return (
        f"Compared: **{MODEL_MEMORY}** (peak − library baseline, max over ranks) where both runs record it "
        f"({model} cell{'' if model == 1 else 's'}), else the **{TRAIN_PEAK}** per process, max over ranks "
        f"(older records: {peak} cell{'' if peak == 1 else 's'}); the `measure` column says which."
    )


def _metric_section(
    c: Comparison, kind: str, title: str, fmt: Callable[[float], str], note: str = "", show_measure: bool = True
) -> list[str]:
    rows = [(d.cell_id, m) for d in c.cells if (m := getattr(d, kind)) is not None]
    flagged = [(cell, m) for cell, m in rows if m.verdict in FLAGGED]
    lines = [f"### {title}", ""]
    if not rows:
        return [*lines, "No cell is ok on both sides.", ""]
    if note:
        lines += [note, ""]
    measured = show_measure and any(m.measure for _, m in rows)
    header = [
        "| cell |" + (" measure |" if measured else "") + " base | head | change | spread | trials | p | verdict |",
        "|---|" + ("---|" if measured else "") + "---:|---:|---:|---:|---:|---:|---|",
    ]
    table = [
        f"| `{cell}` |" + (f" {m.measure} |" if measured else "") + f" {fmt(m.base)} | {fmt(m.head)} | "
        f"{m.change:+.1%} | {_spread(m)} | {m.trials[0]}/{m.trials[1]} | {_p(m)} | {_verdict(m)} |"
        for cell, m in rows
    ]
    flagged_table = [row for row, (_, m) in zip(table, rows, strict=True) if m.verdict in FLAGGED]
    lines += [*header, *flagged_table] if flagged else ["No change beyond the threshold with evidence."]
    lines += ["", f"<details><summary>All {len(rows)} cells</summary>", "", *header, *table, "", "</details>", ""]
    return lines


def _spread(delta: MetricDelta) -> str:
    return "—" if delta.trials == (1, 1) else f"{delta.spread:.1%}"


def _p(delta: MetricDelta) -> str:
    return "—" if delta.p_value is None else f"{delta.p_value:.3f}"


def _verdict(delta: MetricDelta) -> str:
    if delta.verdict == Verdict.NO_VERDICT:
        return no_verdict_label(min(delta.trials))
    return VERDICT_LABEL[delta.verdict]


def _status(summary: CellSummary | None) -> str:
    if summary is None:
        return "—"
    text = summary.status + (f" ({summary.error_class})" if summary.error_class else "")
    return text + (" (flaky)" if summary.flaky else "")


def _shorten(text: str, limit: int = 160) -> str:
    first = " ".join(text.split())
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _cpu_ms(value: float) -> str:
    return f"{value * 1000:,.1f} ms"


def _mib(value: float) -> str:
    return bytes_text(value, "MiB", 1)
