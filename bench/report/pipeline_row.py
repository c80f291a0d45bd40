"""A pipeline run as one row of stages (MATRIX.md, the console, the site): each stage's status, wall time and peak
memory, and why a stage did not run."""

from collections.abc import Sequence
from pathlib import Path

from bench.report.cells import MARKS, mib
from bench.results.schema import StageRecord, Status

PIPELINES_DIR = "pipelines"


def latest_pipelines(hardware_dir: Path) -> dict[tuple[str, str], list[StageRecord]]:
    """(pipeline, workload) -> the stages of its newest run under hardware_dir/pipelines (by run id: UTC times)."""
    from bench.pipeline.chain import load_stages

    found: dict[tuple[str, str], list[StageRecord]] = {}
    for run_dir in sorted((hardware_dir / PIPELINES_DIR).glob("*/"), reverse=True):
        stages = load_stages(run_dir)
        if stages:
            found.setdefault((stages[0].pipeline, stages[0].workload), stages)
    return found


def stage_text(record: StageRecord) -> str:
    """`✅ 12.3 s · 650 MiB`, `❌ (crash)`, `⏭️ not run`."""
    text = MARKS[Status(record.status)]
    if record.error_class:
        text += f" ({record.error_class})"
    if record.wall_s is not None:
        text += f" {record.wall_s:,.1f} s"
    if record.peak_bytes is not None:
        text += f" · {mib(record.peak_bytes)}"
    return text


def stages_table(records: Sequence[StageRecord]) -> str:
    """One row: the workload and the run, then each stage in order; the message of every stage not ok below."""
    if not records:
        return ""
    header = ["pipeline run", "workload", *(f"{r.index}. {r.stage}" for r in records)]
    first = records[0]
    row = [f"`{first.run_id}`", first.workload, *(stage_text(r) for r in records)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        "| " + " | ".join(row) + " |",
    ]
    notes = [f"- {r.index}. {r.stage}: {r.status} — {r.message.splitlines()[0]}" for r in records if r.message]
    return "\n".join([*lines, *(["", *notes] if notes else [])]) + "\n"


def pipeline_section(hardware_dir: Path) -> str:
    """MATRIX.md's pipeline section: the newest run of each pipeline per workload, a table each; "" when none ran."""
    runs = latest_pipelines(hardware_dir)
    if not runs:
        return ""
    parts = [
        "## Pipelines: SFT → merge → DPO → merge → generate, and RLHF (SFT, reward model, GRPO or RLOO)",
        "",
        "Each stage a process of its own (`python -m bench pipeline`, docs/pipeline.md); peak = max RSS per process "
        "on CPU, CUDA max allocated on GPU. Stage records: "
        + ", ".join(f"[`{PIPELINES_DIR}/{s[0].run_id}/`]({PIPELINES_DIR}/{s[0].run_id}/)" for s in runs.values())
        + ".",
        "",
    ]
    for stages in runs.values():
        parts.append(stages_table(stages))
    return "\n".join(parts)
