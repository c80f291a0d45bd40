"""The compatibility matrix: rows init x quant, columns backend, one status mark + throughput + peak memory
per cell, variant rows below, and a footnote with the reason for every cell that is not ok."""

import pandas as pd

from bench.results_schema import EMULATED_NOTE, ResultRecord, Status
from bench.scenario import Backend, Init, Quant

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


def to_frame(records: list[ResultRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        m = r.metrics
        rows.append(
            {
                "cell_id": r.cell_id,
                "init": r.init,
                "quant": r.quant,
                "backend": r.backend,
                "launcher": r.launcher,
                "options": "+".join(r.options),
                "variant": r.cell_id != f"{r.init}-{r.quant}-{r.backend}",
                "status": str(r.status),
                "error_class": str(r.error_class) if r.error_class else "",
                "tokens_per_s": m.tokens_per_s if m else None,
                "pairs_per_s": m.pairs_per_s if m else None,
                "step_time_median_s": m.step_time_median_s if m else None,
                "train_peak_mib": m.train_peak_bytes / 2**20 if m and m.train_peak_bytes else None,
                "load_peak_mib": m.load_peak_bytes / 2**20 if m and m.load_peak_bytes else None,
                "memory_kind": m.memory_kind if m else "",
                "wall_s": r.wall_s,
                "message": r.message,
            }
        )
    return pd.DataFrame(rows)


def cell_text(row: pd.Series, note: int | None) -> str:
    text = MARKS[Status(row["status"])]
    if row["error_class"]:
        text += f" ({row['error_class']})"
    if pd.notna(row["tokens_per_s"]):
        text += f" {row['tokens_per_s']:,.0f} tok/s · {row['train_peak_mib']:,.0f} MiB"
    if note is not None:
        text += f" [{note}]"
    return text


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def render(records: list[ResultRecord], title: str, context_lines: list[str]) -> str:
    frame = to_frame(records)
    # One footnote per distinct (status, reason): twelve cells impossible for the same reason share a number.
    notes: dict[str, list[str]] = {}
    texts = []
    for _, row in frame.iterrows():
        note = None
        if row["status"] != Status.OK:
            reason = f"{row['status']} — {row['message'] or 'no message'}"
            notes.setdefault(reason, []).append(row["cell_id"])
            note = list(notes).index(reason) + 1
        texts.append(cell_text(row, note))
    frame = frame.assign(text=texts)

    base = frame[~frame["variant"]].copy()
    base["row"] = base["init"] + " · " + base["quant"]
    row_order = [f"{i} · {q}" for i in Init for q in Quant if f"{i} · {q}" in set(base["row"])]
    col_order = [b.value for b in Backend if b.value in set(base["backend"])]
    grid = base.pivot_table(index="row", columns="backend", values="text", aggfunc="first")
    grid = grid.reindex(index=row_order, columns=col_order).fillna("not run")
    grid = grid.reset_index().rename(columns={"row": "init · quant"})

    if any(r.emulated for r in records):
        title += " · EMULATED"
        context_lines = [*context_lines, f"**{EMULATED_NOTE}**"]
    parts = [f"# {title}", "", *context_lines, "", LEGEND, "", _markdown(grid)]
    variants = frame[frame["variant"]]
    if not variants.empty:
        table = variants[["cell_id", "launcher", "options", "text"]].rename(columns={"text": "result"})
        parts += ["", "## Variants (other launchers and options)", "", _markdown(table)]
    if notes:
        parts += ["", "## Notes", ""] + [
            f"{n}. {reason} ({', '.join(cells)})" for n, (reason, cells) in enumerate(notes.items(), start=1)
        ]
    return "\n".join(parts) + "\n"


def csv_frame(records: list[ResultRecord]) -> pd.DataFrame:
    return to_frame(records).drop(columns=["variant"])
