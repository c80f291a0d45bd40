"""The result record: one schema-versioned JSON line per cell."""

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel

from bench.matrix.cell import CellAxes


SCHEMA_VERSION = 2
"""2: the status `harness` and the field `harness_fault` (records of version 1 have neither)."""


class Engagement(BaseModel):
    world_size: int
    distributed_type: str
    wrapper: str
    zero_stage: int | None = None
    partitioned_params: bool = False
    fsdp_modules: int = 0
    quantized_layers: dict[str, int] = {}
    adapters: list[str] = []
    ref_model: str | None = None
    devices: list[str] = []
    precompute_ref_log_probs: bool = False
    optimizer_offload: str | None = None
    """DeepSpeed's offload_optimizer device as the engine runs it (None: not offloaded)."""
    param_offload: str | None = None
    """Where the engine keeps the parameters between uses when it offloads them: DeepSpeed ZeRO-3's offload_param
    device, `cpu` for FSDP2's CPUOffloadPolicy (None: not offloaded)."""
    optimizer: str | None = None
    """Class of the optimizer that really steps (DeepSpeed's ZeRO wrapper and accelerate's unwrapped)."""
    optimizer_state_devices: list[str] = []
    """Devices of that optimizer's parameters (ZeRO: the fp32 master partitions) and state, after the first step."""
    param_storage_bytes: dict[str, int] = {}
    """Device -> bytes of the policy parameters' own storage (each ZeRO-3 partition, each FSDP2 shard, else the
    tensor). `devices` is where the parameters appear to the model (ZeRO-3: placeholders on the compute device)."""
    trainer: str | None = None
    """The class of the trainer that ran (None in records from before methods were an axis)."""
    frozen_parameters: int | None = None
    """Policy parameter tensors that do not require a gradient (a full fine-tune has none; None in records from
    before it was seen)."""
    attn_implementation: str | None = None
    """The attention the policy runs (its config's `_attn_implementation` after loading; None: not read)."""
    ref_attn_implementation: str | None = None
    """The same of a separate reference model (None: there is none)."""
    torch_compiled: bool | None = None
    """Whether the model the trainer steps is torch.compile's (None: not read)."""
    mixed_precision: str | None = None
    """accelerate's autocast as it runs: `no`, `bf16`, `fp16` (None: not read)."""
    trainable_dtypes: list[str] = []
    """The dtypes of the parameters that train, at the first step."""
    frozen_dtypes: list[str] = []
    """The dtypes of the frozen ones (an adapter's base weights), at the first step."""


class ProcessStart(StrEnum):
    FORKED = "forked"
    FRESH = "fresh"
    MIXED = "mixed"


class Status(StrEnum):
    """A cell's outcome. What each means is stated once, in STATUS_MEANING, and rendered from there into the
    matrices' legend (bench/report/cells.py) and docs/metrics.md (a test holds the page to it)."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    HANG = "hang"
    SILENT_FALLBACK = "silent_fallback"
    NOT_APPLICABLE = "not_applicable"
    UNTESTED = "untested"
    PREDICTED_OOM = "predicted_oom"
    NOT_RUN = "not_run"
    LEARNING_FAILED = "learning_failed"
    HARNESS = "harness"


@dataclass(frozen=True)
class StatusMeaning:
    short: str
    """The matrices' legend."""
    long: str
    """docs/metrics.md."""


STATUS_MEANING: dict[Status, StatusMeaning] = {
    Status.OK: StatusMeaning(
        "trained as asked and trained correctly",
        "trained, what ran is what was asked (world size, wrapper, ZeRO stage, partitioning, quantized layers, "
        "adapters, reference model), and it trained correctly (the learning check below)",
    ),
    Status.SILENT_FALLBACK: StatusMeaning(
        "ran, but not what was asked (silent_fallback)",
        "trained, but not as asked, e.g. FSDP requested and DDP ran (accelerate's FSDP on CPU), or one process "
        "instead of two",
    ),
    Status.LEARNING_FAILED: StatusMeaning(
        "ran as asked, but did not train correctly (learning_failed: a non-finite loss, a first-step loss away from "
        "the method's exact value, e.g. DPO's ln 2 when the reference is not the initial policy, a loss that did not "
        "fall, or a reward model that does not rank its pairs; the note says which)",
        "ran as asked, but did not train correctly: a non-finite loss, a first-step loss away from the method's "
        "exact value (DPO: ln 2, the reference is not the initial policy), a loss that did not fall, or a reward "
        "model that does not rank its training pairs (bench/judge/learning.py); the message says which",
    ),
    Status.OOM: StatusMeaning(
        "out of memory (under a memory budget: the rank the kernel killed, its cgroup peak and the per-rank budget)",
        "out of memory: CUDA OOM, host `MemoryError`, a container's memory limit, or a rank OOM-killed by the "
        "kernel at its memory budget (the message names the rank, the budget and the cgroup peak)",
    ),
    Status.PREDICTED_OOM: StatusMeaning(
        "not run: the memory estimator predicts it needs more than the device has by a clear margin (a "
        "prediction, not a measurement; --run-predicted-oom runs it)",
        "not run: the memory estimator predicts more than the device's memory by over 20 % "
        "(`bench/estimate/gate.py`); recorded with its prediction, never shown as a measured OOM. "
        "`--run-predicted-oom` (`make bench RUN_PREDICTED_OOM=1`) runs such cells; cells closer to the edge always "
        "run. Every other record carries its prediction too (`prediction`)",
    ),
    Status.ERROR: StatusMeaning(
        "error (class in brackets)",
        "with `error_class`: `device_mismatch`, `incompatible`, `import`, `config`, `comm`, `crash` (a rank killed "
        "by a signal), `version` (installed packages outside the cell's recipe's range), `node_fail` / `preempted` "
        "/ `cancelled` (Slurm ended the job first: `--executor slurm`), `other`, plus the first line of the real "
        "message and, when it matches an entry of `scenarios/known_issues.yaml`, the upstream link",
    ),
    Status.TIMEOUT: StatusMeaning(
        "exceeded the profile's time limit",
        "exceeded the profile's `timeout_s`; the cell's whole process group was killed",
    ),
    Status.HANG: StatusMeaning(
        "its training steps stopped (hang: the rank that stalled)",
        "its training steps stopped: a rank made no step for longer than the profile's `stall_s` (the progress "
        "watchdog, bench/isolation/step_marks.py), and the cell's whole process group was killed; the message names "
        "the stalled rank",
    ),
    Status.NOT_APPLICABLE: StatusMeaning(
        "impossible by rule",
        "impossible by a rule in `bench/matrix/scenario.py` (e.g. full fine-tuning of quantized weights), with the "
        "reason",
    ),
    Status.NOT_RUN: StatusMeaning(
        "a pipeline stage after one that failed",
        "a pipeline stage after one that did not end `ok`: never started (bench/pipeline); the reason names the "
        "stage that stopped the chain",
    ),
    Status.UNTESTED: StatusMeaning(
        "the device's software stack was absent, nothing ran",
        "not run: the device's software stack is absent here (e.g. Gaudi without habana_frameworks); never faked",
    ),
    Status.HARNESS: StatusMeaning(
        "the harness or the machine failed, not the cell (harness: the note says what; a resume runs it again)",
        "the harness (its fork server, the process standing in for a forked launcher) or the machine under it (a "
        "`/dev/shm` DeepSpeed cannot write) failed, not the cell: `harness_fault` says what, the cell's own outcome "
        "is unknown, and nothing of it is held against the cell (compare and the matrices never call it a "
        "regression; a resume runs it again). Where running it again is safe (the fork server died mid-cell and "
        "was restarted) the cell is re-run once before anything is recorded. A trial the harness disturbed but "
        "recovered keeps its own status and names what happened in `harness_fault`",
    ),
}


class ErrorClass(StrEnum):
    DEVICE_MISMATCH = "device_mismatch"
    INCOMPATIBLE = "incompatible"
    IMPORT = "import"
    CONFIG = "config"
    COMM = "comm"
    CRASH = "crash"
    OTHER = "other"
    VERSION = "version"
    """A package is outside the versions the cell's recipe needs (scenarios/recipes.yaml); nothing was trained."""
    NODE_FAIL = "node_fail"
    """Slurm: a node of the job failed (job state NODE_FAIL)."""
    PREEMPTED = "preempted"
    """Slurm: the job was preempted by a higher-priority job."""
    CANCELLED = "cancelled"
    """Slurm: the job was cancelled (scancel, or by an administrator) before the worker reported."""


RssMoment = Literal["baseline", "loaded", "trained"]
"""When a rank splits its RSS: with its baseline (libraries imported), when its load peak is read (trainer built) and
when its training peak is read (training over)."""


class RssParts(BaseModel):
    """A process's resident memory at one moment by what backs it (/proc/self/status RssAnon, RssFile, RssShmem; they
    sum to VmRSS). Anonymous: heap, tensors, stacks. File and shmem: page-cache pages the process has mapped and
    touched (shared libraries' code and data, the mapped checkpoint and datasets; shmem: files on a tmpfs and
    /dev/shm segments). RSS counts a mapped file page in every process that maps it, though the page cache holds it
    once; how much one touch maps follows the page cache's folio sizes and the kernel's fault-around, which are the
    machine's, not the program's (docs/metrics.md)."""

    anon_bytes: int
    file_bytes: int
    shmem_bytes: int

    @property
    def page_cache_bytes(self) -> int:
        """File-backed and shmem pages together: where a library's pages count depends on its filesystem."""
        return self.file_bytes + self.shmem_bytes


class RankMemoryFigures(BaseModel):
    """One rank's memory, host side. baseline: after the libraries are imported, before the model loads.
    kernel_peak: the peak usage of the rank's own memory cgroup (the kernel's figure, page cache it charged
    included), None without a memory budget. peak_rss: VmHWM over the whole process life."""

    rank: int
    baseline_rss_bytes: int | None = None
    baseline_cgroup_bytes: int | None = None
    peak_rss_bytes: int | None = None
    kernel_peak_bytes: int | None = None
    limit_bytes: int | None = None
    oom_killed: bool = False
    longest_batch: int | None = None
    """Tokens per row of the longest padded batch this rank trained on. Ranks read different batches, and a rank's
    activation peak follows its longest: under DDP one rank can peak above another by that alone. None in records
    from before it was kept, and for a rank with no report."""
    rss_parts: dict[RssMoment, RssParts] = {}
    """The rank's RSS split by what backs it at each moment it was read (RssMoment). VmHWM is one number: the peak's
    own split is unknown. A file page stays mapped once touched, so the page-cache growth from `baseline` to
    `trained` is the library and checkpoint pages the rank mapped after its baseline, which its model memory counts
    (a mapping removed before the end aside); the rest of the model memory is anonymous. Empty in records from
    before it was kept, and for a rank with no report or without /proc."""


class Learning(BaseModel):
    """The learning check's evidence (bench/judge/learning.py). Losses are the mean over ranks of each rank's
    training loss at that step; reward accuracy is the trainer's rank-gathered reward accuracy of the last step."""

    first_loss: float | None
    last_loss: float | None
    end_loss: float | None = None
    """Mean loss over the last quarter of the steps (at least 3): what the decrease is judged on."""
    start_loss: float | None = None
    """Mean loss over the first quarter of the steps, the start of the decrease for a method whose first-step loss
    has no exact value (SFT, ORPO, SimPO); None where the first step is the start."""
    expected_first_loss: float | None = None
    """The method's exact first-step loss (ln 2 for DPO and the reward model, 1/2 for KTO); None: none exists.
    Records from before methods were an axis leave it None although their (DPO) check held it to ln 2."""
    reward_accuracy: float | None
    pair_accuracy: float | None = None
    """Reward models: pairwise accuracy of the trained model on `pairs_evaluated` training pairs."""
    pairs_evaluated: int | None = None
    losses: list[float | None] = []
    """Per step; None where the loss was not finite."""
    rewards: list[float | None] = []
    """Online methods: the mean total reward of each generation, one per step where each step generates (the
    check: its last quarter above its first)."""
    reward_parts: dict[str, list[float | None]] = {}
    """Online methods: each reward function's mean per generation (the rule's, a reward model's), of which `rewards`
    is the sum."""
    failures: list[str] = []
    """Why the check failed (empty: passed)."""


class PredictionSummary(BaseModel):
    """What the memory estimator (bench/estimate) predicted for a cell, per device, before it ran. A prediction,
    never a measurement."""

    estimator_version: str
    train_bytes: float | None
    """Per device training peak: what metrics.model_memory_bytes (CPU) or CUDA max allocated (GPU) measures."""
    total_bytes: float | None
    """train + context / library baseline + allocator slack: what is held against usable_bytes."""
    usable_bytes: float | None
    verdict: str
    """fits, likely_fits, likely_oom, oom or unknown (no memory limit known); records of older estimators say fits,
    tight or predicted_oom."""
    margin_bytes: float | None
    terms: dict[str, float] = {}
    reserved_bytes: float | None = None
    """GPU: the CUDA caching allocator's predicted peak (what a per-process memory fraction caps); total_bytes less
    this is what sits outside it (context, workspaces, NCCL buffers). None on CPU and in older records."""


class Metrics(BaseModel):
    """Steady-state throughput (warm-up steps excluded) and memory peaks, max over ranks.

    tokens: non-padding tokens of chosen + rejected sequences seen by the policy, summed over ranks (TRL's
    num_tokens). Step time: interval between consecutive step ends (data loading included).
    memory_kind: `rss` (host peak resident set, CPU profiles) or `cuda_allocated` (torch max_memory_allocated).
    nvml_peak_bytes: NVML per-process used GPU memory (allocator reserve + CUDA context), sampled in the
    background over load and training, max over devices and ranks; None without pynvml or a GPU.
    mfu: model FLOPs utilisation, set when the profile has peak_tflops; flops_per_token and the convention
    (bench/judge/mfu.py) alongside it.
    """

    tokens_per_s: float
    pairs_per_s: float
    step_time_median_s: float
    step_time_p90_s: float
    steps: int
    warmup_steps: int
    tokens_total: int
    memory_kind: str
    load_peak_bytes: int | None
    train_peak_bytes: int | None
    cuda_reserved_peak_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    mem_growth_per_step_bytes: float | None
    load_s: float | None
    mfu: float | None = None
    flops_per_token: float | None = None
    mfu_convention: str | None = None
    peak_tflops: float | None = None
    """The device peak (dense TFLOP/s at the cell's precision) the MFU divides by: the card that ran, as the driver
    names it and the GPU catalog rates it; None in older records (the profile's peak then)."""
    nvml_peak_bytes: int | None = None
    baseline_bytes: int | None = None
    """Library baseline of the rank with the largest model memory (same kind as peak_bytes)."""
    peak_bytes: int | None = None
    """Raw peak per rank, max over ranks: the kernel's cgroup peak under a memory budget, else peak RSS on CPU,
    else CUDA max allocated."""
    model_memory_bytes: int | None = None
    """peak - baseline, max over ranks: what the model, its training state and its activations took."""
    cpu_s_per_step_median: float | None = None
    """Process CPU seconds (user + system, all threads) per steady step of the lead rank, median over steps: the
    work a step took, which other processes on the same cores barely change (wall time stretches with them).
    None in older records."""
    step_times_s: list[float] = []
    """The lead rank's steady step times (intervals between step ends after warm-up), for per-step exports
    (`export --format pytest-benchmark`); empty in older records."""


class ResultRecord(CellAxes):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    trial: int = 0
    """Repeat index (0-based) when a run measures each cell several times (--repeats)."""
    launcher: str
    options: list[str] = []
    setup: str = "recipe"
    """`recipe` (the documented settings, scenarios/recipes.yaml) or `newcomer` (a `+newcomer` row: without them)."""
    hardware: str
    workload: str
    status: Status
    error_class: ErrorClass | None = None
    message: str = ""
    harness_fault: str | None = None
    """What of the harness or the machine failed during this trial (not the cell): the cause of a `harness` status,
    or on another status what the harness recovered from (a fork server restarted, a re-run once, a stuck stand-in
    process ended). None: nothing; records of schema version 1 never say."""
    known_issue: str | None = None
    """Upstream link of the known issue the failure matches (scenarios/known_issues.yaml), if any."""
    known_issue_note: str | None = None
    """That entry's one-line explanation."""
    mismatches: list[str] = []
    metrics: Metrics | None = None
    learning: Learning | None = None
    prediction: PredictionSummary | None = None
    """The memory estimator's prediction for this cell, made before it ran."""
    memory_budget_bytes: int | None = None
    """Per-rank memory limit (kernel memory cgroup) the cell ran under; None: no budget."""
    rank_memory: list[RankMemoryFigures] = []
    engagement: Engagement | None = None
    world_size: int = 1
    exit_code: int | None = None
    signal: str | None = None
    wall_s: float | None = None
    log_tail: str = ""
    config_files: list[str] = []
    started_at: str | None = None
    finished_at: str | None = None
    executor: str = "local"
    slurm_job_id: str | None = None
    """The Slurm job that ran the cell (slurm executor)."""
    slurm_state: str | None = None
    """That job's final state from Slurm's own accounting (COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, ...)."""
    image: str | None = None
    overlapped_by: list[str] = []
    """Run ids of the other runners that ran on this machine while this cell ran (bench/run/runner_registry.py): its figures
    were measured on a shared machine. compare leaves such trials out of its verdicts unless asked."""
    shared_with: list[str] = []
    """The cells that ran beside it (bench/run/side_by_side.py): its own run's on other devices of the machine, or,
    in slots of one device (`gpu_shared`), any run's on that device (another run's as `<run>/<cell>`). Its memory
    figures are its own (per process, capped at its slot), its speed was measured on a shared host or device."""
    devices: str | None = None
    """The devices it was given when cells ran side by side (`GPUs 2,3`, `cores 1`, `GPU 0`); None: the run's own."""
    gpu_shared: bool = False
    """It ran in a slot of a device other cells ran on at the same time (`run --gpu-slots`, bench/run/slot_ledger.py):
    memory measured per process, speed shared."""
    slot: str | None = None
    """Its slots of the shared device (`2 of 5`, `0-1 of 5`; `0-4 of 5`: alone); None: not run in slots."""
    memory_cap_bytes: int | None = None
    """The cap it ran under in its slots, per process: the CUDA caching allocator's (a per-process memory fraction;
    context and library workspaces sit outside it) or, on CPU, each rank's memory cgroup; None: its profile's own."""
    process_start: ProcessStart | None = None
    """How its ranks started: `forked` from the run's fork server (the libraries imported once per run), `fresh`
    (each an interpreter of its own), `mixed`; None in older records and for cells that did not start."""
    phases: dict[str, float] = {}
    """Its wall time split in seconds: the launcher's start, each phase of the rank that finished last, the exit,
    and what they leave `unaccounted` (bench/judge/wall_split.py); empty in older records and where no rank reported."""
    emulated_from: str | None = None
    """Run with --emulate on this real GPU: a smaller profile (its `card`) on a bigger one, memory capped per process,
    devices limited. Memory answers (fits / OOM, peaks) are the profile's; speed and MFU are the real GPU's."""

    @property
    def emulated(self) -> bool:
        return self.emulated_from is not None

    @property
    def speed_shared(self) -> bool:
        """Its speed was measured with something else on its machine or device: another run (`overlapped_by`), cells
        beside it (`shared_with`), or its device's other slots (`gpu_shared`). compare's speed verdicts,
        validate-speed, the speed fit and the time budget's speed leave such records out; memory is its own."""
        return bool(self.overlapped_by or self.shared_with or self.gpu_shared)


EMULATED_NOTE = (
    "Emulated run (--emulate): a smaller profile on bigger GPUs with per-process memory capped to the profile's. "
    "Memory answers (fits / OOM, peaks) are valid; tokens/s and MFU are NOT the profile's hardware speed: they are "
    "the real GPU's, named beside each figure."
)


class StageRecord(BaseModel):
    """One stage of a pipeline run (bench/pipeline): a real process of its own, or a stage not run because an
    earlier one failed. A training stage carries its cell's full record (learning check, engagement, metrics)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    pipeline: str
    index: int
    """1-based position in the chain."""
    stage: str
    kind: str
    """`train`, `merge` or `generate`."""
    hardware: str
    workload: str
    status: Status
    error_class: ErrorClass | None = None
    message: str = ""
    wall_s: float | None = None
    exit_code: int | None = None
    peak_bytes: int | None = None
    """The stage's peak memory per process, max over ranks: CUDA max allocated on GPU, else peak RSS (host)."""
    memory_kind: str = "rss"
    output: str | None = None
    """What the stage produced for the next (a folder under build/), None for the last."""
    checks: dict[str, float | int | str] = {}
    """What the stage verified beyond its exit: the merge's max |logit| change, the new tokens generated, ..."""
    record: ResultRecord | None = None
    """A training stage's cell record, as a matrix run records it."""
    log_tail: str = ""
    started_at: str | None = None
    finished_at: str | None = None
