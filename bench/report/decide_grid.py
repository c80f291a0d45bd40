"""The decision page's grid (scenarios/decide.yaml): which models, GPUs, counts, lengths and batch sizes the page
covers, and the `advise` arguments of each point."""

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from bench.advise.question import Question
from bench.advise.target import TargetRequest
from bench.assets.model_config import models_dir
from bench.matrix.gpus import load_catalog
from bench.matrix.profiles import available
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import scenarios_dir

DECIDE_FILE = "decide.yaml"
ALL = "all"


class GridFile(Strict):
    workloads: Literal["all"] | list[str]
    models: Literal["all"] | list[str]
    gpus: Literal["all"] | list[str]
    counts: list[int] = Field(min_length=1)
    max_lengths: list[int] = Field(min_length=1)
    batch_sizes: list[int] = Field(min_length=1)


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

    def points(self) -> Iterator[tuple[ModelChoice, str, int, int, int]]:
        """(model, gpu, count, max length, batch size), the last axis fastest: the page's data order."""
        return itertools.product(self.models, self.gpus, self.counts, self.max_lengths, self.batch_sizes)

    def size(self) -> int:
        return len(self.models) * len(self.gpus) * len(self.counts) * len(self.max_lengths) * len(self.batch_sizes)


def advise_question(model: ModelChoice, gpu: str, count: int, max_length: int, batch_size: int) -> Question:
    """What `advise` is asked for one point: `python -m bench advise --gpu GPU:COUNT --workload|--model NAME
    --max-length N --batch-size N`."""
    named = {"workload" if model.flag == "--workload" else "model": model.name}
    return Question(TargetRequest(gpu=f"{gpu}:{count}", max_length=max_length, batch_size=batch_size, **named))


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
    )


def load_grid(path: Path) -> DecisionGrid | None:
    """The grid `path` states; None when there is no such file (no decision page)."""
    if not path.is_file():
        return None
    return grid_of(load_yaml_model(path, GridFile), path.parent)
