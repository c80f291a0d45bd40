"""The training settings a user asks for on the command line (`--max-length`, `--batch-size`, `--lora-r`, ...),
applied over a workload: what is not given keeps the workload's value. Pure."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from bench.matrix.axes import Option
from bench.matrix.cell import Cell
from bench.matrix.profiles import Count, HardwareProfile, LoraRank, MaxLength, Optimizer, Steps, Workload
from bench.matrix.reference import can_be_precomputed
from bench.matrix.yaml_schema import Strict

ALL_LINEAR = "all-linear"


class TrainingSettings(Strict):
    """None: the workload's (or the profile's, for precision) value."""

    max_length: MaxLength | None = None
    batch_size: Count | None = None
    grad_accum: Count | None = None
    steps: Steps | None = None
    lora_r: LoraRank | None = None
    lora_targets: tuple[str, ...] | None = Field(default=None, min_length=1)
    """Module names, or (`all-linear`,): every linear layer of the decoder."""
    gradient_checkpointing: bool | None = None
    optim: Optimizer | None = None
    precision: Literal["bf16", "fp16", "fp32"] | None = None
    precompute_ref: bool | None = None


def apply_to_workload(
    workload: Workload, settings: TrainingSettings, config_file: Path | None = None, name: str | None = None
) -> Workload:
    """`workload` with the settings given and, with `config_file`, the model it names (random weights)."""
    train = workload.train.model_dump()
    given = {
        "max_length": settings.max_length,
        "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.grad_accum,
        "steps": settings.steps,
        "gradient_checkpointing": settings.gradient_checkpointing,
        "optim": settings.optim,
        "precompute_ref": settings.precompute_ref,
    }
    train |= {k: v for k, v in given.items() if v is not None}
    lora = workload.lora.model_dump()
    if settings.lora_r is not None:
        ratio = workload.lora.alpha / workload.lora.r
        lora |= {"r": settings.lora_r, "alpha": max(1, round(settings.lora_r * ratio))}
    if settings.lora_targets is not None:
        lora["target_modules"] = list(settings.lora_targets)
    update: dict = {"train": workload.train.model_validate(train), "lora": workload.lora.model_validate(lora)}
    if config_file is not None:
        model = workload.model.model_validate({"weights": "random", "config": str(config_file), "seed": 0})
        update |= {"model": model, "name": name or config_file.parent.name}
    return workload.model_copy(update=update)


def in_effect(profile: HardwareProfile, workload: Workload) -> TrainingSettings:
    """Every setting's value in `profile` and `workload` (what `apply_to_workload` and `apply_to_profile` set): what a
    run trains with, whatever flags said so."""
    train, lora = workload.train, workload.lora
    return TrainingSettings(
        max_length=train.max_length,
        batch_size=train.per_device_train_batch_size,
        grad_accum=train.gradient_accumulation_steps,
        steps=train.steps,
        lora_r=lora.r,
        lora_targets=tuple(lora.target_modules),
        gradient_checkpointing=train.gradient_checkpointing,
        optim=train.optim,
        precision=profile.precision,
        precompute_ref=train.precompute_ref,
    )


def apply_to_profile(profile: HardwareProfile, settings: TrainingSettings) -> HardwareProfile:
    if settings.precision is None or settings.precision == profile.precision:
        return profile
    return profile.model_copy(update={"precision": settings.precision})


def with_precomputed_reference(cells: list[Cell], workload: Workload) -> list[Cell]:
    """With `precompute_ref` set, every cell whose reference can be precomputed carries the option (the estimator
    reads it from the cell); cells that already did, and their duplicates, once."""
    if not workload.train.precompute_ref:
        return cells
    out: dict[str, Cell] = {}
    for cell in cells:
        if can_be_precomputed(cell):
            cell = cell.model_copy(update={"options": tuple(sorted({*cell.options, Option.PRECOMPUTE_REF}))})
        out.setdefault(cell.id, cell)
    return list(out.values())
