"""advise's picks among the fitting cells, made within each method: the fastest, the one on the fewest GPUs, the most
faithful; each labelled only by figures it has. And the folding of launcher variants that predict alike into one row."""

import math
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar, get_args

from pydantic import BaseModel

from bench.matrix.axes import Method
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.quants import quant_spec

PickKind = Literal["fastest", "fewest-gpus", "faithful"]
PICK_KINDS: tuple[str, ...] = get_args(PickKind)


class Pick(BaseModel):
    kind: PickKind
    method: str = Method.DPO.value
    """The method the pick is made within: a pick never weighs one method's cells against another's."""
    cell_id: str
    alternatives: list[str] = []
    """The pick's row's launcher variants with the same prediction (CellAdvice.alternatives)."""
    reason: str
    """What it is picked by, in the figures it has (a cell with no PREDICTED speed is never `fastest`)."""


class RankedRow(Protocol):
    """What a pick reads of an advice row (advice.CellAdvice)."""

    cell_id: str
    method: str
    init: str
    quant: str
    devices: int
    verdict: str
    tokens_per_s: float | None
    alternatives: list[str]


R = TypeVar("R", bound=RankedRow)


def faithfulness(init: str, quant: str) -> tuple[bool, bool, float]:
    """How far from training the model's own weights a cell is (smaller: closer): full fine-tuning, then adapters
    on the training precision's weights, then on quantized ones, the more bytes per weight the closer (8-bit, 4-bit);
    from the specs (InitSpec.adapters, QuantSpec.quantized and bytes_per_weight)."""
    quantized = quant_spec(quant)
    return init_spec(init).adapters, quantized.quantized, -quantized.bytes_per_weight


def trains(init: str, quant: str) -> str:
    """`full fine-tuning`, `LoRA on the training precision's weights`, `LoRA on 4-bit weights`."""
    if not init_spec(init).adapters:
        return "full fine-tuning"
    spec = quant_spec(quant)
    weights = f"{spec.bytes_per_weight * 8:.0f}-bit" if spec.quantized else "the training precision's"
    return f"LoRA on {weights} weights"


SHOWN_DIGITS = 3
"""Significant figures a PREDICTED tokens/s is shown with: its range spans tens of percent, so more digits would be
noise (and the decision page's data, which carries every fitting cell's figure, compresses to a fraction)."""


def shown_tokens(tokens_per_s: float) -> int:
    """A PREDICTED tokens/s as advise and the decision page show it: SHOWN_DIGITS significant figures."""
    if tokens_per_s == 0:
        return 0
    return int(round(tokens_per_s, SHOWN_DIGITS - 1 - math.floor(math.log10(abs(tokens_per_s)))))


def _speed(row: RankedRow) -> str:
    return (
        "no PREDICTED speed" if row.tokens_per_s is None else f"{shown_tokens(row.tokens_per_s):,} PREDICTED tokens/s"
    )


def _gpus(row: RankedRow) -> str:
    return f"{row.devices} GPU{'s' if row.devices > 1 else ''}"


def _of_method(fits: list[R], orders: dict[str, Callable[[R], tuple]]) -> list[Pick]:
    """The picks among one method's fitting rows; `fastest` only among the rows with a PREDICTED speed."""
    timed = [r for r in fits if r.tokens_per_s is not None]
    chosen: list[tuple[PickKind, R, str]] = []
    if timed:
        fastest = min(timed, key=orders["fastest"])
        untimed = (
            f" ({len(fits) - len(timed)} of {len(fits)} fitting have no PREDICTED speed)"
            if len(timed) < len(fits)
            else ""
        )
        chosen.append(("fastest", fastest, f"the fastest: {_speed(fastest)} on {_gpus(fastest)}{untimed}"))
    fewest = min(fits, key=orders["fewest-gpus"])
    chosen.append(("fewest-gpus", fewest, f"the fewest GPUs: {_gpus(fewest)}, {_speed(fewest)}"))
    faithful = min(fits, key=orders["faithful"])
    what = trains(faithful.init, faithful.quant)
    chosen.append(("faithful", faithful, f"the most faithful: {what}, on {_gpus(faithful)}, {_speed(faithful)}"))
    return [
        Pick(kind=kind, method=row.method, cell_id=row.cell_id, alternatives=list(row.alternatives), reason=reason)
        for kind, row, reason in chosen
    ]


def _fitting_by_method(ranked: Sequence[R]) -> list[tuple[Method, list[R]]]:
    """Each method (in Method's order) with fitting rows, and those rows."""
    found = [(m, [r for r in ranked if r.verdict == "fits" and r.method == m]) for m in Method]
    return [(m, fits) for m, fits in found if fits]


def picks(ranked: Sequence[R], orders: dict[str, Callable[[R], tuple]]) -> list[Pick]:
    """Per method (in Method's order), the picks among its fitting rows; `orders`: each kind's sort key."""
    return [pick for _, fits in _fitting_by_method(ranked) for pick in _of_method(fits, orders)]


def no_fastest(ranked: Sequence[RankedRow]) -> list[str]:
    """The methods (titles) whose fitting rows all lack a PREDICTED speed: they have no `fastest` pick."""
    return [method_spec(m).title for m, fits in _fitting_by_method(ranked) if all(r.tokens_per_s is None for r in fits)]


FOLD_FIELDS = (
    "verdict",
    "devices",
    "fit_probability",
    "total_bytes",
    "range_low_bytes",
    "range_high_bytes",
    "tokens_per_s",
    "host_bytes",
    "host_need_bytes",
    "margin_bytes",
    "terms",
)
"""What "the same prediction" compares: the verdict, the memory and its terms, the speed, the host need."""


def _fold_key(row: RankedRow, cell: Cell) -> tuple:
    plain = cell.model_copy(update={"launcher": backend_spec(cell.backend).default_launcher})
    return plain.id, tuple(repr(getattr(row, name)) for name in FOLD_FIELDS)


def collapse_variants(ranked: list[R], cells: dict[str, Cell]) -> list[R]:
    """`ranked` with each group of cells that differ only by launcher and predict alike folded into its best-ranked
    one, which names the others in `alternatives`."""
    kept: dict[tuple, int] = {}
    rows: list[R] = []
    others: list[list[str]] = []
    for row in ranked:
        key = _fold_key(row, cells[row.cell_id])
        if key in kept:
            others[kept[key]].append(row.cell_id)
            continue
        kept[key] = len(rows)
        rows.append(row)
        others.append([])
    return [r.model_copy(update={"alternatives": o}) if o else r for r, o in zip(rows, others, strict=True)]  # type: ignore[attr-defined]
