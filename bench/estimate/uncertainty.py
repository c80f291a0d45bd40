"""Every prediction carries a stated interval: the central 80 % of the validation errors of comparable rows (the
same device and measured figure, kind of setup and pool of backends, BackendSpec.error_pool; held-out rows left
out), from this project's measured cells and the published GPU measurements. Where fewer than MIN_ROWS such rows
exist, the nearest wider pool is taken and named (`range_kind` differs from `error_kind`).

The verdict reads the same errors: the probability of fitting is the share of them under which the prediction
stays within usable memory (`fits` from 90 %, `likely_fits` from 50 %, `likely_oom` above 10 %, else `oom`); a
point prediction more than SIDE_MARGIN past the limit keeps its side. spread.json holds the pools, rewritten by
`python -m bench predict --write`. Reference: docs/estimator.md, "Ranges and verdicts"."""

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, computed_field

from bench.file_cache import parsed
from bench.files import write_whole
from bench.matrix.backends import backend_spec
from bench.paths import DERIVED_DIR

SPREAD_FILE = DERIVED_DIR / "spread.json"
HELD_OUT_FILE = Path(__file__).with_name("held_out.txt")

LEVEL = 0.80
"""The stated coverage of every interval: from the 10th to the 90th percentile of its pool's errors."""
MIN_ROWS = 5
"""A pool with fewer rows is no interval of its own: the next wider pool is taken, and named."""
SIDE_MARGIN = 0.10
"""Beyond this fraction of usable memory past the limit (either way) the point prediction's side holds."""

MemoryVerdict = Literal["fits", "likely_fits", "likely_oom", "oom", "unknown"]
"""Whether a prediction fits the device's usable memory (a regression's verdict is bench/report/verdict.py's)."""
FITTING: frozenset[str] = frozenset({"fits", "likely_fits"})
"""The verdicts on the side of fitting; `likely_oom` and `oom` are on the side of running out."""

SetupKind = Literal["full", "adapter", "quantized"]


class Spread(BaseModel):
    """One pool: the relative errors (prediction - measurement) / measurement of its rows, sorted."""

    errors: list[float]

    @computed_field
    @property
    def rows(self) -> int:
        return len(self.errors)

    @computed_field
    @property
    def low(self) -> float:
        return quantile(self.errors, (1 - LEVEL) / 2)

    @computed_field
    @property
    def high(self) -> float:
        return quantile(self.errors, 1 - (1 - LEVEL) / 2)


class Spreads(BaseModel):
    estimator_version: str
    level: float = LEVEL
    kinds: dict[str, Spread]


def quantile(values: Sequence[float], q: float) -> float:
    """At rank q * (n + 1) among the n sorted values, interpolated, clamped to the smallest and largest (numpy's
    `weibull` method): a new row falls between the k-th and the m-th of n with probability (m - k) / (n + 1), so the
    interval between the ranks of q and 1 - q covers 1 - 2q of new rows, and a small pool's is its whole span
    rather than an interval narrower than its stated coverage."""
    ordered = sorted(values)
    rank = min(max(q * (len(ordered) + 1), 1.0), float(len(ordered)))
    below = int(rank)
    above = min(below + 1, len(ordered))
    return ordered[below - 1] + (ordered[above - 1] - ordered[below - 1]) * (rank - below)


def setup_kind(adapters: bool, quantized: bool) -> SetupKind:
    return "quantized" if quantized else "adapter" if adapters else "full"


def cell_kind(device: str, memory_kind: str, backend: str, method: str = "dpo", setup: SetupKind = "full") -> str:
    """The kind of a cell whose errors bound its prediction: device, measured figure, kind of setup, backend family;
    a training method other than DPO first, so that its errors make its own pools and leave DPO's alone."""
    kind = f"{device}:{memory_kind}:{setup}:{backend_spec(backend).error_pool}"
    return kind if method == "dpo" else f"{method}:{kind}"


def fallbacks(kind: str) -> list[str]:
    """The kind, then wider pools down to its device: the method's own (kto:cpu:rss:adapter:single ... kto:cpu),
    then DPO's of the same device (cpu:rss:adapter:single ... cpu)."""
    parts = kind.split(":")
    own = [":".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if len(parts) == 5:  # method-prefixed
        return own[:-1] + fallbacks(":".join(parts[1:]))
    return own


def spreads_of(errors: dict[str, list[float]]) -> dict[str, Spread]:
    """Every kind's pool and each wider pool it belongs to (a method's errors make that method's pools only)."""
    pooled: dict[str, list[float]] = {}
    for kind, values in errors.items():
        parts = kind.split(":")
        for n in range(len(parts), 0, -1):
            pooled.setdefault(":".join(parts[:n]), []).extend(values)
    return {k: Spread(errors=sorted(v)) for k, v in sorted(pooled.items()) if v}


def spread_for(kind: str, spreads: Spreads | None) -> tuple[str, Spread] | None:
    """The comparable pool of `kind` where it has MIN_ROWS rows, else the nearest wider one that has, else the
    widest there is (with its kind: a wider pool is named wherever it is shown)."""
    if spreads is None:
        return None
    found = [(k, spreads.kinds[k]) for k in fallbacks(kind) if k in spreads.kinds]
    return next((f for f in found if f[1].rows >= MIN_ROWS), found[-1] if found else None)


def measured_range(predicted: float, spread: Spread | None, base: float = 0.0) -> tuple[float, float] | None:
    """The stated interval of the measurement: base + predicted / (1 + error) over the pool's central errors
    (`base`: what is added to the figure the errors are of, a CPU cell's library baseline)."""
    if spread is None:
        return None
    return base + predicted / (1 + spread.high), base + predicted / (1 + spread.low)


def fit_probability(predicted: float, usable: float, spread: Spread, base: float = 0.0) -> float:
    """The share of the pool's errors under which the measurement stays within usable memory."""
    return sum(base + predicted / (1 + e) <= usable for e in spread.errors) / spread.rows


def verdict(total: float, usable: float | None, probability: float | None) -> MemoryVerdict:
    """From the probability of fitting; without one (no pool), from the point prediction alone."""
    if usable is None:
        return "unknown"
    if probability is None:
        return "fits" if total <= usable else "oom"
    if probability >= 0.9:
        found: MemoryVerdict = "fits"
    elif probability >= 0.5:
        found = "likely_fits"
    elif probability > 0.1:
        found = "likely_oom"
    else:
        found = "oom"
    if total > usable * (1 + SIDE_MARGIN) and found in FITTING:
        return "likely_oom"
    if total < usable * (1 - SIDE_MARGIN) and found not in FITTING:
        return "likely_fits"
    return found


def pool_label(error_kind: str | None, range_kind: str | None, rows: int | None) -> str:
    """How a range was made, in words: its comparable rows, or the wider pool it fell back to."""
    if range_kind is None or rows is None:
        return "no range: no measured rows of this device"
    if range_kind == error_kind:
        return f"{LEVEL:.0%} interval of {rows} comparable rows ({range_kind})"
    return f"{LEVEL:.0%} interval of a wider pool, {rows} rows ({range_kind}): too few rows like {error_kind}"


def held_out_ids(path: Path = HELD_OUT_FILE) -> frozenset[str]:
    """The rows whose errors never enter a pool (named before any pool was derived: see the file's head)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return frozenset(line for line in lines if line and not line.startswith("#"))


def load_spreads(path: Path = SPREAD_FILE) -> Spreads | None:
    """The pools `path` holds (None: no such file), read once while the file stays as it is."""
    return parsed(path, Spreads.model_validate_json) if path.is_file() else None


def write_spreads(spreads: Spreads, path: Path = SPREAD_FILE) -> None:
    write_whole(path, json.dumps(spreads.model_dump(), indent=2) + "\n")
