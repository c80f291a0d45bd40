"""The advice: every applicable cell predicted and ranked, each non-fitting one with its smallest fix, and the chosen
cell. The typed schema here is what `--format json` writes (docs/advise.md lists its keys)."""

from typing import Literal

from pydantic import BaseModel

from bench.advise.fixes import smallest_fix
from bench.estimate import VERSION
from bench.estimate.predict import Prediction, load_calibration
from bench.estimate.speed.matrix import speeds_of
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.recipes import resolve
from bench.units import GB


class FixAdvice(BaseModel):
    change: str
    flags: list[str]
    """Settings flags the change adds to the command (empty: the change is the cell itself)."""
    cell_id: str
    total_bytes: float
    margin_bytes: float


class CellAdvice(BaseModel):
    rank: int
    """1 = the chosen cell. Fitting cells first: fewest devices, then the fastest PREDICTED (tokens/s; the offload
    backends' transfers make them slower), then the most headroom; then tight cells, then the rest, closest to
    fitting first."""
    cell_id: str
    method: str
    init: str
    quant: str
    backend: str
    setup: str
    recipes: list[str]
    """The recipe entries (scenarios/recipes.yaml) the cell runs with; a newcomer row leaves their settings out."""
    devices: int
    verdict: Literal["fits", "tight", "predicted_oom", "unknown"]
    total_bytes: float
    range_low_bytes: float | None
    range_high_bytes: float | None
    """The PREDICTED total's range, from the validation errors of its kind of cell (docs/estimator.md)."""
    tokens_per_s: float | None
    """PREDICTED training throughput over every rank (the speed model, docs/estimator.md "Speed"); null where the
    device's figures are not published."""
    train_bytes: float
    load_bytes: float
    host_bytes: float
    usable_bytes: float | None
    margin_bytes: float | None
    terms: dict[str, float]
    notes: list[str]
    fix: FixAdvice | None
    """tight or predicted_oom only: the smallest change under which it is predicted to fit (null: none found)."""


class RunPlan(BaseModel):
    cell_id: str
    change: str | None
    """The fix the command applies (null: the cell fits as it is)."""
    command: str
    files: dict[str, str]
    """File name -> content: the DeepSpeed and accelerate configs `run` writes for the cell (none for a plain one)."""


class Advice(BaseModel):
    predicted: Literal["PREDICTED"] = "PREDICTED"
    estimator_version: str = VERSION
    hardware: str
    gpu: str | None
    devices_per_node: int
    nodes: int
    memory_per_device_bytes: float | None
    precision: str
    model: str
    max_length: int
    batch_size: int
    grad_accum: int | None
    lora_r: int
    lora_targets: list[str]
    gradient_checkpointing: bool
    optim: str | None
    precompute_ref: bool
    cells: list[CellAdvice]
    not_applicable: int
    """Cells of the matrix that cannot run on this hardware (bench/matrix/scenario.py rules)."""
    chosen: str | None
    """The cell id to run: the first ranked that fits; null when nothing fits as it is."""
    run: RunPlan | None = None
    """How to run the chosen cell (or, when none fits, the best-ranked cell's fix); null when nothing fits at all."""


def devices_used(prediction: Prediction, profile: HardwareProfile) -> int:
    return backend_spec(prediction.backend).devices_per_cell(prediction.world_size, profile.device_count)


VERDICT_ORDER = {"fits": 0, "tight": 1}
"""Fitting cells first, then tight ones (their PREDICTED range straddles the device's memory), then the rest."""


def _order(entry: CellAdvice) -> tuple:
    fits = entry.verdict == "fits"
    margin = entry.margin_bytes or 0.0
    speed = entry.tokens_per_s or 0.0
    return (
        VERDICT_ORDER.get(entry.verdict, 2),
        entry.devices if fits else 0,
        -speed if fits else 0.0,
        -margin,
        entry.setup != "recipe",
        entry.cell_id,
    )


def advise(
    profile: HardwareProfile, workload: Workload, predictions: list[Prediction], cells: dict[str, Cell]
) -> Advice:
    """`predictions` (predict_all's, of `cells` by id) ranked, each non-fitting cell with its smallest fix."""
    calibration = load_calibration()
    speeds = speeds_of(profile, workload, [cells[p.cell_id] for p in predictions if p.status == "predicted"])
    entries = []
    for p in predictions:
        if p.status != "predicted":
            continue
        cell = cells[p.cell_id]
        fix = None
        if p.verdict in ("tight", "predicted_oom"):
            found = smallest_fix(cell, profile, workload, calibration)
            if found is not None:
                fix = FixAdvice(
                    change=found.change.what,
                    flags=list(found.change.flags),
                    cell_id=found.change.cell.id,
                    total_bytes=found.prediction.total_bytes or 0.0,
                    margin_bytes=found.prediction.margin_bytes or 0.0,
                )
        entries.append(
            CellAdvice(
                rank=0,
                cell_id=p.cell_id,
                method=p.method,
                init=p.init,
                quant=p.quant,
                backend=p.backend,
                setup=str(cell.setup),
                recipes=list(resolve(cell, profile.device).entries),
                devices=devices_used(p, profile),
                verdict=p.verdict or "unknown",
                total_bytes=p.total_bytes or 0.0,
                range_low_bytes=p.range_low_bytes,
                range_high_bytes=p.range_high_bytes,
                tokens_per_s=speeds[p.cell_id].tokens_per_s if p.cell_id in speeds else None,
                train_bytes=p.train_bytes or 0.0,
                load_bytes=p.load_bytes or 0.0,
                host_bytes=p.host_bytes,
                usable_bytes=p.usable_bytes,
                margin_bytes=p.margin_bytes,
                terms=p.terms,
                notes=p.notes,
                fix=fix,
            )
        )
    ranked = [e.model_copy(update={"rank": i}) for i, e in enumerate(sorted(entries, key=_order), start=1)]
    chosen = next((e.cell_id for e in ranked if e.verdict == "fits"), None)
    train, lora = workload.train, workload.lora
    return Advice(
        hardware=profile.name,
        gpu=profile.gpu,
        devices_per_node=profile.device_count,
        nodes=profile.nodes,
        memory_per_device_bytes=None if profile.memory_per_device_gb is None else profile.memory_per_device_gb * GB,
        precision=profile.precision,
        model=workload.name,
        max_length=train.max_length,
        batch_size=train.per_device_train_batch_size,
        grad_accum=train.gradient_accumulation_steps,
        lora_r=lora.r,
        lora_targets=list(lora.target_modules),
        gradient_checkpointing=train.gradient_checkpointing,
        optim=train.optim,
        precompute_ref=train.precompute_ref,
        cells=ranked,
        not_applicable=sum(p.status == "not_applicable" for p in predictions),
        chosen=chosen,
    )
