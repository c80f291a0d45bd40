"""Traced beside analytic, as Markdown: FLOPs per token and peak tensor memory, and the difference in %. Pure."""

from bench.estimate.trace import CellTrace
from bench.units import MB

TENSOR_TERMS = ("weights", "adapters", "optimizer", "reference_model", "activations", "lm_head_backward")
"""The analytic terms that are tensors (what MemTracker sees); the others are the allocator's, the libraries' and
the process's."""


def _diff(traced: float, analytic: float) -> str:
    return f"{100.0 * (traced - analytic) / analytic:+.1f} %" if analytic else "-"


def analytic_tensor_bytes(trace: CellTrace) -> float:
    return sum(trace.analytic_memory.get(term, 0.0) for term in TENSOR_TERMS)


def trace_table(traces: list[CellTrace]) -> str:
    head = (
        "| cell | workload | batch | FLOPs/token traced | analytic | diff | peak MB traced | analytic tensors "
        "| diff | traced by category (MB) |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for t in traces:
        if t.skipped or t.traced_flops is None or t.analytic_flops is None:
            rows.append(f"| {t.cell_id} | {t.workload} | not traced: {t.skipped} |  |  |  |  |  |  |  |")
            continue
        traced, analytic = t.traced_flops / t.tokens, t.analytic_flops / t.tokens
        memory = t.traced_memory.get("total")
        tensors = analytic_tensor_bytes(t)
        parts = ", ".join(f"{k} {v / MB:.1f}" for k, v in t.traced_memory.items() if k != "total" and v)
        peak = "-" if memory is None else f"{memory / MB:.1f}"
        rows.append(
            f"| {t.cell_id} | {t.workload} | {t.sequences} x {t.seq_len} | {traced:.4g} | {analytic:.4g} "
            f"| {_diff(traced, analytic)} | {peak} | {tensors / MB:.1f} "
            f"| {'-' if memory is None else _diff(memory, tensors)} | {parts} |"
        )
    return head + "\n".join(rows) + "\n"
