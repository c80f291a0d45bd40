"""The training settings a user asks for on the command line (`--max-length`, `--batch-size`, `--lora-r`, ...),
applied over a workload: what is not given keeps the workload's value. Pure."""

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from bench.matrix.axes import Option
from bench.matrix.cell import Cell
from bench.matrix.precision import Mode, mode_of, precision_of
from bench.matrix.profiles import Attention, Count, HardwareProfile, LoraRank, MaxLength, Optimizer, Steps, Workload
from bench.matrix.reference import can_be_precomputed
from bench.matrix.yaml_schema import Strict

ALL_LINEAR = "all-linear"
PRECISION_ALIASES: dict[str, Mode] = {"bf16": "mixed", "fp16": "fp16-mixed"}
"""The compute dtypes `--precision` also takes, as the mode each trains in (bench/matrix/precision.py)."""
_SET = {"default": None, "exclude_if": lambda v: v is None}
"""A setting that only a flag gives: left out of a dump where not given (env.json's `training` keeps its keys)."""


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
    precision: Literal["mixed", "pure-bf16", "fp16-mixed", "fp32", "bf16", "fp16"] | None = None
    """A mode of bench/matrix/precision.py, or a compute dtype of PRECISION_ALIASES."""
    attention: Attention | None = Field(**_SET)
    liger: bool | None = Field(**_SET)
    torch_compile: bool | None = Field(**_SET)
    precompute_ref: bool | None = None

    def mode(self) -> Mode | None:
        """The precision mode asked for (None: the profile's)."""
        return None if self.precision is None else PRECISION_ALIASES.get(self.precision, self.precision)  # type: ignore[return-value]


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
        "attn_implementation": settings.attention,
        "use_liger_kernel": settings.liger,
        "torch_compile": settings.torch_compile,
        "master_weights": False if settings.mode() == "pure-bf16" else None,
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


def training_of(profile: HardwareProfile, workload: Workload) -> dict[str, Any]:
    """What a run's cells train with (env.json `training`): the workload's name and every training setting in effect,
    in the flags' vocabulary."""
    return {"workload": workload.name} | in_effect(profile, workload).model_dump(mode="json")


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
        precision=profile.precision if train.master_weights is None else mode_of(profile.precision, False),
        attention=train.attn_implementation,
        liger=train.use_liger_kernel,
        torch_compile=train.torch_compile,
        precompute_ref=train.precompute_ref,
    )


def knobs_said(workload: Workload) -> list[str]:
    """The attention, Liger and compile settings a flag gave, as a page says them (none: the defaults)."""
    train = workload.train
    said = {"attention": train.attn_implementation, "Liger": train.use_liger_kernel}
    said["torch_compile"] = train.torch_compile
    return [f"{k} {v if isinstance(v, str) else ('on' if v else 'off')}" for k, v in said.items() if v is not None]


def apply_to_profile(profile: HardwareProfile, settings: TrainingSettings) -> HardwareProfile:
    """The profile with the compute dtype of the precision mode asked for."""
    mode = settings.mode()
    if mode is None or precision_of(mode) == profile.precision:
        return profile
    return profile.model_copy(update={"precision": precision_of(mode)})


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
