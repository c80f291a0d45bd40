"""What one matrix cell says, the same in MATRIX.md and on the site: status mark, error class, numbers."""

from bench.report.summary import CellSummary
from bench.results_schema import Status

MARKS = {
    Status.OK: "✅",
    Status.SILENT_FALLBACK: "⚠️ fallback",
    Status.OOM: "💥 OOM",
    Status.ERROR: "❌",
    Status.TIMEOUT: "⏱️ timeout",
    Status.NOT_APPLICABLE: "N/A",
    Status.UNTESTED: "❔ untested",
}
LEGEND = (
    "✅ ok · ⚠️ fallback = ran, but not what was asked (silent_fallback) · 💥 OOM · ❌ error (class in brackets) · "
    "⏱️ timeout · N/A = impossible by rule · ❔ untested = the device's software stack was absent, nothing ran. "
    "Throughput: steady-state tokens/s (chosen + rejected, all ranks). "
    "Memory: peak per process during training, max over ranks (host RSS on CPU, CUDA allocated on GPU)."
)


def cell_label(summary: CellSummary) -> str:
    """`✅ 4,820 tok/s · 570 MiB`, `❌ (comm)`, `⚠️ fallback 6,997 tok/s · 572 MiB`."""
    text = MARKS[Status(summary.status)]
    if summary.error_class:
        text += f" ({summary.error_class})"
    if summary.headline_tokens_per_s is not None:
        text += f" {summary.headline_tokens_per_s:,.0f} tok/s"
    if summary.headline_train_peak_bytes is not None:
        text += f" · {summary.headline_train_peak_bytes / 2**20:,.0f} MiB"
    return text


def is_link(known_issue: str) -> bool:
    return known_issue.startswith(("https://", "http://"))


def known_issue_markdown(summary: CellSummary) -> str:
    """`<https://…> — note`: the upstream issue the cell's failure matches, or "" when none."""
    if not summary.known_issue:
        return ""
    link = f"<{summary.known_issue}>" if is_link(summary.known_issue) else summary.known_issue
    return link + (f" — {summary.known_issue_note}" if summary.known_issue_note else "")
