"""Where a cell's model lives: the device_map it is loaded with, whether that splits one process over several
devices, and how many GPUs the cell gets. Read by the worker (loading, memory cap, timing, NVML) and by the launch
plan (CUDA_VISIBLE_DEVICES, docker --gpus, Slurm --gpus-per-node), so both sides agree. Pure, torch-free."""

from bench.matrix.backends import backend_spec
from bench.worker.spec import WorkerSpec

SPLITTING_MAPS = ("balanced", "auto", "balanced_io_first")
"""device_map values that spread one process's model over every device it sees."""


def device_map_setting(spec: WorkerSpec) -> str | None:
    """from_pretrained's device_map as a name: a backend that splits layers takes the recipe's split
    (`balanced_io_first`) or the newcomer's (`auto`), else `balanced`; other backends the recipe's placement
    (None: no device_map)."""
    chosen = spec.recipe.settings.device_map
    if backend_spec(spec.cell.backend).splits_layers:
        return chosen if chosen in SPLITTING_MAPS else "balanced"
    return None if chosen in (None, "none") else chosen


def splits_layers(spec: WorkerSpec) -> bool:
    """One process holds a model spread over several devices (the device_map backend, or a newcomer's
    device_map="auto")."""
    return device_map_setting(spec) in SPLITTING_MAPS


def cell_devices(spec: WorkerSpec) -> int:
    """GPUs the cell gets on each node: every device of the profile for a split model, one per rank for a
    multi-process backend (as many as the row's own ranks, `+1rank`), else one. Without a distributed launcher
    transformers gives a process that sees several GPUs `n_gpu = device_count()` (training_args.py,
    `_setup_devices`) and TRL 1.16 then refuses to train ("does not support nn.DataParallel", dpo_trainer.py); a split
    model is exempt (Trainer sets n_gpu 1). 0 off CUDA."""
    profile = spec.profile
    if profile.device != "cuda":
        return 0
    if splits_layers(spec):
        return profile.device_count
    if not backend_spec(spec.cell.backend).multi_process:
        return 1
    ranks = spec.cell.ranks  # a row that fixes its world size (`+1rank`) runs on that many devices
    return profile.processes_per_node if ranks is None else min(ranks, profile.processes_per_node)


def process_devices(split: bool, device_count: int, current: int) -> list[int]:
    """The CUDA devices one process uses, as its own ordinals: every visible one for a split model, else its
    current device (a rank of a multi-process cell sees its peers' devices too, and touching them would create a
    CUDA context there)."""
    return list(range(device_count)) if split else [current]
