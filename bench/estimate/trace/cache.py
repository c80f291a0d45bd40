"""Traced FLOPs kept for the speed model: scenarios/derived/traced_flops.json, written by `dpo-bench trace --write`,
one entry per cell, workload and shape fingerprint. The speed model scales its analytic FLOPs by an entry's
traced/analytic ratio where one exists and keeps the analytic count where none does. Needs no torch."""

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from bench.estimate.shapes import config_path
from bench.file_cache import parsed
from bench.files import write_whole
from bench.matrix.plan import Plan
from bench.paths import DERIVED_DIR

TRACED_FLOPS = DERIVED_DIR / "traced_flops.json"


class TracedFlops(BaseModel):
    """One traced step: its FLOPs counted and the analytic count for the same batch."""

    cell_id: str
    workload: str
    fingerprint: str
    sequences: int
    seq_len: int
    traced_flops: int
    analytic_flops: float

    @property
    def ratio(self) -> float:
        return self.traced_flops / self.analytic_flops


def fingerprint(plan: Plan) -> str:
    """What the step's FLOPs and their analytic count depend on: the model's config.json, the workload's lengths,
    batch, checkpointing and LoRA shape, and whether the speed model counts for a CPU or a GPU
    (flops.analytic_step_flops). A change to any of them makes an entry stale (not read)."""
    train, lora = plan.workload.train, plan.workload.lora
    parts = [
        "cpu" if plan.profile.device == "cpu" else "accelerator",
        config_path(plan.workload).read_text(encoding="utf-8"),
        f"{train.max_length}/{train.per_device_train_batch_size}/{train.gradient_checkpointing}",
        f"{lora.r}/{sorted(lora.target_modules)}",
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _key(cell_id: str, workload: str, print_: str) -> str:
    return f"{cell_id}|{workload}|{print_}"


def load_traced(path: Path = TRACED_FLOPS) -> dict[str, TracedFlops]:
    """The entries `path` holds by key, read once while the file stays as it is (the dict is shared: not changed)."""
    return parsed(path, _entries) if path.exists() else {}


def _entries(text: str) -> dict[str, TracedFlops]:
    rows = [TracedFlops.model_validate(row) for row in json.loads(text)]
    return {_key(row.cell_id, row.workload, row.fingerprint): row for row in rows}


def traced_for(plan: Plan, path: Path = TRACED_FLOPS) -> TracedFlops | None:
    """The entry of `plan`'s cell, workload and current shapes, or None."""
    return load_traced(path).get(_key(plan.cell.id, plan.workload.name, fingerprint(plan)))


def save_traced(entries: list[TracedFlops], path: Path = TRACED_FLOPS) -> None:
    """Add or replace `entries`, keeping the others; sorted, so that the file's diff shows what changed."""
    rows = load_traced(path) | {_key(e.cell_id, e.workload, e.fingerprint): e for e in entries}
    ordered = [rows[key].model_dump() for key in sorted(rows)]
    write_whole(path, json.dumps(ordered, indent=1) + "\n")
