"""The smallest change that makes a predicted-OOM cell fit, tried through the estimator: one change at a time, in
the order of how little it changes what is trained. Pure over the estimator's predict."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.estimate.predict import Calibration, Prediction, predict
from bench.matrix.axes import Backend, Init, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.plan import Plan, plan_for
from bench.matrix.profiles import Workload
from bench.matrix.scenario import shipped_cells

SHORTEST_LENGTH = 256
"""A max length below this is not offered as a fix."""


@dataclass(frozen=True)
class Change:
    what: str
    """One line: what changes."""
    cell: Cell
    workload: Workload
    flags: tuple[str, ...] = ()
    """Command-line flags that make the change (settings); a changed cell is named by its id instead."""


Proposal = Callable[[Cell, Workload], Iterator[Change]]


def _recipe_cell(cell: Cell, **update: object) -> Cell:
    """`cell` with `update`, as the matrix's base row: the backend's default launcher, no options, the recipe."""
    backend = update.get("backend", cell.backend)
    base = {"launcher": backend_spec(backend).default_launcher, "ranks": None, "options": (), "setup": Setup.RECIPE}
    return cell.model_copy(update=base | update)


def precompute_reference(cell: Cell, workload: Workload) -> Iterator[Change]:
    if Option.PRECOMPUTE_REF not in cell.options and not workload.train.precompute_ref:
        options = tuple(sorted({*cell.options, Option.PRECOMPUTE_REF}))
        train = workload.train.model_copy(update={"precompute_ref": True})
        yield Change(
            "precompute the reference log-probs",
            cell.model_copy(update={"options": options}),
            workload.model_copy(update={"train": train}),
            ("--precompute-ref", "on"),
        )


def smaller_batch(cell: Cell, workload: Workload) -> Iterator[Change]:
    """Half the batch, twice the accumulation (the same examples per step), down to 1."""
    train = workload.train
    batch, accum = train.per_device_train_batch_size, train.gradient_accumulation_steps or 1
    while batch > 1:
        batch, accum = batch // 2, accum * 2
        changed = train.model_copy(update={"per_device_train_batch_size": batch, "gradient_accumulation_steps": accum})
        yield Change(
            f"batch {batch} with {accum}x gradient accumulation",
            cell,
            workload.model_copy(update={"train": changed}),
            ("--batch-size", str(batch), "--grad-accum", str(accum)),
        )


def zero3(cell: Cell, workload: Workload) -> Iterator[Change]:
    if cell.backend != Backend.ZERO3:
        yield Change(
            "ZeRO-3 (parameters, gradients and optimizer sharded)", _recipe_cell(cell, backend=Backend.ZERO3), workload
        )


def adapter(cell: Cell, workload: Workload) -> Iterator[Change]:
    if cell.init == Init.TWO_MODELS:
        yield Change("a LoRA adapter instead of two models", _recipe_cell(cell, init=Init.ONE_ADAPTER), workload)
    elif cell.init == Init.FULL:
        yield Change("a LoRA adapter instead of every weight", _recipe_cell(cell, init=Init.ONE_ADAPTER), workload)


def cpu_offload(cell: Cell, workload: Workload) -> Iterator[Change]:
    for backend, what in (
        (Backend.ZERO3_OFFLOAD, "ZeRO-3 with the optimizer offloaded to the CPU"),
        (Backend.ZERO3_OFFLOAD_PARAM, "ZeRO-3 with optimizer and parameters offloaded to the CPU"),
    ):
        if cell.backend != backend:
            yield Change(what, _recipe_cell(cell, backend=backend), workload)


def nf4(cell: Cell, workload: Workload) -> Iterator[Change]:
    if cell.quant != Quant.NF4:
        init = Init.ONE_ADAPTER if cell.init in (Init.TWO_MODELS, Init.FULL) else cell.init
        what = "nf4 weights (QLoRA)" + (" with a LoRA adapter" if init != cell.init else "")
        yield Change(what, _recipe_cell(cell, quant=Quant.NF4, init=init), workload)


def shorter_length(cell: Cell, workload: Workload) -> Iterator[Change]:
    length = workload.train.max_length // 2
    while length >= SHORTEST_LENGTH:
        train = workload.train.model_copy(update={"max_length": length})
        yield Change(
            f"max length {length}", cell, workload.model_copy(update={"train": train}), ("--max-length", str(length))
        )
        length //= 2


PROPOSALS: tuple[Proposal, ...] = (
    precompute_reference,
    smaller_batch,
    zero3,
    adapter,
    cpu_offload,
    nf4,
    shorter_length,
)
"""Tried in this order; the first change whose prediction fits is the one proposed. Settings that train the same
thing come first, then setups that keep full fine-tuning or the same adapter, then quantization, then a shorter
max length (it changes what is trained)."""


def matrix_cell(cell_id: str) -> Cell | None:
    """The matrix's cell of this id; for `<id>+precompute_ref`, the matrix's `<id>` with that option, which a fix may
    add to any cell with a reference; None where the matrix has neither (a method's rows may leave a backend out:
    GRPO has no offload rows)."""
    cells = shipped_cells()
    if cell_id in cells:
        return cells[cell_id]
    plain = cells.get(cell_id.replace(f"+{Option.PRECOMPUTE_REF}", ""))
    if plain is None:
        return None
    return plain.model_copy(update={"options": tuple(sorted({*plain.options, Option.PRECOMPUTE_REF}))})


def in_matrix(cell: Cell) -> bool:
    return matrix_cell(cell.id) is not None


@dataclass(frozen=True)
class Fix:
    change: Change
    prediction: Prediction


def smallest_fix(plan: Plan, calibration: Calibration, fits: Callable[[Prediction], bool] | None = None) -> Fix | None:
    """The first change (PROPOSALS order) under which the planned cell is predicted to fit on its profile; None when
    none does.
    `fits`: what fitting means (default: the device verdict `fits`; `advise` adds the host memory of a node, so that
    no fix it proposes is host_oom)."""
    for propose in PROPOSALS:
        for change in propose(plan.cell, plan.workload):
            changed = plan_for(change.cell, plan.profile, change.workload)
            if changed.not_applicable is not None or not in_matrix(change.cell):
                continue
            prediction = predict(changed, calibration)
            if prediction.verdict == "fits" if fits is None else fits(prediction):
                return Fix(change, prediction)
    return None
