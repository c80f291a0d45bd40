"""The matrix axes: the ids used everywhere (cell ids, YAML, results, tables)."""

from enum import StrEnum


class Device(StrEnum):
    """The kind of device a profile trains on; CPU ranks count as devices too."""

    CPU = "cpu"
    CUDA = "cuda"
    HPU = "hpu"


class Init(StrEnum):
    """What is trained and where the reference lives (bench/matrix/inits.py says it for each)."""

    FULL = "full"
    TWO_MODELS = "two_models"
    ONE_ADAPTER = "one_adapter"
    TWO_ADAPTERS = "two_adapters"


class Quant(StrEnum):
    NONE = "none"
    INT8 = "int8"
    NF4 = "nf4"


class Method(StrEnum):
    """The training method (bench/matrix/methods.py). Cell ids carry it only where it is not DPO."""

    DPO = "dpo"
    SFT = "sft"
    REWARD = "reward"
    KTO = "kto"
    ORPO = "orpo"
    SIMPO = "simpo"


class Backend(StrEnum):
    SINGLE = "single"
    DDP = "ddp"
    DEVICE_MAP = "device_map"
    FSDP = "fsdp"
    FSDP_OFFLOAD = "fsdp_offload"
    ZERO2 = "zero2"
    ZERO2_OFFLOAD = "zero2_offload"
    ZERO3 = "zero3"
    ZERO3_OFFLOAD = "zero3_offload"
    ZERO3_OFFLOAD_PARAM = "zero3_offload_param"


class Launcher(StrEnum):
    PYTHON = "python"
    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"
    DEEPSPEED = "deepspeed"
    MPIRUN = "mpirun"


class Option(StrEnum):
    PRECOMPUTE_REF = "precompute_ref"
    NO_GRADIENT_CHECKPOINTING = "no_gc"
    LIGER = "liger"


class Setup(StrEnum):
    """How a cell is configured: the documented recipe (scenarios/recipes.yaml), or what a newcomer following
    TRL's basic DPO docs tries first (the recipe's settings left out): a `+newcomer` variant row."""

    RECIPE = "recipe"
    NEWCOMER = "newcomer"
