"""One cell's real training step traced (`dpo-bench trace`): its FLOPs counted by torch's FlopCounterMode and its
peak tensor memory by MemTracker, beside the estimator's analytic figures for the same batch (docs/evidence/trace.md).

Imports torch, TRL and the worker only when a trace runs: `predict` reads the cached FLOPs (cache.py) without them."""

import tempfile
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from bench.estimate.trace.cache import TracedFlops, fingerprint
from bench.matrix.axes import Backend
from bench.matrix.plan import Plan


class CellTrace(BaseModel):
    """A traced step beside the analytic one; `skipped` says why a cell was not traced (the figures are then None)."""

    cell_id: str
    workload: str
    hardware: str
    skipped: str | None = None
    sequences: int = 0
    seq_len: int = 0
    """The traced batch's padded length (the collator pads to the batch's longest row)."""
    traced_flops: int | None = None
    traced_attention_flops: int | None = None
    """The fused attention kernels' part of traced_flops."""
    analytic_flops: float | None = None
    traced_memory: dict[str, int] = {}
    """MemTracker's peak by category and its `total` (bytes; tensors only)."""
    analytic_memory: dict[str, float] = {}
    """The estimator's train-time terms for the cell at max_length, and its `train_bytes`."""

    @property
    def tokens(self) -> int:
        return self.sequences * self.seq_len

    def flops_entry(self) -> TracedFlops | None:
        if self.traced_flops is None or self.analytic_flops is None:
            return None
        return TracedFlops(
            cell_id=self.cell_id,
            workload=self.workload,
            fingerprint="",
            sequences=self.sequences,
            seq_len=self.seq_len,
            traced_flops=self.traced_flops,
            analytic_flops=self.analytic_flops,
        )


def traceable(plan: Plan) -> str | None:
    """Why the cell's step cannot be traced here (None: it can). Pure."""
    if plan.not_applicable is not None:
        return f"not applicable: {plan.not_applicable}"
    if plan.cell.backend != Backend.SINGLE:
        return "only single-device cells are traced (one process; FSDP2's FSDPMemTracker needs a process group)"
    if plan.quant.quantized:
        return (
            "quantized cells are not traced: bitsandbytes' CPU kernels are not the CUDA path a GPU cell runs, and "
            "Params4bit cannot wrap a fake tensor"
        )
    if plan.method.generates:
        return "an online method's step samples completions first; its generation is not one training step"
    return None


def trace_cell(plan: Plan, memory: bool = True) -> CellTrace:
    """Trace one step of `plan`'s cell on the CPU: FLOPs always, the memory peak by category where `memory`. A model
    above prepare.py's LARGE_MODEL_PARAMS is traced under fake tensors (fake_step.py), a smaller one for real."""
    head = CellTrace(cell_id=plan.cell.id, workload=plan.workload.name, hardware=plan.profile.name)
    from bench.estimate.trace.fake_step import build_fake_step, fake_refusal, runs_fake

    why = traceable(plan)
    fake = why is None and runs_fake(plan)
    why = why or (fake_refusal(plan) if fake else None)
    if why is not None:
        return head.model_copy(update={"skipped": why})
    from bench.estimate.predict import predict
    from bench.estimate.trace.flops import analytic_step_flops, traced_step_flops
    from bench.estimate.trace.step import build_step
    from bench.estimate.trace.tensor_peak import tracked_peak

    with tempfile.TemporaryDirectory(prefix="dpo-bench-trace-") as folder:
        step = (build_fake_step if fake else build_step)(plan, Path(folder))
        sequences, seq_len = step.shape
        kinds = traced_step_flops(step)
        peak = tracked_peak(step) if memory else {}
    predicted = predict(at_length(plan, seq_len))
    analytic_memory = dict(predicted.terms) | {"train_bytes": float(predicted.train_bytes or 0.0)}
    return head.model_copy(
        update={
            "sequences": sequences,
            "seq_len": seq_len,
            "traced_flops": sum(kinds.values()),
            "traced_attention_flops": kinds["attention"],
            "analytic_flops": analytic_step_flops(plan, sequences, seq_len),
            "traced_memory": peak,
            "analytic_memory": analytic_memory,
        }
    )


def at_length(plan: Plan, seq_len: int) -> Plan:
    """`plan` with the workload's max_length set to a traced batch's padded length: the estimator's figures for the
    batch that was traced (its memory terms read max_length as every row's length). Pure."""
    train = plan.workload.train.model_copy(update={"max_length": seq_len})
    return replace(plan, workload=plan.workload.model_copy(update={"train": train}))


def cache_entry(plan: Plan, trace: CellTrace) -> TracedFlops | None:
    """The speed model's entry for a traced cell (None: nothing was traced)."""
    entry = trace.flops_entry()
    return None if entry is None else entry.model_copy(update={"fingerprint": fingerprint(plan)})


__all__ = ["CellTrace", "at_length", "cache_entry", "trace_cell", "traceable"]
