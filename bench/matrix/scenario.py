"""Expansion of scenarios/matrix.yaml into cells, selection by id, and the not-applicable rules.

The rules here are the single source of every N/A cell in every table.
"""

import datetime as dt
import fnmatch
import functools
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path

from pydantic import Field, model_validator

from bench.errors import BenchError
from bench.matrix.axes import Backend, Init, Launcher, Method, Option, Quant, Setup
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.online_rules import RULES as ONLINE_RULES
from bench.matrix.online_rules import TARGET_RULES
from bench.matrix.quants import quant_spec
from bench.matrix.recipes import newcomer_differs
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import scenarios_dir


class Axes(Strict):
    init: list[Init] = Field(min_length=1)
    quant: list[Quant] = Field(min_length=1)
    backend: list[Backend] = Field(min_length=1)


class Variant(Strict):
    """Extra rows: the same init x quant x backend run with another launcher, world size, options and/or the
    newcomer setup."""

    init: list[Init] = Field(min_length=1)
    quant: list[Quant] = Field(min_length=1)
    backend: list[Backend] = Field(min_length=1)
    launcher: Launcher | None = None
    ranks: int | None = Field(default=None, ge=1)
    """A fixed world size (e.g. 1: the offload backends on one device, whatever the profile's processes)."""
    options: list[Option] = []
    setup: Setup = Setup.RECIPE
    added: dt.datetime | None = None
    """When the rows joined the matrix: a run that started before that is complete without them."""

    @model_validator(mode="after")
    def _launcher_fits_backends(self) -> "Variant":
        if self.launcher is None and self.ranks is None and not self.options and self.setup == Setup.RECIPE:
            raise ValueError("a variant needs a launcher, ranks, options or setup: newcomer")
        _check_launcher_and_ranks(self.backend, self.launcher, self.ranks)
        return self


def _check_launcher_and_ranks(backends: list[Backend], launcher: Launcher | None, ranks: int | None) -> None:
    """A row's launcher must launch each of its backends, and a fixed world size needs a multi-process backend that
    runs with that many."""
    for backend in backends:
        spec = backend_spec(backend)
        if launcher is not None and launcher not in spec.launchers:
            allowed = ", ".join(spec.launchers)
            raise ValueError(f"launcher {launcher} cannot launch backend {backend}; allowed: {allowed}")
        if ranks is not None and not spec.multi_process:
            raise ValueError(f"ranks applies to multi-process backends; {backend} runs one process")
        if ranks is not None and ranks < spec.min_processes:
            raise ValueError(f"ranks {ranks} for {backend}: {spec.alone}")


class Addition(Strict):
    """Backends that joined the axes after the first runs: their base cells are rows added at `at`."""

    backend: list[Backend] = Field(min_length=1)
    at: dt.datetime


class MethodRows(Strict):
    """Cells of other training methods than DPO: each listed method over this slice of the axes, with the backend's
    default launcher or, as DPO's variant rows, another launcher, a fixed world size or options."""

    method: list[Method] = Field(min_length=1)
    init: list[Init] = Field(min_length=1)
    quant: list[Quant] = Field(min_length=1)
    backend: list[Backend] = Field(min_length=1)
    launcher: Launcher | None = None
    ranks: int | None = Field(default=None, ge=1)
    options: list[Option] = []
    added: dt.datetime | None = None
    """When the rows joined the matrix: a run that started before that is complete without them (a cell an undated
    row also lists was there from the start)."""

    @model_validator(mode="after")
    def _not_dpo(self) -> "MethodRows":
        if Method.DPO in self.method:
            raise ValueError("dpo's cells are the axes (and variants) above; list only other methods here")
        _check_launcher_and_ranks(self.backend, self.launcher, self.ranks)
        return self


class MatrixSpec(Strict):
    axes: Axes
    added: list[Addition] = []
    variants: list[Variant] = []
    methods: list[MethodRows] = []

    @model_validator(mode="after")
    def _added_backends_are_on_the_axis(self) -> "MatrixSpec":
        for addition in self.added:
            missing = [b for b in addition.backend if b not in self.axes.backend]
            if missing:
                raise ValueError(f"added backend {missing[0]} is not in axes.backend")
        return self


def load_matrix(path: Path | None = None) -> MatrixSpec:
    """matrix.yaml at `path` (default: the scenario folder in use's)."""
    return load_yaml_model(path or scenarios_dir() / "matrix.yaml", MatrixSpec)


def _variant_cells(variant: Variant) -> list[Cell]:
    return [
        Cell(
            init=init,
            quant=quant,
            backend=backend,
            launcher=variant.launcher or backend_spec(backend).default_launcher,
            ranks=variant.ranks,
            options=tuple(variant.options),
            setup=variant.setup,
        )
        for init in variant.init
        for quant in variant.quant
        for backend in variant.backend
    ]


def _method_cells(rows: MethodRows) -> list[Cell]:
    return [
        Cell(
            method=method,
            init=init,
            quant=quant,
            backend=backend,
            launcher=rows.launcher or backend_spec(backend).default_launcher,
            ranks=rows.ranks,
            options=tuple(rows.options),
        )
        for method in rows.method
        for init in rows.init
        for quant in rows.quant
        for backend in rows.backend
    ]


def rows_added(matrix: MatrixSpec) -> dict[str, dt.datetime]:
    """Cell id -> when its row joined the matrix: a dated variant or methods row, or any row of a backend added to
    the axes (the later of the two when both apply)."""
    added: dict[str, dt.datetime] = {}
    for variant in matrix.variants:
        if variant.added is not None:
            for cell in _variant_cells(variant):
                added[cell.id] = min(added.get(cell.id, variant.added), variant.added)
    from_start = {cell.id for rows in matrix.methods if rows.added is None for cell in _method_cells(rows)}
    for rows in matrix.methods:
        if rows.added is not None:
            for cell in _method_cells(rows):
                if cell.id not in from_start:
                    added[cell.id] = min(added.get(cell.id, rows.added), rows.added)
    backend_added: dict[Backend, dt.datetime] = {}
    for addition in matrix.added:
        for backend in addition.backend:
            backend_added[backend] = min(backend_added.get(backend, addition.at), addition.at)
    for cell in expand(matrix):
        if cell.backend in backend_added:
            added[cell.id] = max(added.get(cell.id, backend_added[cell.backend]), backend_added[cell.backend])
    return added


def expand(matrix: MatrixSpec) -> list[Cell]:
    """Every cell of the matrix in a stable order: DPO's base cells, its variants, then the other methods' cells."""
    cells: list[Cell] = []
    axes = matrix.axes
    for init in axes.init:
        for quant in axes.quant:
            for backend in axes.backend:
                cells.append(
                    Cell(init=init, quant=quant, backend=backend, launcher=backend_spec(backend).default_launcher)
                )
    for variant in matrix.variants:
        cells += _variant_cells(variant)
    for rows in matrix.methods:
        cells += _method_cells(rows)
    seen: set[str] = set()
    unique = []
    for cell in cells:
        if cell.id not in seen:
            seen.add(cell.id)
            unique.append(cell)
    return unique


@functools.cache
def shipped_cells() -> dict[str, Cell]:
    """The shipped matrix's cells (scenarios/matrix.yaml) by id, expanded once per process."""
    return {cell.id: cell for cell in expand(load_matrix())}


def filter_patterns(pattern: str) -> list[str]:
    """The comma-separated globs of a `--filter`; one line when it names none (`--filter "$CELLS"` with an empty
    variable must not mean every cell)."""
    patterns = [p.strip() for p in pattern.split(",") if p.strip()]
    if not patterns:
        raise BenchError(f"--filter {pattern!r} names no cell pattern: leave --filter out to take every cell")
    return patterns


def select(cells: Iterable[Cell], pattern: str | None) -> list[Cell]:
    """Cells whose id matches any of the comma-separated glob patterns (all when there is no --filter at all)."""
    cells = list(cells)
    if pattern is None:
        return cells
    patterns = filter_patterns(pattern)
    chosen = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise BenchError(f"--filter {pattern!r} matches no cell; see `dpo-bench list` for the cell ids")
    return chosen


ALL_METHODS = "all"


def parse_methods(text: str) -> tuple[Method, ...]:
    """`--method`: one method, a comma-separated list, or `all`. One line naming the choices otherwise."""
    if text.strip() == ALL_METHODS:
        return tuple(Method)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in {m.value for m in Method}]
    if unknown or not names:
        choices = ", ".join([*(m.value for m in Method), ALL_METHODS])
        raise BenchError(f"--method {text!r}: unknown method {', '.join(unknown) or '(none)'}; choose from {choices}")
    return tuple(dict.fromkeys(Method(name) for name in names))


def of_methods(cells: Iterable[Cell], methods: Iterable[Method]) -> list[Cell]:
    wanted = set(methods)
    return [c for c in cells if c.method in wanted]


def parse_axis(flag: str, text: str, axis: type[StrEnum]) -> tuple[str, ...]:
    """`--init two_models,one_adapter` and the like: the values of one axis, comma-separated; one line naming the
    flag and the choices otherwise."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = [a.value for a in axis]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise BenchError(
            f"{flag} {text!r}: unknown value {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}"
        )
    return tuple(dict.fromkeys(names))


def of_axes(cells: Iterable[Cell], **wanted: tuple[str, ...] | None) -> list[Cell]:
    """The cells whose axis values (init=, quant=, backend=: the Cell field of that name) are among the wanted ones;
    an axis given as None is not narrowed."""
    return [
        c for c in cells if all(values is None or str(getattr(c, axis)) in values for axis, values in wanted.items())
    ]


# --- not-applicable rules: each returns a human reason, or None when the rule does not apply ---

NotApplicableRule = Callable[[CellOnProfile], str | None]


def quantized_full_finetune(on: CellOnProfile) -> str | None:
    cell = on.cell
    if quant_spec(cell.quant).quantized and not init_spec(cell.init).adapters:
        return (
            f"full fine-tuning of {cell.quant} weights is impossible: quantized weights are frozen and need adapters "
            "(use one_adapter or two_adapters)"
        )
    return None


def backend_needs_devices(on: CellOnProfile) -> str | None:
    cell, profile = on.cell, on.profile
    needed = backend_spec(cell.backend).min_devices
    if profile.device_count < needed:
        return f"{cell.backend} needs >={needed} devices; profile {profile.name} has {profile.device_count}"
    return None


def ranks_within_profile(on: CellOnProfile) -> str | None:
    cell, profile = on.cell, on.profile
    if cell.ranks is None:
        return None
    if cell.ranks > profile.processes:
        return f"the row asks for {cell.ranks} ranks; profile {profile.name} has {profile.processes}"
    if cell.ranks == profile.processes:
        base_id = cell.model_copy(update={"ranks": None}).id
        return f"profile {profile.name} runs {profile.processes} rank(s) already: this row would repeat {base_id}"
    return None


def backend_needs_processes(on: CellOnProfile) -> str | None:
    """The backend's own minimum world size and why (bench/matrix/backends.py)."""
    spec = backend_spec(on.cell.backend)
    if on.world < spec.min_processes:
        needs = f"{on.cell.backend} needs >={spec.min_processes} processes ({spec.alone})"
        return f"{needs}; profile {on.profile.name} has {on.world}"
    return None


def precompute_needs_reference(on: CellOnProfile) -> str | None:
    cell = on.cell
    init = init_spec(cell.init)
    if Option.PRECOMPUTE_REF not in cell.options or init.reference_can_be_precomputed:
        return None
    if init.reference == "none":
        return f"{cell.init} holds no reference: there are no reference log-probs to precompute"
    return "precompute_ref replaces the frozen `ref` adapter, so two_adapters would not be measured"


def reference_free_init(on: CellOnProfile) -> str | None:
    """A method without a reference trains its full weights on `full` and an adapter on `one_adapter`; the init
    modes that build a reference of their own would hold one its loss never reads."""
    cell = on.cell
    init = init_spec(cell.init)
    if method_spec(cell.method).reference or not init.holds_reference:
        return None
    held = "a separate reference model" if init.reference == "separate_model" else "a frozen `ref` copy of the adapter"
    instead = Init.FULL if not init.adapters else Init.ONE_ADAPTER
    return (
        f"{cell.method} has no reference: {cell.init} would hold {held} that its loss never reads; "
        f"train its {init.trains} on {instead}"
    )


def reference_needs_init(on: CellOnProfile) -> str | None:
    """A method with a reference needs an init mode that places one: its full fine-tune is two_models."""
    cell = on.cell
    if not method_spec(cell.method).reference or init_spec(cell.init).reference != "none":
        return None
    return (
        f"{cell.method} compares the policy with a reference and {cell.init} holds none: its full-weights "
        f"fine-tune is {Init.TWO_MODELS} (a separate reference model)"
    )


def reference_free_precompute(on: CellOnProfile) -> str | None:
    cell = on.cell
    if Option.PRECOMPUTE_REF in cell.options and not method_spec(cell.method).reference:
        return f"{cell.method} has no reference: there are no reference log-probs to precompute"
    return None


def newcomer_needs_a_difference(on: CellOnProfile) -> str | None:
    cell, profile = on.cell, on.profile
    if cell.setup == Setup.NEWCOMER and not newcomer_differs(cell, profile.device):
        recipe_id = cell.model_copy(update={"setup": Setup.RECIPE}).id
        return f"on {profile.device} the recipe sets nothing a newcomer leaves out: this row would repeat {recipe_id}"
    return None


RULES: tuple[NotApplicableRule, ...] = (
    reference_free_init,
    reference_needs_init,
    reference_free_precompute,
    quantized_full_finetune,
    backend_needs_devices,
    ranks_within_profile,
    backend_needs_processes,
    precompute_needs_reference,
    newcomer_needs_a_difference,
    *ONLINE_RULES,
)


def not_applicable_reason(on: CellOnProfile) -> str | None:
    """The first rule that holds for the cell on its profile, named; None: the cell applies."""
    for rule in RULES:
        reason = rule(on)
        if reason is not None:
            return f"{rule.__name__}: {reason}"
    return None


def target_reason(on: CellOnProfile) -> str | None:
    """`not_applicable_reason` judged for the target hardware (predict, advise) rather than for running here: the
    online rules' `TARGET_RULES` replace what asks this machine (vLLM importable here)."""
    for rule in RULES:
        reason = TARGET_RULES.get(rule, rule)(on)
        if reason is not None:
            return f"{rule.__name__}: {reason}"
    return None
