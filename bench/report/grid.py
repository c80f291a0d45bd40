"""Where each cell goes in a matrix: rows init · quant, columns backend (both in axis order), variants apart."""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bench.matrix.axes import Backend, Init, Quant
from bench.matrix.cell import is_variant_id
from bench.results.schema import ResultRecord


@dataclass(frozen=True)
class Grid:
    rows: list[tuple[str, str]]
    """(init, quant) pairs that have at least one base cell."""
    backends: list[str]
    cells: dict[tuple[str, str, str], str]
    """(init, quant, backend) -> the base cell's id."""
    variants: list[str]
    """Cell ids of the rows with another launcher or options, in the order given."""

    def cell(self, init: str, quant: str, backend: str) -> str | None:
        return self.cells.get((init, quant, backend))


def row_label(init: str, quant: str) -> str:
    return f"{init} · {quant}"


def in_axis_order(values: Iterable[str], axis: type[StrEnum]) -> list[str]:
    """Axis members first, in their declared order; values the axis does not know (older results) after them."""
    present = list(dict.fromkeys(values))
    known = [m.value for m in axis if m.value in present]
    return known + [v for v in present if v not in known]


def build_grid(records: Iterable[ResultRecord]) -> Grid:
    """Place the cells of `records` (any number of records per cell: the first one of a cell decides)."""
    cells: dict[tuple[str, str, str], str] = {}
    variants: list[str] = []
    seen: set[str] = set()
    for r in records:
        if r.cell_id in seen:
            continue
        seen.add(r.cell_id)
        if is_variant_id(r.cell_id, r.init, r.quant, r.backend, r.method):
            variants.append(r.cell_id)
        else:
            cells.setdefault((r.init, r.quant, r.backend), r.cell_id)
    inits = in_axis_order((i for i, _, _ in cells), Init)
    quants = in_axis_order((q for _, q, _ in cells), Quant)
    present = {(i, q) for i, q, _ in cells}
    rows = [(i, q) for i in inits for q in quants if (i, q) in present]
    return Grid(rows, in_axis_order((b for _, _, b in cells), Backend), cells, variants)
