"""Cells side by side on one machine: the devices a run can hand out, how many each cell takes, which ones, and in
what order cells start. Pure.

A GPU profile's devices are the run's GPUs; a CPU profile with `core_slots` splits the cores into that many groups,
each a device a rank takes. A cell takes the devices its ranks use (placement.py cell_devices on GPUs; one group per
rank on CPU); a cell that takes every device, and on GPUs an offload cell (its optimizer step runs on every host
core), runs alone. Blocks are aligned where they can be (two GPUs: 0-1, 2-3: the pairs a box's links usually join).
With `run --gpu-slots` the devices are slots of one device's memory instead (memory_slots.py)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import HardwareProfile
from bench.worker.emulate import MEMORY_FRACTION_ENV

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class DeviceSlot:
    """One device a cell can take: a GPU (its CUDA_VISIBLE_DEVICES id) or a group of cores; or a slot of one device's
    memory (`memory_bytes`, its share), with its group of the host's cores."""

    gpu: str | None = None
    cores: tuple[int, ...] = ()
    memory_bytes: int | None = None


@dataclass(frozen=True)
class SlotPlacement:
    """The devices one cell runs on; in slots of one device's memory, also the cap it runs under there."""

    indexes: tuple[int, ...]
    """Their places among the machine's devices."""
    devices: tuple[DeviceSlot, ...]
    cap_bytes: int | None = None
    """Memory slots: the per-process cap (the caching allocator's on a GPU, each rank's cgroup on CPU); None: the
    cell's own profile's."""
    device_bytes: int | None = None
    """Memory slots on a GPU: the card's memory, of which the cap is the per-process fraction."""
    of: int = 0
    """Memory slots: how many the device has (0: devices of their own)."""

    @property
    def first(self) -> int:
        return self.indexes[0]

    @property
    def env(self) -> dict[str, str]:
        """What the cell's launch environment takes from it: its GPUs, as the run's devices, and on a GPU shared in
        slots the per-process memory fraction of its cap (bench/worker/emulate.py applies it)."""
        gpus = list(dict.fromkeys(d.gpu for d in self.devices if d.gpu is not None))
        env = {VISIBLE_ENV: ",".join(gpus)} if gpus else {}
        if self.cap_bytes is not None and self.device_bytes:
            env[MEMORY_FRACTION_ENV] = f"{min(1.0, self.cap_bytes / self.device_bytes):.6f}"
        return env

    @property
    def memory_budget_bytes(self) -> int | None:
        """On CPU slots: each rank's memory cgroup limit (the cap); None elsewhere (the executor's own)."""
        return self.cap_bytes if self.of and self.device_bytes is None else None

    @property
    def slot(self) -> str | None:
        """How a record names its memory slots: `2 of 5`, `0-1 of 5`; None off memory slots."""
        return f"{core_ranges(self.indexes)} of {self.of}" if self.of else None

    @property
    def cores(self) -> list[int] | None:
        """The cores its processes are bound to (None: any)."""
        cores = sorted({c for d in self.devices for c in d.cores})  # slots of one device may share a core
        return cores or None

    @property
    def label(self) -> str:
        """How a record names the mask: `GPUs 2,3`, `cores 0-3`, or a GPU's slot with its cores `GPU 0 (cores 3-5)`."""
        gpus = list(dict.fromkeys(d.gpu for d in self.devices if d.gpu is not None))
        cores = f"core{'s' if len(self.cores or []) > 1 else ''} {core_ranges(self.cores or [])}"
        if gpus:
            return f"GPU{'s' if len(gpus) > 1 else ''} {','.join(gpus)}" + (f" ({cores})" if self.cores else "")
        return cores


def core_ranges(cores: Sequence[int]) -> str:
    """`0-3,6` for [0, 1, 2, 3, 6]."""
    runs: list[list[int]] = []
    for core in sorted(cores):
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def machine_devices(profile: HardwareProfile, run_env: dict[str, str], cores: Sequence[int]) -> list[DeviceSlot]:
    """The devices the run hands out: its GPUs on a CUDA profile, `core_slots` groups of `cores` on a CPU profile;
    one device (nothing to share) elsewhere."""
    if profile.device == "cuda" and run_env.get(VISIBLE_ENV):
        return [DeviceSlot(gpu=g.strip()) for g in run_env[VISIBLE_ENV].split(",") if g.strip()]
    if profile.device == "cpu" and profile.core_slots and len(cores) >= profile.core_slots:
        size = len(cores) // profile.core_slots
        ordered = sorted(cores)
        return [DeviceSlot(cores=tuple(ordered[i * size : (i + 1) * size])) for i in range(profile.core_slots)]
    return [DeviceSlot()]


def need(on: CellOnProfile, gpus: int, total: int) -> int:
    """How many of the `total` devices a cell takes: `gpus` (its GPUs per node, 0 off CUDA) on a GPU profile, all of
    them for an offload cell there; one group of cores per rank on a CPU profile."""
    if on.profile.device == "cpu":
        return min(total, on.world)
    if backend_spec(on.cell.backend).offloads:
        return total
    return min(total, max(1, gpus))


def pick(free: Sequence[int], count: int, total: int) -> list[int] | None:
    """`count` of the `free` device indexes: the first aligned block (start a multiple of `count`) that is all free,
    else the lowest free ones; None when fewer are free."""
    if count > len(free):
        return None
    available = set(free)
    for start in range(0, total - count + 1, count):
        block = list(range(start, start + count))
        if available.issuperset(block):
            return block
    return sorted(available)[:count]


def start_order(cells: Sequence[Cell], needs: Callable[[Cell], int], total: int) -> list[Cell]:
    """Cells that share the machine first (in their order), then those that take every device."""
    sharing = [c for c in cells if needs(c) < total]
    return sharing + [c for c in cells if needs(c) >= total]
