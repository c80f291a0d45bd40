"""One description per backend: everything the suite knows about each, in one place (each launcher's: bench/launchers/).

Launch plans, engagement checks, failure classification, the worker (rank environment, model placement), MFU and
the reports read these descriptions; a new backend is one entry here plus whatever its worker path needs.
What a combination of backend, init and quantization needs to work (placement, quantized storage, loader flags,
the reference model) is its recipe: scenarios/recipes.yaml, read by bench/matrix/recipes.py.
"""

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

from bench.matrix.axes import Backend, Launcher


class Placement(StrEnum):
    """Where one kind of model state lives on a multi-rank (or multi-device) run."""

    REPLICATED = "replicated"
    """A full copy on every rank."""
    SHARDED = "sharded"
    """1/world of it on each rank, gathered when used."""
    SPLIT = "split"
    """Layers spread over the devices of one process (device_map)."""
    OFFLOADED = "cpu_offloaded"
    """Sharded over ranks (1/world each) and kept in host memory, not on the device; brought to the device only
    while it is used."""


@dataclass(frozen=True)
class Sharding:
    """What a backend does with each kind of state. `reference` is a separate reference model (two_models);
    adapter references live inside the policy and follow `params`."""

    params: Placement
    grads: Placement
    optimizer: Placement
    reference: Placement


@dataclass(frozen=True)
class EngagementRule:
    """What the worker must observe for the backend to count as engaged (bench/judge/engagement.py)."""

    distributed_types: tuple[str, ...]
    """accelerate DistributedType values accepted."""
    wrapper: str | None = None
    """Class name of trainer.model_wrapped; None: not checked."""
    zero_stage: int | None = None
    partitioned_params: bool = False
    fsdp_modules: bool = False
    min_model_devices: int = 1
    optimizer_offload: str | None = None
    """DeepSpeed `offload_optimizer.device` the engine must report."""
    param_offload: str | None = None
    """Where the engine must report keeping the parameters between uses (DeepSpeed ZeRO-3 `offload_param.device`,
    FSDP2's CPUOffloadPolicy: `cpu`)."""
    state_on: str | None = None
    """The device every tensor of the optimizer's state (its fp32 master weights and moments) must really be on,
    and with `param_offload` every parameter partition too: what only a real offload shows on a GPU."""


@dataclass(frozen=True)
class DeepSpeedSettings:
    stage: int
    offload_optimizer: str | None = None
    offload_param: str | None = None


Family = Literal["single", "data_parallel", "sharded"]
"""How a backend spreads the model's state over ranks, and so what a step communicates: `single` (one rank's
whole state, on one device or split over one process's devices), `data_parallel` (replicated, gradients
all-reduced) or `sharded` (each rank holds 1/world, gathered when used: FSDP and ZeRO). The kinds of the published
MFU figures (bench/estimate/speed/bounds.py)."""


@dataclass(frozen=True)
class BackendSpec:
    name: Backend
    summary: str
    family: Family
    launchers: tuple[Launcher, ...]
    """Supported launchers, the default first."""
    multi_process: bool
    accelerate_type: str | None
    """distributed_type in a generated accelerate config (None: accelerate cannot launch it)."""
    sharding: Sharding
    engagement: EngagementRule
    deepspeed: DeepSpeedSettings | None = None
    fsdp_version: int | None = None
    fsdp_cpu_offload: bool = False
    """accelerate's fsdp_offload_params: parameters, gradients and the optimizer step on the host (FSDP2's
    CPUOffloadPolicy)."""
    min_devices: int = 1
    """Devices one cell needs; device_map spreads one process over at least two."""
    splits_layers: bool = False
    """The model is loaded with device_map='balanced' over every visible device (one process)."""
    min_processes: int = 1
    """The smallest world size at which the backend means something. Offload backends run on one rank: moving
    state to host memory is what lets one device train a model that does not fit it."""
    alone: str = ""
    """Why the backend means nothing below min_processes: the not-applicable reason (bench/matrix/scenario.py)."""

    def __post_init__(self) -> None:
        if self.min_processes > 1 and not (self.multi_process and self.alone):
            raise ValueError(f"{self.name}: min_processes > 1 needs a multi-process backend and the reason (alone)")

    @property
    def error_pool(self) -> str:
        """The backends whose measured errors pool together for a prediction's range (bench/estimate/uncertainty.py):
        DeepSpeed's (`zero`), the other multi-rank families kept on the device (`multi`: DDP, FSDP), each other its
        own (one rank's backends, FSDP's offload)."""
        if self.deepspeed is not None:
            return "zero"
        return "multi" if self.family != "single" and not self.offloads else str(self.name)

    @property
    def default_launcher(self) -> Launcher:
        return self.launchers[0]

    @property
    def zero_stage(self) -> int | None:
        return self.deepspeed.stage if self.deepspeed else None

    @property
    def offloads(self) -> bool:
        """Some state lives in host memory (DeepSpeed offload, FSDP CPU offload)."""
        return Placement.OFFLOADED in (self.sharding.params, self.sharding.grads, self.sharding.optimizer)

    def devices_per_cell(self, processes: int, device_count: int) -> int:
        """Devices a cell occupies (MFU's denominator): one per rank, or all of them for one split process."""
        return device_count if self.splits_layers else processes


_R, _S, _O = Placement.REPLICATED, Placement.SHARDED, Placement.OFFLOADED
_NO = ("NO",)
_MULTI = ("MULTI_CPU", "MULTI_GPU", "MULTI_HPU", "MULTI_XPU")
_ALONE_ZERO = (
    "at world size 1 ZeRO shards its states over a single rank, which saves nothing: on one device the point of "
    "DeepSpeed is offload to host memory (zero2_offload, zero3_offload, zero3_offload_param)"
)

_FSDP = BackendSpec(
    name=Backend.FSDP,
    family="sharded",
    summary="accelerate's FSDP2: parameters, gradients and optimizer state sharded per transformer block",
    launchers=(Launcher.ACCELERATE,),
    multi_process=True,
    accelerate_type="FSDP",
    sharding=Sharding(_S, _S, _S, _S),
    engagement=EngagementRule(distributed_types=("FSDP",), fsdp_modules=True),
    fsdp_version=2,
    min_processes=2,
    alone=(
        "at world size 1 FSDP shards over a single rank, which saves nothing: on one device its point is CPU "
        "offload (fsdp_offload)"
    ),
)
_ZERO2 = BackendSpec(
    name=Backend.ZERO2,
    family="sharded",
    summary="DeepSpeed ZeRO-2: gradients and optimizer state sharded; the reference model is replicated",
    launchers=(Launcher.DEEPSPEED, Launcher.ACCELERATE, Launcher.MPIRUN),
    multi_process=True,
    accelerate_type="DEEPSPEED",
    # TRL's prepare_deepspeed initialises the reference at stage 0 under ZeRO-1/2: a full copy per rank.
    sharding=Sharding(_R, _S, _S, _R),
    engagement=EngagementRule(distributed_types=("DEEPSPEED",), wrapper="DeepSpeedEngine", zero_stage=2),
    deepspeed=DeepSpeedSettings(stage=2),
    min_processes=2,
    alone=_ALONE_ZERO,
)
_ZERO3 = BackendSpec(
    name=Backend.ZERO3,
    family="sharded",
    summary="DeepSpeed ZeRO-3: parameters, gradients, optimizer state and the reference model sharded",
    launchers=(Launcher.DEEPSPEED, Launcher.ACCELERATE, Launcher.MPIRUN),
    multi_process=True,
    accelerate_type="DEEPSPEED",
    sharding=Sharding(_S, _S, _S, _S),
    engagement=EngagementRule(
        distributed_types=("DEEPSPEED",), wrapper="DeepSpeedEngine", zero_stage=3, partitioned_params=True
    ),
    deepspeed=DeepSpeedSettings(stage=3),
    min_processes=2,
    alone=_ALONE_ZERO,
)


def _offloaded(base: BackendSpec, name: Backend, summary: str, sharding: Sharding, **changes: object) -> BackendSpec:
    """`base` with some of its state in host memory: runs from one rank up, and its engagement must show the
    optimizer state (and with `param_offload`, the parameters) on the host."""
    param_offload = "cpu" if sharding.params == _O else None
    engagement = replace(base.engagement, param_offload=param_offload, state_on="cpu")
    if base.deepspeed is not None:
        engagement = replace(engagement, optimizer_offload="cpu")
        changes["deepspeed"] = replace(base.deepspeed, offload_optimizer="cpu", offload_param=param_offload)
    else:
        changes["fsdp_cpu_offload"] = True
    return replace(
        base,
        name=name,
        summary=f"{base.summary}; {summary}",
        sharding=sharding,
        engagement=engagement,
        min_processes=1,
        alone="",
        **changes,  # type: ignore[arg-type]
    )


BACKENDS: dict[Backend, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            name=Backend.SINGLE,
            family="single",
            summary="one process on one device",
            launchers=(Launcher.PYTHON,),
            multi_process=False,
            accelerate_type=None,
            sharding=Sharding(_R, _R, _R, _R),
            engagement=EngagementRule(distributed_types=_NO),
        ),
        BackendSpec(
            name=Backend.DDP,
            family="data_parallel",
            summary="DistributedDataParallel: every rank holds everything, gradients all-reduced",
            launchers=(Launcher.TORCHRUN, Launcher.ACCELERATE, Launcher.MPIRUN),
            multi_process=True,
            accelerate_type="MULTI_GPU",
            sharding=Sharding(_R, _R, _R, _R),
            engagement=EngagementRule(distributed_types=_MULTI, wrapper="DistributedDataParallel"),
            min_processes=2,
            alone="DDP replicates the model over ranks: at world size 1 it is `single` plus a process group",
        ),
        BackendSpec(
            name=Backend.DEVICE_MAP,
            family="single",
            summary="one process, layers split over the devices (accelerate big-model inference placement)",
            launchers=(Launcher.PYTHON,),
            multi_process=False,
            accelerate_type=None,
            sharding=Sharding(Placement.SPLIT, Placement.SPLIT, Placement.SPLIT, Placement.SPLIT),
            engagement=EngagementRule(distributed_types=_NO, min_model_devices=2),
            min_devices=2,
            splits_layers=True,
        ),
        _FSDP,
        # FSDP2's CPUOffloadPolicy keeps each shard of the parameters and its gradient on the host and steps the
        # optimizer there; TRL wraps a separate reference model with the same plugin (trl/models/utils.py).
        _offloaded(
            _FSDP,
            Backend.FSDP_OFFLOAD,
            "parameters, gradients and the optimizer step in host memory (CPU offload)",
            Sharding(_O, _O, _O, _O),
        ),
        _ZERO2,
        # ZeRO-Offload: the fp32 gradient partitions, master weights and Adam moments on the host, the step by
        # the CPU; the reference stays a stage-0 replica on the device (TRL drops offload_optimizer for it).
        _offloaded(
            _ZERO2,
            Backend.ZERO2_OFFLOAD,
            "gradient partitions and optimizer state offloaded to host memory (ZeRO-Offload)",
            Sharding(_R, _O, _O, _R),
        ),
        _ZERO3,
        _offloaded(
            _ZERO3,
            Backend.ZERO3_OFFLOAD,
            "optimizer state and step offloaded to host memory (ZeRO-Offload)",
            Sharding(_S, _O, _O, _S),
        ),
        # ZeRO-Infinity's CPU form: the parameter partitions too live in host memory; TRL initialises a separate
        # reference with the same offload_param (it drops only offload_optimizer).
        _offloaded(
            _ZERO3,
            Backend.ZERO3_OFFLOAD_PARAM,
            "parameters, optimizer state and step offloaded to host memory (ZeRO-Infinity, CPU)",
            Sharding(_O, _O, _O, _O),
        ),
    )
}


def backend_spec(backend: Backend | str) -> BackendSpec:
    return BACKENDS[Backend(backend)]
