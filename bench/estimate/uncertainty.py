"""Every prediction carries a range: the spread of the validation errors of its kind of cell, from this project's
measured cells (CPU) and from the published GPU measurements (bench/estimate/published.py). The verdict reads the
range: `fits` (all of it inside the usable memory), `tight` (it straddles the limit), `predicted_oom` (all of it
above). spread.json holds the spreads; `python -m bench predict --write` (`make predicted`) rewrites it from the
current validation, and a unit test holds the committed file to it."""

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

SPREAD_FILE = Path(__file__).with_name("spread.json")

MemoryVerdict = Literal["fits", "tight", "predicted_oom", "unknown"]
"""Whether a prediction fits the device's usable memory (a regression's verdict is bench/report/verdict.py's)."""


class Spread(BaseModel):
    low: float
    """The most negative relative error (prediction - measurement) / measurement of the kind's rows."""
    high: float
    rows: int


class Spreads(BaseModel):
    estimator_version: str
    kinds: dict[str, Spread]


def cell_kind(device: str, memory_kind: str, backend: str, method: str = "dpo") -> str:
    """The kind of a cell whose errors bound its prediction: device, measured figure, backend family; a training
    method other than DPO first, so that its errors make its own ranges and leave DPO's alone (kto:cpu:rss:single
    falls back to kto:cpu:rss, kto:cpu, kto)."""
    family = "zero" if backend.startswith("zero") else "multi" if backend in ("ddp", "fsdp") else backend
    kind = f"{device}:{memory_kind}:{family}"
    return kind if method == "dpo" else f"{method}:{kind}"


def fallbacks(kind: str) -> list[str]:
    """The kind, then coarser ones: cpu:cgroup:zero -> cpu:cgroup -> cpu."""
    parts = kind.split(":")
    return [":".join(parts[:n]) for n in range(len(parts), 0, -1)]


def spreads_of(errors: dict[str, list[float]]) -> dict[str, Spread]:
    """Per kind and per coarser kind, the min and max of the errors (a kind with one row spreads over it alone)."""
    pooled: dict[str, list[float]] = {}
    for kind, values in errors.items():
        for key in fallbacks(kind):
            pooled.setdefault(key, []).extend(values)
    return {k: Spread(low=min(v), high=max(v), rows=len(v)) for k, v in sorted(pooled.items()) if v}


MIN_ROWS = 3
"""A kind's spread is its own from this many rows up; with fewer (one GPU run's single KTO cell) it is no range at
all, and the kind takes its coarser kind's."""


def spread_for(kind: str, spreads: Spreads | None) -> Spread | None:
    if spreads is None:
        return None
    found = [spreads.kinds[k] for k in fallbacks(kind) if k in spreads.kinds]
    return next((s for s in found if s.rows >= MIN_ROWS), found[-1] if found else None)


def measured_range(predicted: float, spread: Spread | None) -> tuple[float, float] | None:
    """Where the measurement is expected: prediction / (1 + error) over the kind's errors."""
    if spread is None:
        return None
    return predicted / (1 + max(spread.high, 0.0)), predicted / (1 + min(spread.low, 0.0))


def verdict(total: float, usable: float | None, bounds: tuple[float, float] | None) -> MemoryVerdict:
    if usable is None:
        return "unknown"
    low, high = bounds if bounds is not None else (total, total)
    if high <= usable:
        return "fits"
    if low > usable:
        return "predicted_oom"
    return "tight"


def load_spreads(path: Path = SPREAD_FILE) -> Spreads | None:
    return Spreads.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_spreads(spreads: Spreads, path: Path = SPREAD_FILE) -> None:
    path.write_text(json.dumps(spreads.model_dump(), indent=2) + "\n", encoding="utf-8")
