"""What a run prints as it goes: one line per finished trial, and the closing count by status."""

from bench.results.schema import ResultRecord, Status
from bench.units import MiB


def format_progress(done: int, total: int, record: ResultRecord, elapsed: float) -> str:
    remaining = total - done
    eta = elapsed / done * remaining if done else 0.0
    detail = ""
    if record.metrics:
        m = record.metrics
        if m.model_memory_bytes is not None and m.peak_bytes is not None:
            memory = f"model {m.model_memory_bytes / MiB:,.0f} / peak {m.peak_bytes / MiB:,.0f} MiB"
        else:
            memory = f"{(m.train_peak_bytes or 0) / MiB:>7,.0f} MiB"
        detail = f"{m.tokens_per_s:>9,.0f} tok/s {memory}"
    elif record.message:
        detail = record.message[:60]
    wall = f"{record.wall_s:5.1f}s" if record.wall_s is not None else ""
    return f"[{done:>3}/{total}] {record.cell_id:<40} {record.status:<15} {detail} {wall} | ETA {eta / 60:4.1f} min"


def summary(records: list[ResultRecord]) -> str:
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    order = [s.value for s in Status]
    return ", ".join(f"{counts[s]} {s}" for s in order if s in counts)
