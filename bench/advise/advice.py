"""The advice: every applicable cell predicted and ranked, each non-fitting one with its smallest fix, and the chosen
cell. The typed schema here is what `--format json` writes (docs/advise.md lists its keys)."""

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from bench.advise.fixes import smallest_fix
from bench.advise.host import HostMemory, host_need, over_host, unchecked, verdict
from bench.advise.picks import Pick, PickKind, collapse_variants, faithfulness, picks
from bench.estimate import VERSION
from bench.estimate.generation_terms import GenerationHeader, generation_header
from bench.estimate.predict import Calibration, Prediction, load_calibration
from bench.estimate.speed.cell_speeds import speeds_of_plans, with_mfu
from bench.estimate.uncertainty import pool_label
from bench.matrix.axes import Method
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell, CellAxes
from bench.matrix.methods import method_spec
from bench.matrix.plan import Plan, plan_for
from bench.matrix.precision import mode_of
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.settings import knobs_said
from bench.units import GB


class FixAdvice(BaseModel):
    change: str
    flags: list[str]
    """Settings flags the change adds to the command (empty: the change is the cell itself)."""
    cell_id: str
    total_bytes: float
    margin_bytes: float


class CellAdvice(CellAxes):
    rank: int
    """1 = the chosen cell. Fitting cells first, in the order `prefer` names (ORDERS); then likely_fits, likely_oom,
    then the rest, closest to fitting first."""
    setup: str
    recipes: list[str]
    """The recipe entries (scenarios/recipes.yaml) the cell runs with; a newcomer row leaves their settings out."""
    devices: int
    verdict: Literal["fits", "likely_fits", "likely_oom", "oom", "host_oom", "unknown"]
    """The device's verdict (bench/estimate/uncertainty.verdict), or host_oom: the device would hold it, the host
    memory of a node would not (`host_need_bytes` > the advice's `host_memory_bytes`); ranked with the cells that do
    not fit, never chosen. A cell over both is oom. Only `fits` is chosen."""
    fit_probability: float | None = None
    """The share of comparable measurements' errors under which the device holds it (null: no measured rows)."""
    total_bytes: float
    range_low_bytes: float | None
    range_high_bytes: float | None
    """The PREDICTED total's 80 % interval, from the validation errors of comparable cells (docs/estimator.md)."""
    range_pool: str = ""
    """Which rows made the interval: comparable ones, or the wider pool it fell back to (and why)."""
    wider_pool: bool = False
    """The interval and P(fit) are a wider pool's: too few comparable rows."""
    tokens_per_s: float | None
    """PREDICTED training throughput over every rank (the speed model, docs/estimator.md "Speed"); null where the
    device's figures are not published."""
    mfu: float | None = None
    """The MFU that tokens_per_s implies (bench/estimate/speed/bounds.implied_mfu); null without a speed or a peak."""
    train_bytes: float
    load_bytes: float
    host_bytes: float
    host_need_bytes: float = 0.0
    """Host memory the cell needs on one node: host_bytes per rank times its ranks on the node (0: no offload)."""
    host_unchecked: bool = False
    """An offload cell with no host memory figure to hold it against: its verdict is the device's alone."""
    usable_bytes: float | None
    margin_bytes: float | None
    terms: dict[str, float]
    notes: list[str]
    fix: FixAdvice | None
    """Every verdict but fits: the smallest change under which it is predicted to fit (`fits`), on the device and in
    the host memory (null: none found)."""
    alternatives: list[str] = []
    """Cells that differ from this one only by launcher (`+accelerate`, `+mpirun`) and have the same prediction:
    folded into this row, which stands for them."""


class RunPlan(BaseModel):
    cell_id: str
    change: str | None
    """The fix the command applies (null: the cell fits as it is)."""
    command: str
    files: dict[str, str]
    """File name -> content: the DeepSpeed and accelerate configs `run` writes for the cell (none for a plain one)."""
    not_shown: dict[str, str] = {}
    """File name -> why its content is not in `files` (accelerate.yaml where accelerate is not installed)."""


class Advice(BaseModel):
    predicted: Literal["PREDICTED"] = "PREDICTED"
    estimator_version: str = VERSION
    hardware: str
    gpu: str | None
    devices_per_node: int
    nodes: int
    memory_per_device_bytes: float | None
    host_memory_bytes: float | None = None
    """The host memory of one node the offload cells are held against (null: not known, and no cell offloads)."""
    host_memory_origin: str | None = None
    """Where host_memory_bytes comes from: `--host-ram`, or the GPU catalog's node (`catalog default: NVIDIA DGX
    H100, 2,048 GB for 8 GPUs ...`)."""
    precision: str
    """The compute dtype (`bf16`, `fp32`), or the mode where it says more: `pure-bf16`, `fp16-mixed` (fp32 weights
    under fp16 autocast, bench/matrix/precision.py)."""
    model: str
    max_length: int
    batch_size: int
    grad_accum: int | None
    lora_r: int
    lora_targets: list[str]
    gradient_checkpointing: bool
    optim: str | None
    precompute_ref: bool
    settings: list[str] = Field(default=[], exclude_if=lambda v: not v)
    """The attention, Liger and compile settings flags gave (bench/matrix/settings.py knobs_said)."""
    prefer: PickKind = "fastest"
    """The order of the fitting cells (ORDERS)."""
    picks: list[Pick] = []
    """Per method, among its fitting cells: the fastest (only where one has a PREDICTED speed), the one on the fewest
    GPUs, the most faithful (empty: none fits)."""
    cells: list[CellAdvice]
    not_applicable: int
    """Cells of the matrix that cannot run on this hardware (bench/matrix/scenario.py rules)."""
    chosen: str | None
    """The cell id to run: the first ranked that fits; null when nothing fits as it is."""
    run: RunPlan | None = None
    """How to run the chosen cell (or, when none fits, the best-ranked cell's fix); null when nothing fits at all."""
    generation: GenerationHeader | None = None
    """The online methods' generation settings, where an online method is advised (null otherwise)."""


def devices_used(prediction: Prediction, profile: HardwareProfile) -> int:
    return backend_spec(prediction.backend).devices_per_cell(prediction.world_size, profile.device_count)


VERDICT_ORDER = {"fits": 0, "likely_fits": 1, "likely_oom": 2}
"""Fitting cells first, then the likely ones, then the rest (oom, host_oom, unknown)."""
METHOD_ORDER = {str(m): i for i, m in enumerate(Method)}
"""Several methods asked: each method's cells are ranked on their own, never against another method's."""


def _speed(entry: CellAdvice) -> float:
    return -(entry.tokens_per_s or 0.0)


def _faithfulness(entry: CellAdvice) -> tuple:
    return faithfulness(entry.init, entry.quant)


ORDERS = {
    "fastest": lambda e: (_speed(e), _faithfulness(e), e.devices),
    "fewest-gpus": lambda e: (e.devices, _speed(e), _faithfulness(e)),
    "faithful": lambda e: (_faithfulness(e), _speed(e), e.devices),
}
"""Among fitting cells, by preference: the PREDICTED tokens/s over all the GPUs a cell uses (the default: GPUs a
cell leaves idle add nothing), the fewest GPUs, or the most faithful (picks.faithfulness); each breaks ties with the
other two."""


def order(prefer: str):
    """The sort key of `prefer`: by method, then fitting cells first in the order ORDERS names, then the rest."""

    def key(entry: CellAdvice) -> tuple:
        fits = entry.verdict == "fits"
        preferred = ORDERS[prefer](entry) if fits else ()
        return (
            METHOD_ORDER.get(entry.method, len(METHOD_ORDER)),
            VERDICT_ORDER.get(entry.verdict, len(VERDICT_ORDER)),
            preferred,
            -(entry.margin_bytes or 0.0),
            entry.setup != "recipe",
            entry.cell_id,
        )

    return key


def advise(
    profile: HardwareProfile,
    workload: Workload,
    predictions: list[Prediction],
    cells: dict[str, Cell],
    prefer: str = "fastest",
    host: HostMemory | None = None,
) -> Advice:
    """`predictions` (predict_all's, of `cells` by id) ranked as `prefer` says, each non-fitting cell with its
    smallest fix; the offload cells held against `host`, the host memory of one node (None: not checked)."""
    calibration = load_calibration()

    def fits(prediction: Prediction) -> bool:
        return prediction.verdict == "fits" and not over_host(prediction, profile, host)

    plans = {p.cell_id: plan_for(cells[p.cell_id], profile, workload) for p in predictions if p.status == "predicted"}
    speeds = {i: with_mfu(s, plans[i]) for i, s in speeds_of_plans(list(plans.values())).items()}
    entries = []
    for p in predictions:
        if p.status != "predicted":
            continue
        plan = plans[p.cell_id]
        cell = plan.cell
        shown = verdict(p, profile, host)
        fix = None if shown in ("fits", "unknown") else _fix(plan, calibration, fits)
        entries.append(
            CellAdvice(
                rank=0,
                **CellAxes.of(cell),
                setup=str(cell.setup),
                recipes=list(plan.recipe.entries),
                devices=devices_used(p, profile),
                verdict=shown,
                fit_probability=p.fit_probability,
                total_bytes=p.total_bytes or 0.0,
                range_low_bytes=p.range_low_bytes,
                range_high_bytes=p.range_high_bytes,
                range_pool=pool_label(p.error_kind, p.range_kind, p.range_rows),
                wider_pool=p.range_kind is not None and p.range_kind != p.error_kind,
                tokens_per_s=speeds[p.cell_id].tokens_per_s if p.cell_id in speeds else None,
                mfu=speeds[p.cell_id].mfu if p.cell_id in speeds else None,
                train_bytes=p.train_bytes or 0.0,
                load_bytes=p.load_bytes or 0.0,
                host_bytes=p.host_bytes,
                host_need_bytes=host_need(p, profile),
                host_unchecked=unchecked(p, host),
                usable_bytes=p.usable_bytes,
                margin_bytes=p.margin_bytes,
                terms=p.terms,
                notes=p.notes,
                fix=fix,
            )
        )
    rows = collapse_variants(sorted(entries, key=order(prefer)), {i: plan.cell for i, plan in plans.items()})
    ranked = [e.model_copy(update={"rank": i}) for i, e in enumerate(rows, start=1)]
    not_applicable = sum(p.status == "not_applicable" for p in predictions)
    return _advice(profile, workload, prefer, host, ranked, not_applicable)


def _fix(plan: Plan, calibration: Calibration, fits: Callable[[Prediction], bool]) -> FixAdvice | None:
    """The smallest change under which the planned cell is predicted to fit (None: none found)."""
    found = smallest_fix(plan, calibration, fits)
    if found is None:
        return None
    return FixAdvice(
        change=found.change.what,
        flags=list(found.change.flags),
        cell_id=found.change.cell.id,
        total_bytes=found.prediction.total_bytes or 0.0,
        margin_bytes=found.prediction.margin_bytes or 0.0,
    )


def _advice(
    profile: HardwareProfile,
    workload: Workload,
    prefer: str,
    host: HostMemory | None,
    ranked: list[CellAdvice],
    not_applicable: int,
) -> Advice:
    """The advice around its ranked cells: the hardware, the model and settings asked about, the picks, the choice."""
    chosen = next((e.cell_id for e in ranked if e.verdict == "fits"), None)
    train, lora = workload.train, workload.lora
    return Advice(
        hardware=profile.name,
        gpu=profile.gpu,
        devices_per_node=profile.device_count,
        nodes=profile.nodes,
        memory_per_device_bytes=None if profile.memory_per_device_gb is None else profile.memory_per_device_gb * GB,
        host_memory_bytes=None if host is None else host.bytes_per_node,
        host_memory_origin=None if host is None else host.describe(profile.device_count),
        precision=_precision_said(mode_of(profile.precision, train.master_weights is not False), profile.precision),
        settings=knobs_said(workload),
        model=workload.name,
        max_length=train.max_length,
        batch_size=train.per_device_train_batch_size,
        grad_accum=train.gradient_accumulation_steps,
        lora_r=lora.r,
        lora_targets=list(lora.target_modules),
        gradient_checkpointing=train.gradient_checkpointing,
        optim=train.optim,
        precompute_ref=train.precompute_ref,
        prefer=prefer,
        picks=picks(ranked, {k: order(k) for k in ORDERS}),
        cells=ranked,
        not_applicable=not_applicable,
        chosen=chosen,
        generation=generation_header(workload) if any(method_spec(e.method).generates for e in ranked) else None,
    )


def _precision_said(mode: str, precision: str) -> str:
    """`mixed` reads as its compute dtype (bf16); every other mode by its name."""
    return precision if mode == "mixed" else mode
