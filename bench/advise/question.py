"""What `advise` is asked, typed: the hardware and model (a `TargetRequest`), which setups to rank and how. The
command line builds a `Question` from its flags, the decision page one per point; both get the same predictions."""

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from bench.advise.target import TargetRequest, resolve_target
from bench.matrix.axes import Backend, Init, Method, Quant

if TYPE_CHECKING:
    from bench.estimate.predict import Prediction
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload

PREFERENCES = ("fastest", "fewest-gpus", "faithful")
"""The orders `--prefer` offers for the fitting setups (bench/advise/advice.py `ORDERS`)."""

AXES: dict[str, type[StrEnum]] = {"init": Init, "quant": Quant, "backend": Backend}
"""The axes `advise` narrows to (`--init two_models` and the like): a Cell field and its enum."""


@dataclass(frozen=True)
class Question:
    target: TargetRequest
    method: str = Method.DPO.value
    """Comma-separated methods, or all (bench/matrix/scenario.py `parse_methods`)."""
    filter: str | None = None
    """Glob(s) over cell ids, comma-separated."""
    init: str | None = None
    """Comma-separated values of the axis (None: every value); so are `quant` and `backend`."""
    quant: str | None = None
    backend: str | None = None
    host_ram: float | None = None
    """GB of host memory of one node (None: the GPU catalog's typical node)."""
    prefer: str = PREFERENCES[0]


def predicted(
    question: Question, matrix: "list[Cell] | None" = None
) -> "tuple[HardwareProfile, Workload, dict[str, Cell], list[Prediction]]":
    """What `advise` ranks: the profile, the workload, the cells of the question's methods by id and their
    predictions. `matrix`: the expanded matrix, when the caller has it already (the decision page asks for many)."""
    from bench.estimate.prediction_tables import predict_all
    from bench.matrix.scenario import expand, load_matrix, of_methods, parse_methods, select
    from bench.matrix.settings import with_precomputed_reference

    profile, workload = resolve_target(question.target)
    every = expand(load_matrix()) if matrix is None else matrix
    chosen = of_axes_asked(select(of_methods(every, parse_methods(question.method)), question.filter), question)
    cells = with_precomputed_reference(chosen, workload)
    return profile, workload, {c.id: c for c in cells}, predict_all(profile, workload, cells=cells)


def of_axes_asked(cells: "list[Cell]", question: Question) -> "list[Cell]":
    """The cells of the init, quant and backend values asked for; one line when none is left."""
    from bench.errors import BenchError
    from bench.matrix.scenario import of_axes, parse_axis

    asked = {axis: getattr(question, axis) for axis in AXES}
    wanted = {axis: None if text is None else parse_axis(f"--{axis}", text, AXES[axis]) for axis, text in asked.items()}
    narrowed = of_axes(cells, **wanted)
    if cells and not narrowed:
        shown = " ".join(f"--{axis} {','.join(v)}" for axis, v in wanted.items() if v is not None)
        raise BenchError(f"{shown}: no cell of the matrix has these values together (see `dpo-bench list`)")
    return narrowed


def fixed_cell(cell_id: str) -> "Cell":
    """A fix's cell that is not among the advised ones: a row of the matrix the narrowing (--filter, --init, ...)
    left out (the fix changes the setup), or a precompute_ref row the matrix has no row for."""
    from bench.advise.fixes import matrix_cell

    cell = matrix_cell(cell_id)
    if cell is None:  # smallest_fix proposes matrix cells only (fixes.in_matrix)
        raise ValueError(f"the fix's cell {cell_id} is not a cell of the matrix")
    return cell
