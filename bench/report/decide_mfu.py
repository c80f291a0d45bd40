"""The implied MFU beside each PREDICTED tokens/s on the decision page, equal to advise's (whole percent), in few
bytes: the page computes tokens/s x rate / peak from the tokens/s it shows, a rate (advise's MFU x peak / tokens/s:
FLOPs per token over devices, in TFLOP) being one of a few per method, model, count and max length (each cell's
class), a peak per GPU. Where the shown tokens/s (rounded) gives another percent than advise's, the point lists the
cell with the difference (or null: no MFU)."""

import math
from collections import Counter
from collections.abc import Iterator

from bench.report.decide_grid import DecisionGrid

CLASS_CODES = "0123456789abcdefghijklmnopqrstuvwxyz"
"""A cell's rate within its method, model, count and max length: the n-th rate of the row is the n-th character."""
NO_RATE = "-"
RATE_DIGITS = 7
"""Significant figures a rate is kept to: finer than the tokens/s it multiplies (three)."""


def advised_percent(mfu: float | None) -> int | None:
    """advise's table figure (`f"{mfu:.0%}"`) as an integer."""
    return None if mfu is None else round(100 * mfu)


def page_percent(tokens: int | None, rate: float | None, peak: float | None) -> int | None:
    """What the page computes, op for op as decide.js `mfuPercent` (floor(x + 0.5) in doubles, as Math.round)."""
    if tokens is None or rate is None or not peak:
        return None
    return math.floor(100 * (tokens * rate / peak) + 0.5)


def rate_row(model: int, count: int, length: int, counts: int, lengths: int) -> int:
    """The row of MFU rates of a point's (model, count, max length) indices, with `counts` and `lengths` the sizes of
    its method's axes (decide.js `rates` computes it from the point's position)."""
    return (model * counts + count) * lengths + length


def row_keys(grid: DecisionGrid) -> Iterator[tuple[int, int]]:
    """(method part, rate_row) of each point in `grid.points()` order."""
    for part_at, part in enumerate(grid.parts()):
        counts, lengths = len(part.counts), len(part.max_lengths)
        for model in range(len(grid.models)):
            for _gpu in grid.gpus:
                for count in range(counts):
                    for length in range(lengths):
                        row = rate_row(model, count, length, counts, lengths)
                        yield from ((part_at, row) for _ in part.batch_sizes)


def rate_of(mfu: float | None, tokens_per_s: float | None, peak: float | None) -> float | None:
    if mfu is None or not tokens_per_s or not peak:
        return None
    return float(f"{mfu * peak / tokens_per_s:.{RATE_DIGITS}g}")


RatesSeen = list[tuple[tuple[int, int], dict[int, float | None]]]
"""Per point: its (part, row) key and, by cell index, the rate its advised MFU gives (None: no MFU)."""


def rate_rows(grid: DecisionGrid, seen: RatesSeen) -> list[list[list]]:
    """Per method part, per row: [classes (a character per cell), rates]: each cell's most frequent rate there."""
    counted: dict[tuple[int, int], dict[int, Counter]] = {}
    for key, rates in seen:
        by_cell = counted.setdefault(key, {})
        for cell, rate in rates.items():
            if rate is not None:
                by_cell.setdefault(cell, Counter())[rate] += 1
    cells = 1 + max((c for _, rates in seen for c in rates), default=-1)
    parts = []
    for part_at, part in enumerate(grid.parts()):
        rows = []
        for row in range(len(grid.models) * len(part.counts) * len(part.max_lengths)):
            by_cell = counted.get((part_at, row), {})
            chosen = {c: n.most_common(1)[0][0] for c, n in by_cell.items()}
            distinct = list(dict.fromkeys(chosen[c] for c in sorted(chosen)))
            if len(distinct) > len(CLASS_CODES):
                raise ValueError(f"{len(distinct)} MFU rates in one row: more than {len(CLASS_CODES)} classes")
            classes = "".join(CLASS_CODES[distinct.index(chosen[c])] if c in chosen else NO_RATE for c in range(cells))
            rows.append([classes.rstrip(NO_RATE), distinct])
        parts.append(rows)
    return parts


def rate_in(row: list, cell: int) -> float | None:
    classes, rates = row
    code = classes[cell] if cell < len(classes) else NO_RATE
    return None if code == NO_RATE else rates[CLASS_CODES.index(code)]


def corrections(fitting: list[tuple[int, int | None, int | None]], row: list, peak: float | None) -> list:
    """[position, advised - computed (None: no MFU), ...] for the fitting cells, given as (cell index, shown tokens/s,
    advised percent) in the point's speeds order, where the page's computation differs from advise's figure."""
    fixes: list = []
    for position, (cell, tokens, advised) in enumerate(fitting):
        computed = page_percent(tokens, rate_in(row, cell), peak)
        if computed is None and advised is not None:
            raise ValueError(f"cell {cell}: advise has an MFU the page cannot compute (no rate or no peak)")
        if computed != advised:
            fixes += [position, None if advised is None else advised - computed]
    return fixes


def read_percent(
    tokens: int | None, row: list, cell: int, peak: float | None, fix: dict[int, int | None], at: int
) -> int | None:
    """The percent the page shows for a fitting cell (the `at`-th of the point's speeds): decide.js `mfuOf`."""
    computed = page_percent(tokens, rate_in(row, cell), peak)
    if at not in fix:
        return computed
    delta = fix[at]
    return None if delta is None or computed is None else computed + delta
