"""The environment fingerprint of a run (env.json): what it ran on and with which software.

Every field is optional and unknown keys are kept, so env.json files written before or after this schema load.
"""

from pydantic import BaseModel, ConfigDict, Field

from bench.results.cpu_features import CpuFeatures

LOCAL_VENV = "none (local venv)"

Training = dict[str, str | int | bool | list[str] | None]
"""env.json `training`: `workload` and each training setting's name (bench/matrix/settings.py TrainingSettings) ->
its value."""


class Open(BaseModel):
    """Unknown keys are kept (and written back), not rejected."""

    model_config = ConfigDict(extra="allow")


class DetectedGpu(Open):
    """A GPU as torch found it on the machine that ran (env.json); the catalog's entry is bench/matrix/gpus.py GpuSpec."""

    name: str = "?"
    memory_bytes: int | None = None


class HostHardware(Open):
    machine: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    cuda_available: bool | None = None
    cuda: str | None = None
    gpus: list[DetectedGpu] = []
    cpu_matmul_gflops: float | None = None
    """One thread's fp32 matmul GFLOP/s, measured once per run (bench/results/microbench.py); None in env.json
    files written before it was measured."""
    cpu_memory_gbps: float | None = None
    """One thread's memory copy GB/s (read + write), measured with it."""

    @property
    def summary(self) -> str:
        """`AMD EPYC, 2 cores, no GPU`."""
        cpu = self.cpu_model or self.machine or "unknown CPU"
        cores = "?" if self.cpu_count is None else self.cpu_count
        gpus = ", ".join(g.name for g in self.gpus) or "no GPU"
        return f"{cpu}, {cores} cores, {gpus}"


class EnvFingerprint(Open):
    created_at: str | None = None
    hardware_profile: str | None = None
    workload: str | None = None
    executor: str | None = None
    image: str | None = None
    """Image id the cells ran in (docker executor); None for the local venv."""
    image_tag: str | None = None
    hardware: HostHardware = Field(default_factory=HostHardware)
    platform: str | None = None
    python: str | None = None
    packages: dict[str, str | None] = {}
    """Versions the cells ran with (read inside the image for docker runs); None when not installed."""
    lock_file: str | None = None
    lock_hash: str | None = None
    installed_from: str | None = None
    """How the packages that ran were installed: `lock` (make setup, the images), or `wheelhouse <dir> over <the
    box's python>` (make setup WHEELHOUSE=: the box's own torch, transformers, accelerate and peft, the lock's
    versions of the rest); None in older fingerprints."""
    lock_differences: list[str] = []
    """Under a wheelhouse install: each of torch, transformers, accelerate and peft whose version is not the lock's."""
    git_sha: str | None = None
    git_dirty: bool | None = None
    """True when the code that ran had uncommitted changes on top of git_sha (None: not recorded)."""

    @property
    def git_label(self) -> str:
        """`2c709b0…` with ` + uncommitted changes` when the tree was dirty."""
        return (self.git_sha or "unknown") + (" + uncommitted changes" if self.git_dirty else "")

    command: str | None = None
    training: Training | None = None
    """What the cells trained with: `workload` (its name) and the value in effect of every training-setting flag
    (bench/matrix/settings.py TrainingSettings: max_length, precision, ...), whether a flag or the workload and
    profile set it; a resumed run must ask for the same (bench/results/env.py check_resumable). None in env.json files
    written before it was recorded."""
    cpu_features: CpuFeatures | None = None
    """What this CPU switches on in torch, oneDNN and bitsandbytes (bench/results/cpu_features.py); None in env.json
    files written before it was recorded."""

    @property
    def image_label(self) -> str:
        return self.image or LOCAL_VENV

    @property
    def versions(self) -> str:
        """`torch 2.13.0+cpu, trl 1.16.0`: installed packages only."""
        return ", ".join(f"{name} {version}" for name, version in self.packages.items() if version) or "unknown"

    def merged(self, update: dict) -> "EnvFingerprint":
        """This fingerprint with `update`'s keys replacing its own, validated."""
        return EnvFingerprint.model_validate(self.model_dump() | update)
