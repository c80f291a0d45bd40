"""The decision page's grid (scenarios/decide.yaml): which methods, models, GPUs, counts, lengths and batch sizes the
page covers, and the `advise` arguments of each point."""

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from bench.advise.question import Question
from bench.advise.target import TargetRequest
from bench.assets.model_config import models_dir
from bench.matrix.axes import Method
from bench.matrix.gpus import load_catalog
from bench.matrix.profiles import available
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import scenarios_dir

DECIDE_FILE = "decide.yaml"
ALL = "all"


class MethodAxesFile(Strict):
    """A method's own counts, lengths or batch sizes (a coarser grid keeps the data file small); None: the grid's."""

    counts: list[int] | None = Field(default=None, min_length=1)
    max_lengths: list[int] | None = Field(default=None, min_length=1)
    batch_sizes: list[int] | None = Field(default=None, min_length=1)


class GridFile(Strict):
    methods: dict[Method, MethodAxesFile] = Field(default_factory=lambda: {Method.DPO: MethodAxesFile()}, min_length=1)
    workloads: Literal["all"] | list[str]
    models: Literal["all"] | list[str]
    gpus: Literal["all"] | list[str]
    counts: list[int] = Field(min_length=1)
    max_lengths: list[int] = Field(min_length=1)
    batch_sizes: list[int] = Field(min_length=1)


@dataclass(frozen=True)
class MethodAxes:
    """One method's part of the grid: its counts, max lengths and batch sizes (every model and GPU)."""

    method: str
    counts: tuple[int, ...]
    max_lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]


@dataclass(frozen=True)
class ModelChoice:
    name: str
    flag: Literal["--workload", "--model"]
    """A shipped workload (its own settings) or a shipped model config (advise's default settings)."""


@dataclass(frozen=True)
class DecisionGrid:
    models: tuple[ModelChoice, ...]
    gpus: tuple[str, ...]
    counts: tuple[int, ...]
    max_lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    methods: tuple[MethodAxes, ...] = ()
    """Each method's part, in the data's order; none: DPO over the grid's own counts, lengths and batch sizes."""

    def parts(self) -> tuple[MethodAxes, ...]:
        return self.methods or (MethodAxes(Method.DPO.value, self.counts, self.max_lengths, self.batch_sizes),)

    def points(self, method: MethodAxes | None = None) -> Iterator[tuple[ModelChoice, str, int, int, int, str]]:
        """(model, gpu, count, max length, batch size, method), method by method, then the last axis fastest: the
        page's data order. `method`: that method's points only."""
        for m in (method,) if method else self.parts():
            for point in itertools.product(self.models, self.gpus, m.counts, m.max_lengths, m.batch_sizes):
                yield (*point, m.method)

    def size(self) -> int:
        return sum(len(self.models) * len(self.gpus) * _size(m) for m in self.parts())


def _size(m: MethodAxes) -> int:
    return len(m.counts) * len(m.max_lengths) * len(m.batch_sizes)


def advise_question(
    model: ModelChoice, gpu: str, count: int, max_length: int, batch_size: int, method: str = Method.DPO.value
) -> Question:
    """What `advise` is asked for one point: `python -m bench advise --gpu GPU:COUNT --workload|--model NAME
    --max-length N --batch-size N [--method M]`."""
    named = {"workload" if model.flag == "--workload" else "model": model.name}
    target = TargetRequest(gpu=f"{gpu}:{count}", max_length=max_length, batch_size=batch_size, **named)
    return Question(target, method=method)


def _shipped_models() -> list[str]:
    return sorted(p.parent.name for p in models_dir().glob("*/config.json"))


def grid_of(data: GridFile, scenarios: Path | None = None) -> DecisionGrid:
    scenarios = scenarios or scenarios_dir()
    workloads = available(scenarios / "workloads") if data.workloads == ALL else data.workloads
    models = _shipped_models() if data.models == ALL else data.models
    gpus = [g.name for g in load_catalog(scenarios / "gpus.yaml").gpus] if data.gpus == ALL else data.gpus
    return DecisionGrid(
        models=(
            *(ModelChoice(w, "--workload") for w in workloads),
            *(ModelChoice(m, "--model") for m in models),
        ),
        gpus=tuple(gpus),
        counts=tuple(data.counts),
        max_lengths=tuple(data.max_lengths),
        batch_sizes=tuple(data.batch_sizes),
        methods=tuple(
            MethodAxes(
                method.value,
                tuple(axes.counts or data.counts),
                tuple(axes.max_lengths or data.max_lengths),
                tuple(axes.batch_sizes or data.batch_sizes),
            )
            for method, axes in data.methods.items()
        ),
    )


def load_grid(path: Path) -> DecisionGrid | None:
    """The grid `path` states; None when there is no such file (no decision page)."""
    if not path.is_file():
        return None
    return grid_of(load_yaml_model(path, GridFile), path.parent)
