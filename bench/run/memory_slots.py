"""Slots of one device's memory (`run --gpu-slots N`): how many a run cuts a device into, how many slots a cell takes,
and the cap it runs under in them. Pure.

A big card is several small ones: its memory is cut into N equal slots, each with a group of the host's cores. A cell
takes as many slots as its PREDICTED total with a margin needs (bench/estimate/gate.py) and runs capped at them: on a
GPU its caching allocator at the slots' bytes less what sits outside the allocator (context, cuBLAS, NCCL), on CPU
each rank's memory cgroup at its share. A cell without a prediction, or too big for the device, takes every slot.
Under --emulate a cell's cap is its card's memory, so the 24 GB cards run beside each other. On CPU the device is
the memory the profile's per-rank budget gives a cell alone, cut the same way: the rehearsal of the GPU path."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.errors import BenchError
from bench.estimate.gate import CLEAR_MARGIN
from bench.matrix.profiles import HardwareProfile
from bench.results.schema import PredictionSummary
from bench.run.slots import DeviceSlot
from bench.units import GB, GiB

MARGIN = CLEAR_MARGIN
"""A cell is admitted with this much room above its predicted memory: twice the estimator's 10 % error goal, the
margin it is trusted to within when it decides that a cell is not run (bench/estimate/gate.py)."""
AUTO_FROM_BYTES = int(80 * GB)
"""A card this big is cut into slots unless the run says otherwise (--gpu-slots 1, --exclusive)."""
SLOT_BYTES = 24 * GiB
"""An automatic slot holds at least the smallest card the profiles stand for (1xA10, 1xL4, 1x4090: 24 GB) and the
context beside its cap: an H200 (139 GiB as the driver reports it) is five slots, an 80 GB H100 or A100 three."""

MAX_SLOTS = 64
"""The most slots `--gpu-slots` cuts a device into."""
SPEED_CELLS = 5
"""A handful: the cells of the exclusive speed pass after the cells ran in slots (`run --speed-pass`)."""
SPEED_TRIALS = 2
"""Trials of each cell of the exclusive speed pass."""


@dataclass(frozen=True)
class SharedDevice:
    """One device whose memory the cells of a run (and of other runs on it: bench/run/slot_ledger.py) share."""

    key: str
    """The ledger's name for it: the GPU's CUDA_VISIBLE_DEVICES id, or `host` on CPU."""
    gpu: str | None
    """The GPU's CUDA_VISIBLE_DEVICES id; None on CPU."""
    memory_bytes: int
    slots: int
    own_bytes: int | None
    """What a cell's own profile gives each of its processes alone: the emulated card's memory, the CPU profile's
    per-rank budget; None: the whole card, uncapped."""
    emulated_bytes: int | None = None
    """--emulate: the card every cell's allocator is capped at, whatever its slots."""
    priority: int = 0
    """--slot-priority: this run's place among the runs on the device (lower first; bench/run/slot_ledger.py)."""
    alone: bool = False
    """--alone: every cell of this run takes every slot (nothing beside it, through the ledger)."""

    @property
    def share_bytes(self) -> int:
        return self.memory_bytes // self.slots


def auto_slots(device_bytes: int) -> int:
    """The slots a card is cut into when the run does not say: one per SLOT_BYTES from AUTO_FROM_BYTES up, else 1."""
    return max(1, device_bytes // SLOT_BYTES) if device_bytes >= AUTO_FROM_BYTES else 1


def outside_bytes(prediction: PredictionSummary | None) -> float:
    """What the prediction puts outside the caching allocator (context, workspaces, NCCL buffers); 0 without one."""
    if prediction is None or prediction.total_bytes is None or prediction.reserved_bytes is None:
        return 0.0
    return max(0.0, prediction.total_bytes - prediction.reserved_bytes)


def slots_taken(device: SharedDevice, prediction: PredictionSummary | None, ranks: int) -> int:
    """How many of the device's slots a cell of `ranks` processes takes: what its predicted total (per device, times
    its ranks) with MARGIN needs, at least one; an emulated card's memory with what sits outside it; every slot
    without a prediction."""
    if device.emulated_bytes is not None:
        need = device.emulated_bytes + outside_bytes(prediction)
    elif prediction is None or prediction.total_bytes is None:
        return device.slots
    else:
        need = prediction.total_bytes * ranks * (1 + MARGIN)
    return max(1, min(device.slots, math.ceil(need / device.share_bytes)))


def cap_bytes(device: SharedDevice, taken: int, prediction: PredictionSummary | None, ranks: int) -> int | None:
    """The per-process cap of a cell in `taken` slots: the emulated card's; none (its own profile's) in every slot;
    else the slots' bytes less what sits outside the allocator (GPU), or each rank's share of them, at most the
    profile's own budget (CPU)."""
    if device.emulated_bytes is not None:
        return device.emulated_bytes
    if taken >= device.slots:
        return None
    held = taken * device.share_bytes
    if device.gpu is not None:
        return int(held - outside_bytes(prediction))
    per_rank = held // max(1, ranks)
    return None if device.own_bytes is not None and per_rank >= device.own_bytes else per_rank


def below_own(device: SharedDevice, cap: int | None) -> bool:
    """Whether a cell capped at `cap` had less than its own profile gives it (an OOM there is re-run alone)."""
    return cap is not None and (device.own_bytes is None or cap < device.own_bytes)


def core_groups(cores: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """`cores` cut into `count` groups as equal as they come (every core in one); with fewer cores than groups, one
    core each, in turn."""
    ordered = sorted(cores)
    if not ordered:
        return [() for _ in range(count)]
    if len(ordered) < count:
        return [(ordered[i % len(ordered)],) for i in range(count)]
    return [tuple(ordered[i * len(ordered) // count : (i + 1) * len(ordered) // count]) for i in range(count)]


def slot_devices(device: SharedDevice, cores: Sequence[int]) -> list[DeviceSlot]:
    """The device's slots as the scheduler hands them out: each its share of the memory and its group of cores."""
    return [
        DeviceSlot(gpu=device.gpu, cores=group, memory_bytes=device.share_bytes)
        for group in core_groups(cores, device.slots)
    ]


@dataclass(frozen=True)
class SlotRequest:
    """What a run asked of the device and what it runs on."""

    slots: int | None
    """--gpu-slots: None where not given (automatic on a GPU)."""
    exclusive: bool
    local: bool
    """Whether the cells run under the local executor (the only one that runs them side by side)."""
    emulated: bool
    device_bytes: int | None
    """The GPU's memory as the driver reports it; None on CPU or where no GPU was seen."""
    gpu: str | None = None
    priority: int = 0
    alone: bool = False


def shared_device(profile: HardwareProfile, request: SlotRequest) -> SharedDevice | None:
    """The device the run's cells share in slots, None where they do not; a one-line error where --gpu-slots was
    asked of a run that cannot share one."""
    asked = request.slots is not None and request.slots > 1
    if request.slots == 1 or (request.slots is None and (request.exclusive or profile.device != "cuda")):
        return None
    why = refusal(profile, request)
    if why is not None:
        if asked:
            raise BenchError(f"--gpu-slots {request.slots}: {why}")
        return None
    if profile.device == "cpu":
        assert profile.memory_budget_bytes is not None and request.slots is not None
        pool = profile.memory_budget_bytes * profile.processes_per_node
        return SharedDevice(
            "host", None, pool, request.slots, profile.memory_budget_bytes, None, request.priority, request.alone
        )
    assert request.device_bytes is not None
    slots = request.slots if request.slots is not None else auto_slots(request.device_bytes)
    if slots < 2:
        return None
    card = int(profile.memory_per_device_gb * GB) if request.emulated and profile.memory_per_device_gb else None
    gpu = request.gpu or "0"
    return SharedDevice(gpu, gpu, request.device_bytes, slots, card, card, request.priority, request.alone)


def refusal(profile: HardwareProfile, request: SlotRequest) -> str | None:
    """Why this run's cells cannot share a device in slots; None where they can."""
    if why := profile_refusal(profile, request.exclusive):
        return why
    if not request.local:
        return "cells share a device under the local executor only (--executor local)"
    if profile.device == "cuda" and request.device_bytes is None:
        return "no GPU was seen to share"
    return None


def profile_refusal(profile: HardwareProfile, exclusive: bool) -> str | None:
    """What the profile and --exclusive alone say against slots (known before anything is prepared)."""
    if exclusive:
        return "--exclusive runs one cell at a time; drop one of them"
    if profile.device == "cpu":
        if profile.memory_budget_gb is None:
            return (
                f"profile {profile.name} has no memory_budget_gb: on CPU the slots share the memory a cell's ranks "
                "get alone (each rank's cgroup), and this profile gives none"
            )
        return None
    if profile.device != "cuda":
        return f"profile {profile.name} runs on {profile.device}; slots share a CUDA card or the host's memory"
    if profile.needed_devices != 1 or profile.processes != 1:
        return f"profile {profile.name} spans {profile.needed_devices} GPUs; slots share one GPU among 1-GPU cells"
    return None


def check_asked(profile: HardwareProfile, slots: int | None, exclusive: bool) -> None:
    """A one-line error for --gpu-slots N (N > 1) where the profile or --exclusive rules slots out."""
    if slots is not None and slots > 1 and (why := profile_refusal(profile, exclusive)):
        raise BenchError(f"--gpu-slots {slots}: {why}")
