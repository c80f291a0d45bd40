"""Hardware profiles and workloads: typed schemas and loading from scenarios/."""

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_serializer, model_validator

from bench.errors import BenchError
from bench.matrix.axes import Device
from bench.matrix.gpus import GpuSpec, gpu, gpu_fields, parse_gpu_argument
from bench.matrix.yaml_schema import (
    Strict,
    describe_validation_error,
    display_path,
    load_yaml_model,
    parse_model,
    read_yaml,
)
from bench.paths import scenarios_dir
from bench.units import GiB

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ADVISED_TIMEOUT_S = 3600
"""The cell time limit of a profile built from the GPU catalog (a 7B-70B cell loads for minutes)."""
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "adafactor")
"""The transformers `optim` names a workload may set (TrainingArguments.optim)."""
Optimizer = Literal[OPTIMIZERS]  # type: ignore[valid-type]
ATTENTIONS = ("eager", "sdpa", "flash_attention_2")
"""The attention implementations from_pretrained's `attn_implementation` takes (transformers' default: sdpa)."""
Attention = Literal[ATTENTIONS]  # type: ignore[valid-type]

# The bounds of the numbers a profile or a workload may hold: far above what any machine or run of today needs, so
# that only a slip (an exponent, a unit, a sign) is refused, in one line naming the file and the key, before anything
# is prepared. Infinities and NaN are refused by every schema (yaml_schema.Strict).
MAX_MEMORY_GB = 65536.0
"""64 TiB: host memory of one node, a container or a rank's budget (the largest single servers hold 32 TB)."""
MAX_DEVICE_MEMORY_GB = 4096.0
"""Memory of one accelerator (the largest today hold under 300 GB)."""
MIN_BUDGET_GB = 0.25
"""A rank's memory budget: it imports torch (about 250 MiB measured on this CPU) before anything it could measure."""
MAX_DEVICES = 64
"""Accelerators of one node (a node of today holds 8 or 16)."""
MAX_RANKS = 65536
MAX_TFLOPS = 1e6
"""An exaflop per device (the fastest of today: about 2,500 dense bf16 TFLOP/s)."""
MAX_TIME_S = 7 * 24 * 3600
"""A week: a cell's time limit, start-up or stall."""
MAX_TOKENS = 1 << 20
"""A sequence of 1,048,576 tokens: the longest context, prompt or completion a workload may ask for."""
MAX_STEPS = 1_000_000
TIMED_STEPS = 2
"""Steps a run needs after its warm-up: steady tokens/s are timed from the end of the warm-up's last step to the end
of a later one."""
MAX_COUNT = 1 << 16
"""Threads, slots, a batch's rows, accumulation steps, completions per prompt, a LoRA rank."""

Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
"""numpy's seeds are 32-bit."""
Gigabytes = Annotated[float, Field(gt=0, le=MAX_MEMORY_GB)]
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
MaxLength = Annotated[int, Field(ge=8, le=MAX_TOKENS)]
Steps = Annotated[int, Field(ge=2, le=MAX_STEPS)]
LearningRate = Annotated[float, Field(gt=0, le=1)]
LoraRank = Annotated[int, Field(ge=1, le=MAX_COUNT)]


class ForkValidation(Strict):
    """Two committed runs of a profile (run ids under results/<profile>/), the same cells once forked from the fork
    server (--start forked) and once fresh (--start fresh), whose cells ended with the same statuses
    (bench/selfbench/fork_parity.py checks them; a unit test holds every profile that names some to it)."""

    forked: str = Field(min_length=1)
    fresh: str = Field(min_length=1)


class HardwareProfile(Strict):
    name: str
    description: str = ""
    device: Device
    device_count: int = Field(
        ge=1, le=MAX_DEVICES, description="devices one process can split a model over (device_map); per node"
    )
    processes: int = Field(ge=1, le=MAX_RANKS, description="world size of multi-process backends, over every node")
    nodes: int = Field(
        default=1, ge=1, le=MAX_RANKS, description="machines one cell spans (slurm executor, bench/launchers/job.py)"
    )
    node_memory_gb: Gigabytes | None = Field(default=None, description="slurm executor: --mem of each node of a cell")
    gpu: str | None = Field(
        default=None,
        description="the GPU catalog's entry (scenarios/gpus.yaml) that memory_per_device_gb, card and peak_tflops "
        "come from",
    )
    memory_per_device_gb: float | None = Field(default=None, gt=0, le=MAX_DEVICE_MEMORY_GB)
    card: str | None = Field(
        default=None,
        min_length=1,
        max_length=80,
        description="the accelerator model the profile stands for (e.g. NVIDIA L4): what `--emulate` reproduces the "
        "memory of on a bigger card",
    )
    peak_tflops: float | None = Field(
        default=None, gt=0, le=MAX_TFLOPS, description="peak dense bf16 TFLOP/s per device"
    )
    precision: Literal["fp32", "bf16", "fp16"]
    image_flavor: Device
    """The image built for the device: docker/<flavor>/ (no hpu image exists: such profiles run locally)."""
    workload: str
    timeout_s: int = Field(ge=10, le=MAX_TIME_S, description="wall-clock limit of one cell")
    start_up_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_TIME_S,
        description="--time-budget: a cell's start-up (imports, load, set-up, teardown) until a cell of the run has "
        "shown its own (bench/run/budget.py)",
    )
    stall_s: int = Field(
        default=300,
        ge=5,
        le=MAX_TIME_S,
        description="progress watchdog: a cell whose rank makes no training step for this long ends as `hang` "
        "(bench/isolation/step_marks.py); loading and a precomputed reference pass are not judged",
    )
    threads_per_process: Count = 1
    provides: list[str] = Field(
        default=[], description="optional packages the profile's environment has (vllm), whether or not here"
    )
    core_slots: int | None = Field(
        default=None,
        ge=2,
        le=MAX_COUNT,
        description="CPU profiles: the machine's cores split into this many equal groups, each a device a rank "
        "takes, so that cells of fewer ranks run side by side on disjoint cores (run --exclusive: one at a time)",
    )
    container_cpus: float | None = Field(
        default=None, gt=0, le=MAX_COUNT, description="docker executor: --cpus of a cell"
    )
    container_memory_gb: Gigabytes | None = Field(default=None, description="docker executor: --memory of a cell")
    shm_size_gb: Gigabytes | None = Field(default=None, description="docker executor: --shm-size of a cell")
    fork_validated_by: ForkValidation | None = Field(
        default=None,
        description="accelerator profiles: the runs that showed its cells end alike forked and fresh; `run --start "
        "auto` forks its cells only where they are named (bench/run/fork_server_mode.py)",
    )
    memory_budget_gb: float | None = Field(
        default=None,
        ge=MIN_BUDGET_GB,
        le=MAX_MEMORY_GB,
        description="local executor: per-rank host memory limit (GiB), enforced by a kernel memory cgroup per rank",
    )

    @property
    def memory_budget_bytes(self) -> int | None:
        return None if self.memory_budget_gb is None else int(self.memory_budget_gb * GiB)

    @property
    def processes_per_node(self) -> int:
        return self.processes // self.nodes

    @property
    def needed_devices(self) -> int:
        """Devices each node must have: the most its processes or one process's device map take."""
        return max(self.device_count, self.processes_per_node)

    @model_validator(mode="after")
    def _processes_fill_the_nodes(self) -> "HardwareProfile":
        if self.processes % self.nodes:
            raise ValueError(f"processes ({self.processes}) must be a multiple of nodes ({self.nodes})")
        return self


class ModelSpec(Strict):
    weights: Literal["random", "pretrained"]
    config: str | None = Field(
        default=None,
        description="config.json under scenarios/workloads/ (random weights), or the absolute path of a config.json "
        "that --model named",
    )
    source: str | None = Field(default=None, description="hub id or local folder (pretrained weights)")
    seed: Seed = 0

    @field_validator("config")
    @classmethod
    def _config_inside_scenarios(cls, value: str | None) -> str | None:
        if value is not None and Path(value).is_absolute():
            if Path(value).name != "config.json":
                raise ValueError(f"{value!r}: an absolute model config must be a file named config.json")
        elif value is not None:
            inside_folder(scenarios_dir() / "workloads", value)
        return value

    @property
    def config_file(self) -> Path | None:
        """The config.json the architecture comes from (None: a pretrained model's own)."""
        if self.config is None:
            return None
        if Path(self.config).is_absolute():
            return Path(self.config)  # not resolved: a Hub cache's config.json is a link into its blobs
        return inside_folder(scenarios_dir() / "workloads", self.config)


class TokenizerSpec(Strict):
    kind: Literal["train_bpe", "pretrained"]
    vocab_size: int = Field(default=512, ge=64, le=MAX_TOKENS)
    source: str | None = None


class SyntheticPrefs(Strict):
    """Generated preference pairs (bench/assets/synthetic_prefs.py) with long-tailed prompt/answer lengths, capped so
    prompt + answer fits the workload's max_length. Lengths are in approximate tokens (words x ~1.3)."""

    rows: int = Field(default=1000, ge=8, le=10_000_000)
    seed: Seed = 0
    prompt_median_tokens: int = Field(default=96, ge=1, le=MAX_TOKENS)
    answer_median_tokens: int = Field(default=320, ge=1, le=MAX_TOKENS)
    sigma: float = Field(default=0.9, gt=0, le=3, description="log-normal spread: larger = longer tail")


class DatasetSpec(Strict):
    source: str | None = Field(default=None, description="folder under scenarios/data/, or a hub dataset name")
    split: str = "train"
    synthetic: SyntheticPrefs | None = None

    @field_validator("source")
    @classmethod
    def _source_stays_inside(cls, value: str | None) -> str | None:
        # A relative path would also be found by load_dataset from the working directory: keep it inside scenarios/.
        if value is not None and (value.startswith(("/", "~")) or ".." in Path(value).parts):
            raise ValueError(f"dataset source {value!r} must be a folder under scenarios/ or a hub dataset name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "DatasetSpec":
        if (self.source is None) == (self.synthetic is None):
            raise ValueError("set exactly one of 'source' (shipped folder or hub dataset) and 'synthetic'")
        return self


class TrainSpec(Strict):
    max_length: MaxLength
    per_device_train_batch_size: Count
    steps: Steps
    warmup_steps: int = Field(ge=0, le=MAX_STEPS)
    learning_rate: LearningRate = 5e-5
    beta: float = Field(default=0.1, gt=0, le=1000)
    gradient_checkpointing: bool = True
    seed: Seed = 0
    gradient_accumulation_steps: Count | None = Field(default=None, description="None: the library's default (1)")
    optim: Optimizer | None = Field(default=None, description="TrainingArguments.optim; None: the library's default")
    precompute_ref: bool = Field(
        default=False, description="precompute the reference log-probs in every cell that has a reference to drop"
    )
    # The settings below are given by `predict`/`advise` flags (bench/matrix/settings.py); None: the library's
    # default, left out of the workload's dump: a workload that names none has the same hash (its assets' folder).
    attn_implementation: Attention | None = Field(
        default=None, exclude_if=lambda v: v is None, description="from_pretrained's attn_implementation"
    )
    use_liger_kernel: bool | None = Field(
        default=None, exclude_if=lambda v: v is None, description="TrainingArguments.use_liger_kernel"
    )
    torch_compile: bool | None = Field(
        default=None, exclude_if=lambda v: v is None, description="TrainingArguments.torch_compile"
    )
    master_weights: bool | None = Field(
        default=None, exclude_if=lambda v: v is None, description="False: pure bf16, no fp32 copy of the weights"
    )


class LoraSpec(Strict):
    r: LoraRank = 8
    alpha: int = Field(default=16, ge=1, le=1 << 20)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[str] = Field(min_length=1)
    learning_rate: LearningRate | None = Field(
        default=None, description="learning rate of adapter training (default: train.learning_rate)"
    )


class GenerationSpec(Strict):
    """What the online methods (GRPO, RLOO) sample each step: TRL's `num_generations` completions per prompt, each
    of at most `max_completion_length` tokens."""

    num_generations: int = Field(
        ge=2, le=MAX_COUNT, description="completions per prompt (a group: GRPO's and RLOO's baseline)"
    )
    max_completion_length: int = Field(ge=1, le=MAX_TOKENS)
    temperature: float = Field(default=1.0, gt=0, le=100, description="sampling temperature (TRL's default: 1)")
    learning_rate_scale: float = Field(
        default=1.0,
        gt=0,
        le=1000,
        description="factor on the workload's learning rate (train or lora) for the online methods",
    )
    prompt_length: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="a prompt's most tokens where the workload's data is known; None: max_length (TRL 1.16 "
        "truncates no prompt, so the estimator assumes the longest a row may be)",
    )
    reward_model_weight: float = Field(
        default=1.0,
        ge=0,
        le=1000,
        description="the reward model's weight beside the rule's 1 (TRL's reward_weights): it matters where the "
        "reward model is trained (the rlhf pipeline); a matrix cell's scores 0",
    )
    vllm: Literal["none", "colocate", "server"] | None = Field(
        default=None,
        description="who generates for every online cell: none (transformers' generate), colocate or server "
        "(vLLM, TRL's vllm_mode); None: the cell says (its `+vllm` option, colocate)",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="the share of each vLLM card vLLM reserves; None: TRL's default for the mode "
        "(bench/estimate/vllm_terms.py)",
    )

    @model_serializer(mode="wrap")
    def _without_unset_vllm(self, handler):
        """The vLLM settings only where given: a workload that names none serializes as it always has (the spec a
        cell's worker reads, the pinned launches)."""
        data = handler(self)
        for key in ("vllm", "vllm_gpu_memory_utilization"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data


class Workload(Strict):
    name: str
    description: str = ""
    model: ModelSpec
    tokenizer: TokenizerSpec
    dataset: DatasetSpec
    train: TrainSpec
    lora: LoraSpec
    generation: GenerationSpec = GenerationSpec(num_generations=8, max_completion_length=1024)
    """The online methods' sampling; the default is the question a GPU user asks (8 completions of 1,024 tokens), the
    CPU workloads set small values."""

    @field_validator("train")
    @classmethod
    def _warmup_below_steps(cls, value: TrainSpec) -> TrainSpec:
        if value.steps < least_steps(value.warmup_steps):
            raise ValueError(
                f"warmup_steps ({value.warmup_steps}) must be below steps ({value.steps}) by at least {TIMED_STEPS}: "
                "tokens/s are timed between the ends of the steps after the warm-up"
            )
        return value


def least_steps(warmup_steps: int) -> int:
    """The fewest steps a run with this warm-up can be measured in (bench/judge/metrics.py times the steady steps
    from the end of the warm-up's last)."""
    return warmup_steps + TIMED_STEPS


def inside_folder(folder: Path, relative: str) -> Path:
    """`relative` under `folder`, refusing a name that climbs out of it (`..`, an absolute path). A link the user put
    inside the folder is followed wherever it points: the folder is theirs, and a scenario copy links the shipped
    data rather than copying it."""
    named = Path(os.path.normpath(folder / relative))
    if not named.is_relative_to(os.path.normpath(folder)):
        raise ValueError(f"path {relative!r} escapes {folder.name}/")
    return named.resolve()


def checked_name(kind: str, name: str, folder: Path) -> Path:
    if not NAME_PATTERN.match(name):
        raise BenchError(f"invalid {kind} name {name!r}: use letters, digits, '_', '-', '.'")
    if not folder.is_dir():
        raise BenchError(f"{folder}: no such folder (--scenarios names the scenario folder, e.g. scenarios/)")
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(available(folder)) or "none"
        raise BenchError(f"unknown {kind} {name!r}; available: {known}")
    return path


def available(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def load_profile(name: str, scenarios: Path | None = None) -> HardwareProfile:
    folder = (scenarios or scenarios_dir()) / "hardware"
    path = checked_name("hardware profile", name, folder)
    data = read_yaml(path)
    if isinstance(data, dict) and isinstance(data.get("gpu"), str):
        given = sorted(k for k in ("memory_per_device_gb", "card", "peak_tflops") if k in data)
        if given:
            raise BenchError(f"{display_path(path)}: key '{given[0]}': comes from the GPU catalog ({data['gpu']})")
        data = data | gpu_fields(data["gpu"], str(data.get("precision")))
    profile = parse_model(display_path(path), data, HardwareProfile)
    if profile.name != name:
        raise BenchError(f"{path.name}: key 'name': {profile.name!r} does not match the file name {name!r}")
    return profile


def load_workload(name: str, scenarios: Path | None = None) -> Workload:
    folder = (scenarios or scenarios_dir()) / "workloads"
    path = checked_name("workload", name, folder)
    workload = load_yaml_model(path, Workload)
    if workload.name != name:
        raise BenchError(f"{path.name}: key 'name': {workload.name!r} does not match the file name {name!r}")
    return workload


def gpu_profile(text: str, nodes: int, workload: str, precision: str | None = None) -> HardwareProfile:
    """The hardware profile `--gpu NAME:COUNT --nodes N` stands for: one process per device, the card's training
    precision unless `precision` says otherwise, `workload` its default workload."""
    name, count = parse_gpu_argument(text)
    if nodes < 1:
        raise BenchError(f"--nodes must be >= 1, got {nodes}")
    entry = gpu(name)
    chosen = precision or entry.precision
    where = f"{count} x {entry.card}" + (f" on each of {nodes} nodes" if nodes > 1 else "")
    try:
        return HardwareProfile(
            name=gpu_profile_name(entry, count, nodes),
            description=f"{where} (scenarios/gpus.yaml)",
            gpu=entry.name,
            device=entry.device,
            device_count=count,
            processes=count * nodes,
            nodes=nodes,
            precision=chosen,
            image_flavor=entry.device,
            workload=workload,
            timeout_s=ADVISED_TIMEOUT_S,
            threads_per_process=4,
            **gpu_fields(entry.name, chosen),
        )
    except ValidationError as exc:  # more devices or nodes than the schema's bounds
        given = f"--gpu {text}" + (f" --nodes {nodes}" if nodes != 1 else "")
        raise BenchError(describe_validation_error(given, exc).replace(": key ", ": the profile's ", 1)) from None


def gpu_profile_name(entry: GpuSpec, count: int, nodes: int) -> str:
    """`gpu-A10x2`, `gpu-H100-SXMx8-2nodes`: never the name of a shipped profile, so a run's results stay apart."""
    return f"gpu-{entry.name}x{count}" + (f"-{nodes}nodes" if nodes > 1 else "")
