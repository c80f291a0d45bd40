"""The published MFU figures and the shapes of the models they were measured on (scenarios/published/mfu.yaml), as
typed rows: bench/estimate/speed/bounds.py turns them into this project's MFU convention."""

import functools
from pathlib import Path
from typing import Literal

from pydantic import Field

from bench.errors import BenchError
from bench.matrix.backends import Family
from bench.matrix.yaml_schema import Strict, load_yaml_model
from bench.paths import SCENARIOS_DIR, scenarios_dir

MFU_FILE = SCENARIOS_DIR / "published" / "mfu.yaml"


class LlamaLayout(Strict):
    """config.json numbers of a Llama-layout decoder."""

    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    vocab_size: int = Field(gt=0)


class FigureKind(Strict):
    method: Literal["sft", "dpo"]
    """`sft` (pretraining counts: the same step) or `dpo`."""
    adapter: Literal["full", "lora", "qlora"]
    backend: Family
    gpu: str
    """The catalog entry (scenarios/gpus.yaml) of the card it ran on: its generation and achievable matmul rate."""
    size: Literal["small", "large"]


class Throughput(Strict):
    """The source's throughput, from which the MFU is computed in this project's convention."""

    tokens_per_s_per_gpu: float = Field(gt=0)
    model: str
    seq_len: int = Field(gt=0)
    peak_tflops: float = Field(gt=0)
    """The card's dense datasheet peak the source ran at."""
    checkpointing: bool


class Stated(Strict):
    """The source's own utilisation, where its convention is this project's."""

    mfu_percent: float = Field(gt=0, le=100)
    hfu_percent: float | None = Field(default=None, gt=0, le=100)


class FigureRow(Strict):
    id: str
    url: str
    figure: str
    """The source's own numbers, as it states them."""
    stack: str
    kind: FigureKind
    throughput: Throughput | None = None
    stated: Stated | None = None
    note: str | None = None


class MfuFile(Strict):
    models: dict[str, LlamaLayout]
    figures: tuple[FigureRow, ...]


def mfu_file(path: Path | None = None) -> MfuFile:
    """The published MFU figures at `path` (default: the scenario folder in use's), read once per process."""
    return _mfu_file_at(path or scenarios_dir() / "published" / MFU_FILE.name)


@functools.cache
def _mfu_file_at(path: Path) -> MfuFile:
    loaded = load_yaml_model(path, MfuFile)
    for row in loaded.figures:
        if (row.throughput is None) == (row.stated is None):
            raise BenchError(f"{path.name}: {row.id}: give exactly one of throughput and stated")
        if row.throughput is not None and row.throughput.model not in loaded.models:
            raise BenchError(f"{path.name}: {row.id}: unknown model {row.throughput.model!r}")
    return loaded


def model_config(name: str) -> dict[str, int]:
    """A model's config.json numbers, as LlamaConfig takes them."""
    return mfu_file().models[name].model_dump()
