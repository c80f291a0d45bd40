"""What one matrix cell says, the same in MATRIX.md and on the site: status mark, error class, numbers."""

from collections.abc import Iterable

from bench.matrix.methods import method_spec
from bench.report.summary import CellSummary, OomMemory
from bench.results.schema import STATUS_MEANING, ResultRecord, Status
from bench.units import bytes_text

MARKS = {
    Status.OK: "✅",
    Status.SILENT_FALLBACK: "⚠️ fallback",
    Status.LEARNING_FAILED: "📉 learning",
    Status.OOM: "💥 OOM",
    Status.PREDICTED_OOM: "🔮 predicted OOM",
    Status.ERROR: "❌",
    Status.TIMEOUT: "⏱️ timeout",
    Status.HANG: "🧊 hang",
    Status.NOT_APPLICABLE: "N/A",
    Status.UNTESTED: "❔ untested",
    Status.NOT_RUN: "⏭️ not run",
    Status.HARNESS: "🛠️ harness",
}
"""MATRIX.md's marks (Markdown viewers have emoji fonts)."""
BADGES = {
    Status.OK: "OK",
    Status.SILENT_FALLBACK: "FALLBACK",
    Status.LEARNING_FAILED: "LEARNING",
    Status.OOM: "OOM",
    Status.PREDICTED_OOM: "PREDICTED OOM",
    Status.ERROR: "ERROR",
    Status.TIMEOUT: "TIMEOUT",
    Status.HANG: "HANG",
    Status.NOT_APPLICABLE: "N/A",
    Status.UNTESTED: "UNTESTED",
    Status.NOT_RUN: "NOT RUN",
    Status.HARNESS: "HARNESS",
}
"""The site's marks: plain text on the status's colour (a browser without an emoji font draws emoji as boxes)."""
VERDICT_BADGES = {
    "fits": "FITS",
    "likely_fits": "LIKELY FITS",
    "likely_oom": "LIKELY OOM",
    "oom": "OOM",
    "host_oom": "HOST OOM",
    "unknown": "?",
    "not_applicable": "N/A",
}
"""The site's marks of the estimator's verdicts (PREDICTED matrices, the decision page)."""


def legend(marks: dict[Status, str]) -> str:
    return " · ".join(f"{marks[status]} = {STATUS_MEANING[status].short}" for status in Status) + ". " + LEGEND_TEXT


LEGEND_TEXT = (
    "Throughput: steady-state tokens/s (chosen + rejected, all ranks). "
    "Memory: model = peak − library baseline (memory after the libraries are imported, before the model loads; "
    "0 on GPU), max over ranks: what the model, its training state and activations take; "
    "peak = the kernel's cgroup peak under a memory budget, else peak RSS on CPU, CUDA max allocated on GPU. "
    "A single MiB figure (older records) is the peak per process during training, max over ranks "
    "(host RSS on CPU, CUDA allocated on GPU)."
)
LEGEND = legend(MARKS)


def method_title(method: str) -> str:
    """`sft · trl.SFTTrainer`, `orpo · trl.experimental.orpo.ORPOTrainer (experimental)`."""
    try:
        spec = method_spec(method)
    except KeyError:  # a method of older records that the table no longer has
        return method
    return f"{method} · {spec.trainer}" + (" (experimental)" if spec.experimental else "")


def gib(value: float) -> str:
    return bytes_text(value, "GiB", 2)


def mib(value: float) -> str:
    return bytes_text(value, "MiB", 0)


def memory_text(summary: CellSummary) -> str:
    """`model 812 MiB / peak 1,372 MiB`; `570 MiB` (the train peak) for records without model memory; "" if none."""
    model, peak = summary.headline_model_memory_bytes, summary.headline_peak_bytes
    if model is not None:
        return f"model {mib(model)}" + (f" / peak {mib(peak)}" if peak is not None else "")
    if summary.headline_train_peak_bytes is not None:
        return mib(summary.headline_train_peak_bytes)
    return ""


def oom_text(oom: OomMemory) -> str:
    """`rank 1 at 1.50 GiB, budget 1.50 GiB`: the killed rank(s), the kernel's cgroup peak and the budget."""
    parts = []
    if oom.killed_ranks:
        ranks = ", ".join(str(r) for r in oom.killed_ranks)
        who = f"rank{'s' if len(oom.killed_ranks) > 1 else ''} {ranks}"
        parts.append(f"{who} at {gib(oom.peak_bytes)}" if oom.peak_bytes is not None else f"{who} killed")
    elif oom.peak_bytes is not None:
        parts.append(f"peak {gib(oom.peak_bytes)}")
    if oom.limit_bytes is not None:
        parts.append(f"budget {gib(oom.limit_bytes)}")
    return ", ".join(parts)


def cell_label(summary: CellSummary) -> str:
    """`✅ 4,820 tok/s · model 812 MiB / peak 1,372 MiB`, `✅ 4,820 tok/s · 570 MiB` (older records), `❌ (comm)`,
    `⚠️ fallback 6,997 tok/s · 572 MiB`, `💥 OOM (rank 1 at 1.50 GiB, budget 1.50 GiB)`, and on an emulated run
    `✅ 9,100 tok/s on NVIDIA H100 80GB HBM3 (emulated) · 14.1 GiB`."""
    return MARKS[Status(summary.status)] + cell_detail(summary)


def cell_detail(summary: CellSummary) -> str:
    """What follows the mark in a cell's label (` 4,820 tok/s · 570 MiB`; empty for a bare status)."""
    text = ""
    if summary.error_class:
        text += f" ({summary.error_class})"
    if summary.oom is not None and (oom := oom_text(summary.oom)):
        text += f" ({oom})"
    if summary.headline_tokens_per_s is not None:
        text += f" {summary.headline_tokens_per_s:,.0f} tok/s"
        if summary.emulated_from:
            text += f" on {summary.emulated_from} (emulated)"
    if memory := memory_text(summary):
        text += f" · {memory}"
    return text


def budget_line(records: Iterable[ResultRecord]) -> str | None:
    """`Per-rank memory budget: 1.50 GiB (kernel memory cgroup).` when some record ran under one, else None."""
    ran = [r for r in records if r.status not in (Status.NOT_APPLICABLE, Status.UNTESTED)]
    budgets = sorted({r.memory_budget_bytes for r in ran if r.memory_budget_bytes is not None})
    if not budgets:
        return None
    line = f"Per-rank memory budget: {', '.join(gib(b) for b in budgets)} (kernel memory cgroup)"
    if any(r.memory_budget_bytes is None for r in ran):
        line += "; some cells ran without one"
    return line + "."


def is_link(known_issue: str) -> bool:
    return known_issue.startswith(("https://", "http://"))


def known_issue_markdown(summary: CellSummary) -> str:
    """`<https://…> — note`: the upstream issue the cell's failure matches, or "" when none."""
    if not summary.known_issue:
        return ""
    link = f"<{summary.known_issue}>" if is_link(summary.known_issue) else summary.known_issue
    return link + (f" — {summary.known_issue_note}" if summary.known_issue_note else "")


def status_table() -> str:
    """The statuses as docs/metrics.md shows them, rendered from STATUS_MEANING (tests/unit/report hold the page
    to it: paste this function's output there when a meaning changes)."""
    rows = [f"| `{status}` | {STATUS_MEANING[status].long} |" for status in Status]
    return "\n".join(["| status | meaning |", "|---|---|", *rows])
