"""The decision page's data: every point of the grid predicted by `advise`'s own path, encoded compactly for the
page's script. `predict_grid` computes (the slow part); `encode` is pure.

The encoding: names tables (methods with their axes, offset and layout; models, GPUs with their peaks, verdicts,
terms, reasons, cells with their method and command, MFU rates), and per point (method by method, the grid's order)
`[usable, marks, reasons, sizes, speeds, picks, host of a node, generation, MFU fixes (decide_mfu.py)]`; marks,
reasons, sizes and generation index tables of distinct values. sizes: per predicted cell SIZE_FIELDS numbers; marks:
a character per cell (VERDICT_CODES; `x` not applicable; `-` absent); picks: `[cell, reason, kind]` each; generation:
null or `[completions per prompt, completion length, prompt length or null]`; host of a node null: host unchecked.
Sizes in UNIT; the page computes margins (usable - total) and a point's flags from its axes (`point_flags`)."""

import base64
import gzip
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.advise.picks import shown_tokens
from bench.advise.question import Question
from bench.estimate import VERSION
from bench.estimate.predict import Prediction
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.profiles import HardwareProfile
from bench.report.decide_grid import DecisionGrid, advise_question
from bench.report.decide_mfu import (
    advised_percent,
    corrections,
    rate_of,
    rate_row,
    rate_rows,
    read_percent,
    row_keys,
)
from bench.report.grid import build_grid, row_label
from bench.report.progress_line import ProgressLine

VERDICT_CODES = "abcdefghij"
"""A point's verdicts are a string, one character per cell: the n-th verdict of the table is the n-th letter."""
VERDICT_ABSENT = "-"
VERDICT_NOT_APPLICABLE = "x"
FLAGS = "@FLAGS@"
"""Stands for a point's flags in each cell's command template (shlex leaves it unquoted)."""


@dataclass(frozen=True)
class PageGeneration:
    """What an online method samples per step (the workload's `generation`): shown with its picks."""

    num_generations: int
    completion_length: int
    prompt_length: int | None
    """None: a prompt may take the whole max length."""


@dataclass(frozen=True)
class PointResult:
    flags: str
    """The point's hardware, model and settings flags, shell-quoted: what `advise` puts in the commands it prints."""
    usable_bytes: float | None
    predictions: list[Prediction]
    cells: dict[str, Cell]
    host_oom: frozenset[str] = frozenset()
    """Cells whose offloaded state is over the host memory of a node (`advise`'s host_oom; bench/advise/host.py)."""
    speeds: dict[str, float | None] = field(default_factory=dict)
    """PREDICTED tokens/s of the cells that fit (advise's ranking figure), by cell id."""
    mfus: dict[str, float | None] = field(default_factory=dict)
    """The MFU each of those speeds implies (advise's `mfu`), by cell id; None: no speed or no peak."""
    picks: tuple[tuple[str, str, str], ...] = ()
    """advise's picks among the fitting cells, up to one per kind: (kind, cell id, reason); empty when none fits."""
    host_need: dict[str, float] = field(default_factory=dict)
    """Host bytes each offload cell needs on one node (advise's host_need_bytes), by cell id."""
    host_memory_bytes: float | None = None
    """The host memory of one node the offload cells are held against; None: host unchecked (advise's mark)."""
    generation: PageGeneration | None = None
    """The workload's sampling settings, for the methods that generate."""
    peak_tflops: float | None = None
    """The profile's peak the MFU is over (bench/judge/mfu.py); None: no MFU."""


PointPredictor = Callable[[Question, list[Cell]], tuple[HardwareProfile, PointResult]]
"""`advise`'s own prediction of one point (bench/report/decide_point.py `advise_point`), given to publish."""


@dataclass(frozen=True)
class DecisionPageJob:
    """What building the decision page's data takes: its grid, the predictor of one point, the processes."""

    grid: DecisionGrid
    predict: PointPredictor
    jobs: int = 1
    progress_every_s: float = 10.0
    """Each model's points say how far they are on standard error this often (and when done)."""


def predict_grid(decision: DecisionPageJob) -> tuple[list[PointResult], dict[str, str]]:
    """Every point, in `grid.points()` order, and each cell's command template; `jobs` processes, one method's
    model at a time each (the points are independent; the order is kept)."""
    grid = decision.grid
    parts = [(method, model) for method in range(len(grid.parts())) for model in range(len(grid.models))]
    processes = max(1, min(decision.jobs, len(parts)))
    print(
        f"decision page: predicting {grid.size():,} points ({len(grid.models)} models, {processes} "
        f"process{'es' if processes > 1 else ''})",
        file=sys.stderr,
        flush=True,
    )
    if processes == 1:
        done = [_predict_part(decision, part) for part in parts]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=processes) as pool:
            done = list(pool.map(_predict_part, [decision] * len(parts), parts))
    points, commands = [], {}
    for part_points, part_commands in done:
        points += part_points
        commands.update({k: v for k, v in part_commands.items() if k not in commands})
    return points, commands


def _predict_part(decision: DecisionPageJob, part: tuple[int, int]) -> tuple[list[PointResult], dict[str, str]]:
    """The points of one method (index in `grid.parts()`) and one model (index in `grid.models`)."""
    from bench.matrix.scenario import expand, load_matrix

    grid, matrix = decision.grid, expand(load_matrix())
    method, model = grid.parts()[part[0]], grid.models[part[1]]
    mine = [point for point in grid.points(method) if point[0] == model]
    named = model.name if method.method == "dpo" else f"{method.method} {model.name}"
    progress = ProgressLine(f"decision page, {named}", len(mine), every_s=decision.progress_every_s)
    points, commands = [], {}
    for done, point in enumerate(mine, 1):
        _, result = decision.predict(advise_question(*point), matrix)
        points.append(result)
        commands.update({c.id: command_template(c) for c in result.cells.values() if c.id not in commands})
        progress.advanced(done)
    return points, commands


def command_template(cell: Cell) -> str:
    """The command `advise` prints for `cell` (bench/advise/command.py), the point's flags as FLAGS."""
    from bench.advise.command import run_command

    return run_command(cell, [FLAGS], [])


def command_of(template: str, flags: str) -> str:
    """What the page shows: the template with the point's flags in."""
    return template.replace(FLAGS, flags)


UNIT = 1e8
"""Sizes are integers of 0.1 GB (10^8 bytes): the page shows GB with one decimal."""
TOKENS = "@T@"
"""Stands for a pick's PREDICTED tokens/s in its reason (the number is the cell's, in the point's speeds)."""


def units(value: float | None) -> int | None:
    return None if value is None else round(value / UNIT)


def tokens(value: float | None) -> int | None:
    """A PREDICTED tokens/s as advise shows it (shown_tokens)."""
    return None if value is None else shown_tokens(value)


def reason_template(reason: str, tokens_per_s: float | None) -> str:
    """advise's reason with its tokens/s figure as TOKENS (the table of reasons stays small)."""
    if tokens_per_s is None:
        return reason
    return reason.replace(f"{shown_tokens(tokens_per_s):,} PREDICTED", f"{TOKENS} PREDICTED", 1)


class _Table:
    """Values numbered in first-seen order."""

    def __init__(self) -> None:
        self.index: dict[object, int] = {}

    def __call__(self, value: object) -> int:
        return self.index.setdefault(value, len(self.index))

    def values(self) -> list:
        return list(self.index)


@dataclass
class _Tables:
    """The page's lookup tables: each point refers to their entries by number."""

    verdicts: _Table = field(default_factory=_Table)
    terms: _Table = field(default_factory=_Table)
    reasons: _Table = field(default_factory=_Table)
    breakdowns: _Table = field(default_factory=_Table)
    sizes: _Table = field(default_factory=_Table)
    marks: _Table = field(default_factory=_Table)
    not_applicable: _Table = field(default_factory=_Table)
    cell_ids: _Table = field(default_factory=_Table)
    why_picked: _Table = field(default_factory=_Table)
    pick_kinds: _Table = field(default_factory=_Table)
    generations: _Table = field(default_factory=_Table)


def _fitting(point: PointResult, t: _Tables) -> list[tuple[int, str]]:
    """(cell index, cell id) of the point's fitting cells (on the device and the host), in the cells' order: the
    cells its speeds (and MFU) are of."""
    by_cell = {p.cell_id: p for p in point.predictions}
    return [
        (at, cell_id)
        for cell_id, at in t.cell_ids.index.items()
        if (p := by_cell.get(cell_id)) is not None
        and p.status == "predicted"
        and cell_id not in point.host_oom
        and p.verdict == "fits"
    ]


def _mfu(grid: DecisionGrid, points: list[PointResult], t: _Tables, encoded: list[list]) -> dict:
    """The MFU rates and peaks (decide_mfu.py); each encoded point gets its fixes, its last field."""
    peaks: dict[str, float | None] = {}
    for point, (_, gpu, *_) in zip(points, grid.points(), strict=True):
        if peaks.setdefault(gpu, point.peak_tflops) != point.peak_tflops:
            raise ValueError(f"{gpu}: two peaks ({peaks[gpu]}, {point.peak_tflops}) on one page")
    keys = list(row_keys(grid))
    fitting = [_fitting(point, t) for point in points]
    seen = [
        (key, {i: rate_of(point.mfus.get(c), point.speeds.get(c), point.peak_tflops) for i, c in fit})
        for key, point, fit in zip(keys, points, fitting, strict=True)
    ]
    rates = rate_rows(grid, seen)
    for row, (part, at), point, fit in zip(encoded, keys, points, fitting, strict=True):
        shown = [(i, tokens(point.speeds.get(c)), advised_percent(point.mfus.get(c))) for i, c in fit]
        row.append(corrections(shown, rates[part][at], point.peak_tflops))
    return {"peaks": [peaks.get(g) for g in grid.gpus], "mfu_rates": rates}


def _point_row(point: PointResult, t: _Tables) -> list:
    """One point: its usable memory, each cell's verdict mark, N/A reason and sizes, the fitting cells' speeds, the
    picks (kind by name: a point may have fewer than every kind), the host of a node and the sampling settings."""
    by_cell = {p.cell_id: p for p in point.predictions}
    size: list[int | None] = []
    mark = [VERDICT_ABSENT] * len(t.cell_ids.index)
    why: list[int | None] = [None] * len(t.cell_ids.index)
    for cell_id, at in t.cell_ids.index.items():
        p = by_cell.get(cell_id)
        if p is None:
            continue
        if p.status != "predicted":
            mark[at] = VERDICT_NOT_APPLICABLE
            why[at] = t.reasons(p.reason)
            continue
        breakdown = tuple(x for name, value in p.terms.items() for x in (t.terms(name), units(value)))
        total = units(p.total_bytes) or 0
        low = None if p.range_low_bytes is None else total - (units(p.range_low_bytes) or 0)
        high = None if p.range_high_bytes is None else (units(p.range_high_bytes) or 0) - total
        chance = None if p.fit_probability is None else round(100 * p.fit_probability)
        host = point.host_need.get(cell_id, p.host_bytes)
        size += [total, low, high, units(host), units(p.host_bytes or None), t.breakdowns(breakdown), chance]
        verdict = "host_oom" if p.cell_id in point.host_oom else p.verdict or "unknown"
        mark[at] = VERDICT_CODES[t.verdicts(verdict)]
    picked = [
        x
        for kind, cell_id, reason in point.picks
        for x in (
            t.cell_ids(cell_id),
            t.why_picked(reason_template(reason, point.speeds.get(cell_id))),
            t.pick_kinds(kind),
        )
    ]
    g = point.generation
    return [
        units(point.usable_bytes),
        t.marks("".join(mark)),
        t.not_applicable(tuple(why)),
        t.sizes(tuple(size)),
        [tokens(point.speeds.get(cell_id)) for _, cell_id in _fitting(point, t)],
        picked,
        units(point.host_memory_bytes),
        None if g is None else t.generations((g.num_generations, g.completion_length, g.prompt_length)),
    ]


def encode(grid: DecisionGrid, points: list[PointResult], commands: dict[str, str]) -> dict:
    """The page's data. `points` in `grid.points()` order; `commands`: cell id -> its command template.
    Deterministic: the same points give the same data (tables in first-seen order, no time stamps)."""
    t = _Tables()
    cells: dict[str, Prediction] = {}
    for point in points:
        for p in point.predictions:
            t.cell_ids(p.cell_id)
            cells.setdefault(p.cell_id, p)
    setups = {cid: str(c.setup) for point in points for cid, c in point.cells.items()}
    encoded = [_point_row(point, t) for point in points]
    mfu = _mfu(grid, points, t, encoded)
    position = {c: i for i, c in enumerate(t.cell_ids.values())}
    data = {
        "predicted": "PREDICTED",
        "estimator_version": VERSION,
        "unit": UNIT,
        "methods": _methods(grid, [cells[c] for c in t.cell_ids.values()], position),
        "models": [{"name": m.name, "flag": m.flag} for m in grid.models],
        "gpus": list(grid.gpus),
        "peaks": mfu["peaks"],
        "verdicts": t.verdicts.values(),
        "terms": t.terms.values(),
        "reasons": t.reasons.values(),
        "picks": t.pick_kinds.values(),
        "pick_reasons": t.why_picked.values(),
        "generations": [list(g) for g in t.generations.values()],
        "cells": [
            {
                "id": c,
                "method": str(cells[c].method),
                "init": cells[c].init,
                "quant": cells[c].quant,
                "backend": cells[c].backend,
                "setup": setups.get(c, ""),
                "command": commands[c],
            }
            for c in t.cell_ids.values()
        ],
        "breakdowns": [list(b) for b in t.breakdowns.values()],
        "sizes": [list(s) for s in t.sizes.values()],
        "marks": t.marks.values(),
        "not_applicable": [list(row) for row in t.not_applicable.values()],
        "mfu_rates": mfu["mfu_rates"],
        "points": encoded,
    }
    for at, point in enumerate(points):
        if point_flags(data, at) != point.flags:  # the page derives a point's flags from its axes
            raise ValueError(f"point {at}: the page would show {point_flags(data, at)!r}, advise has {point.flags!r}")
    return data


def _methods(grid: DecisionGrid, cells: list[Prediction], position: dict[str, int]) -> list[dict]:
    """Each method's part of the grid: its axes, where its points start and its cells laid out (rows init · quant,
    columns backend, then the variants)."""
    parts, offset = [], 0
    for part in grid.parts():
        layout = build_grid(c for c in cells if str(c.method) == part.method)
        parts.append(
            {
                "name": part.method,
                "title": method_spec(Method(part.method)).title,
                "counts": list(part.counts),
                "max_lengths": list(part.max_lengths),
                "batch_sizes": list(part.batch_sizes),
                "offset": offset,
                "backends": layout.backends,
                "rows": [
                    [row_label(init, quant), [_at(position, layout.cell(init, quant, b)) for b in layout.backends]]
                    for init, quant in layout.rows
                ],
                "variants": [position[c] for c in layout.variants],
            }
        )
        offset += sum(1 for _ in grid.points(part))
    return parts


PACKED = ("cells", "reasons", "breakdowns", "sizes", "marks", "not_applicable", "mfu_rates", "points")
"""The large parts of the data, shipped gzip-compressed: the page inflates them with the browser's own
DecompressionStream."""
SIZE_FIELDS = 7
"""A size row is [total, total - low, high - total, host need per node, host per rank, breakdown, P(fit) %] per
predicted cell: packed a field at a time (all the rows' totals, then all their lows, ...), which gzip compresses to
about 60 % of the rows as they are."""


def pack(data: dict) -> dict:
    """`data` with PACKED as one base85 string (Python's b85encode: 5 characters per 4 bytes, where base64 takes
    16 per 12) of gzipped JSON. Deterministic (no time stamp in the gzip header), so an
    unchanged grid gives the same bytes."""
    big = {k: data[k] for k in PACKED}
    big["sizes"] = [[row[f::SIZE_FIELDS] for row in data["sizes"]] for f in range(SIZE_FIELDS)]
    text = json.dumps(big, separators=(",", ":")).encode()
    packed = base64.b85encode(gzip.compress(text, compresslevel=9, mtime=0)).decode("ascii")
    return {**{k: v for k, v in data.items() if k not in PACKED}, "packed": packed}


def unpack(data: dict) -> dict:
    """pack's inverse (what the page's script does)."""
    if "packed" not in data:
        return data
    big = json.loads(gzip.decompress(base64.b85decode(data["packed"])))
    fields = big["sizes"]
    big["sizes"] = [
        [v for values in zip(*(f[r] for f in fields), strict=True) for v in values] for r in range(len(fields[0]))
    ]
    return {**{k: v for k, v in data.items() if k != "packed"}, **big}


def _at(position: dict[str, int], cell_id: str | None) -> int | None:
    return None if cell_id is None else position[cell_id]


def _method(data: dict, name: str) -> dict:
    return next(m for m in data["methods"] if m["name"] == name)


def _axes(data: dict, method: dict) -> list[list]:
    return [data["models"], data["gpus"], method["counts"], method["max_lengths"], method["batch_sizes"]]


def point_index(
    data: dict, model: str, gpu: str, count: int, max_length: int, batch_size: int, method: str = "dpo"
) -> int:
    """Where a point is in `data["points"]` (what the page's script computes from its selection)."""
    part = _method(data, method)
    at = 0
    for values, chosen in zip(_axes(data, part), (model, gpu, count, max_length, batch_size), strict=True):
        keys = [v["name"] if isinstance(v, dict) else v for v in values]
        at = at * len(keys) + keys.index(chosen)
    return part["offset"] + at


def _indices(data: dict, at: int) -> tuple[int, list[int]]:
    """The method part of point `at` and its index on each axis (model, gpu, count, max length, batch size)."""
    part = [i for i, m in enumerate(data["methods"]) if m["offset"] <= at][-1]
    method = data["methods"][part]
    chosen, left = [], at - method["offset"]
    for values in reversed(_axes(data, method)):
        left, i = divmod(left, len(values))
        chosen.insert(0, i)
    return part, chosen


def point_of(data: dict, at: int) -> tuple[dict, dict, str, int, int, int]:
    """point_index's inverse: (method, model, gpu, count, max length, batch size) of point `at`."""
    part, chosen = _indices(data, at)
    method = data["methods"][part]
    model, gpu, count, length, batch = (values[i] for values, i in zip(_axes(data, method), chosen, strict=True))
    return method, model, gpu, count, length, batch


def _mfu_of(data: dict, at: int) -> tuple[list, float | None]:
    """Point `at`'s row of MFU rates (its method, model, count, max length) and its GPU's peak."""
    part, (model, gpu, count, length, _) = _indices(data, at)
    method = data["methods"][part]
    row = rate_row(model, count, length, len(method["counts"]), len(method["max_lengths"]))
    return data["mfu_rates"][part][row], data["peaks"][gpu]


def point_flags(data: dict, at: int) -> str:
    """The flags of point `at` as advise repeats them (TargetRequest.flags), from its axes: the page's script builds
    the same (decide.js `flagsOf`)."""
    _, model, gpu, count, length, batch = point_of(data, at)
    return f"--gpu {gpu}:{count} {model['flag']} {model['name']} --max-length {length} --batch-size {batch}"


def read_point(data: dict, at: int) -> dict:
    """The encoding of point `at` read back, as the page's script reads it: {"cells": cell id -> {verdict, total,
    low, high, margin, host (need per node), host_unchecked, fit_percent, tokens_per_s, mfu_percent, terms, command}
    (sizes in GB, rounded as shown) or {verdict: not_applicable, reason}; "picks": [{kind, cell_id, reason (advise's),
    shown (with the MFU beside its tokens/s)}]; "generation"}."""
    usable, marks, why, sizes, speeds, picked, host_node, generation, fixes = data["points"][at]
    flags = point_flags(data, at)
    unit = data["unit"] / 1e9
    values, fast = iter(data["sizes"][sizes]), iter(enumerate(speeds))
    rates, peak = _mfu_of(data, at)
    fix = dict(zip(fixes[::2], fixes[1::2], strict=True))
    cells: dict[str, dict] = {}
    for i, mark in enumerate(data["marks"][marks]):
        cell_id = data["cells"][i]["id"]
        if mark == VERDICT_ABSENT:
            continue
        if mark == VERDICT_NOT_APPLICABLE:
            cells[cell_id] = {"verdict": "not_applicable", "reason": data["reasons"][data["not_applicable"][why][i]]}
            continue
        total, low, high, host, per_rank, breakdown, chance = (next(values) for _ in range(SIZE_FIELDS))
        pairs = data["breakdowns"][breakdown]
        verdict = data["verdicts"][VERDICT_CODES.index(mark)]
        cells[cell_id] = {
            "verdict": verdict,
            "total": round(total * unit, 1),
            "low": None if low is None else round((total - low) * unit, 1),
            "high": None if high is None else round((total + high) * unit, 1),
            "margin": None if usable is None else round((usable - total) * unit, 1),
            "host": round(host * unit, 1),
            "host_unchecked": per_rank is not None and host_node is None,
            "host_column": host_column(per_rank, host, host_node, unit),
            "fit_percent": chance,
            **_speed(next(fast) if verdict == "fits" else None, rates, i, peak, fix),
            "terms": {data["terms"][pairs[k]]: round(pairs[k + 1] * unit, 1) for k in range(0, len(pairs), 2)},
            "command": command_of(data["cells"][i]["command"], flags),
        }
    return {"cells": cells, "picks": _picks(data, picked, cells), "generation": _generation(data, generation)}


def _speed(fast: tuple[int, int | None] | None, rates: list, cell: int, peak: float | None, fix: dict) -> dict:
    """A cell's tokens/s and the MFU percent the page shows beside it (None: not fitting, no speed or no MFU)."""
    if fast is None:
        return {"tokens_per_s": None, "mfu_percent": None}
    at, speed = fast
    return {"tokens_per_s": speed, "mfu_percent": read_percent(speed, rates, cell, peak, fix, at)}


def speed_text(tokens_per_s: int | None, mfu_percent: int | None) -> str:
    """A tokens/s as the page shows it, its MFU beside it: advise's table column (bench/advise/render.py `_speed`)."""
    if tokens_per_s is None:
        return "—"
    return f"{tokens_per_s:,}" + ("" if mfu_percent is None else f" · MFU {mfu_percent}%")


def host_column(per_rank: int | None, need: int | None, node: int | None, unit: float) -> str:
    """advise's host column (bench/advise/render.py `_host`, its bold left out), as the page's script writes it."""
    if per_rank is None:  # nothing offloaded
        return "—"

    def gb(units: int | None) -> str:
        return f"{(units or 0) * unit:,.1f} GB"

    if node is None:
        return f"{gb(per_rank)}/rank, {gb(need)} per node, host unchecked"
    return f"{gb(per_rank)}/rank, {gb(need)} of {gb(node)} per node"


def _picks(data: dict, picked: list[int], cells: dict[str, dict]) -> list[dict]:
    """The point's picks, each with its kind as the data names it (a point may lack a kind)."""
    picks = []
    for k in range(0, len(picked), 3):
        cell_id = data["cells"][picked[k]]["id"]
        speed, mfu = cells[cell_id]["tokens_per_s"], cells[cell_id]["mfu_percent"]
        reason = data["pick_reasons"][picked[k + 1]]
        shown = reason
        if speed is not None and TOKENS in reason:
            reason = reason.replace(TOKENS, f"{speed:,}")
            shown = reason + ("" if mfu is None else f" · MFU {mfu}%")
        picks.append({"kind": data["picks"][picked[k + 2]], "cell_id": cell_id, "reason": reason, "shown": shown})
    return picks


def _generation(data: dict, at: int | None) -> dict | None:
    if at is None:
        return None
    completions, completion_length, prompt_length = data["generations"][at]
    return {"num_generations": completions, "completion_length": completion_length, "prompt_length": prompt_length}
