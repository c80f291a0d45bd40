"""What this machine has, whether a hardware profile fits it, and how `--emulate` runs a smaller profile on
bigger GPUs. Runner side: nothing here imports TRL; torch is imported only inside detect() (the CUDA devices torch
sees: bench/results/env.py cuda_gpus)."""

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchError
from bench.executors.choice import Where
from bench.executors.docker_images import image_cuda_build
from bench.isolation.shm_segments import SHM_DIR, buffer_needed
from bench.matrix.axes import Device
from bench.matrix.gpus import GpuSpec, identify
from bench.matrix.plan import Plan
from bench.matrix.profiles import HardwareProfile
from bench.results.env import cuda_gpus
from bench.units import GB, MiB
from bench.worker.emulate import MEMORY_FRACTION_ENV

MEMORY_FLOOR = 0.9
"""A device counts as having the profile's memory from this fraction of it up: vendors sell '24 GB' cards
that report 22-24 GB to CUDA."""
MEMORY_CEILING = 1.15
"""Without --emulate a device bigger than this would give memory answers that do not hold on the profile."""


MINIMUM_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
"""Oldest NVIDIA Linux driver that runs a CUDA build of each major release, for every minor release of it (minor
version compatibility: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html; 13.0's
own driver is 580.65.06). An older driver fails every CUDA call, so every cell would end `error [other]`."""
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Detected:
    device: Device
    count: int = 0
    names: tuple[str, ...] = ()
    memory_bytes: tuple[int, ...] = ()
    hpu_stack: bool = False
    visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES as found, so emulation narrows the user's own selection."""
    driver_version: str | None = None
    """The NVIDIA driver's version (nvidia-smi); None when no driver tool answers."""
    cuda_build: str | None = None
    """The CUDA release of the torch build the cells run with ("13.0"); None: a CPU build of torch."""


@dataclass(frozen=True)
class Preflight:
    launch_env: dict[str, str] = field(default_factory=dict)
    emulated_from: str | None = None
    """--emulate: the real GPU(s) the smaller profile runs on (the driver's names), None otherwise."""
    untested_reason: str | None = None
    card: GpuSpec | None = None
    """The GPU catalog's entry for the device the cells run on, identified by the name its driver gives it; None on
    the CPU and for a device the catalog does not hold."""
    device_memory_bytes: int | None = None
    """What that device really holds (the smallest of the profile's devices)."""

    def peak_tflops(self, profile: HardwareProfile) -> float | None:
        """The peak MFU divides by: the card that runs the cells at the profile's precision (under --emulate the big
        card, not the emulated one; an H100 PCIe taken as `1xH100` its own 756, not the SXM's 989). None on the CPU
        and on a device the catalog does not name (the run then says it falls back to the profile's)."""
        return self.card.peak_tflops(profile.precision) if self.card is not None else None

    def memory_profile(self, profile: HardwareProfile) -> HardwareProfile:
        """The profile whose memory the estimator holds predictions against: the device's real memory, or under
        --emulate the profile's own (the cap each process runs under)."""
        if self.emulated_from or self.device_memory_bytes is None or profile.device == "cpu":
            return profile
        return profile.model_copy(update={"memory_per_device_gb": self.device_memory_bytes / GB})


def identified(detected: "Detected", needed: int) -> tuple[GpuSpec | None, int | None]:
    """The catalog's entry for the first of the `needed` devices, and the smallest memory among them."""
    if detected.device == "cpu" or not detected.names:
        return None, None
    try:
        card = identify(detected.names[0])
    except BenchError:
        card = None
    return card, min(detected.memory_bytes[:needed]) if detected.memory_bytes else None


def hpu_stack_available() -> bool:
    return importlib.util.find_spec("habana_frameworks") is not None


def selected(rows: list[list[str]], visible: str | None) -> list[list[str]]:
    """Pure: the nvidia-smi rows (index, uuid, ...) that CUDA_VISIBLE_DEVICES selects, in its order; every row
    without a selection. nvidia-smi lists every GPU of the machine whatever the variable says."""
    if not visible:
        return rows
    wanted = [item.strip() for item in visible.split(",") if item.strip()]
    return [row for item in wanted for row in rows if item in (row[0], row[1])]


def _mib(text: str) -> int:
    """nvidia-smi's memory.total in MiB; 0 where it prints none ("[N/A]" on some MIG setups)."""
    try:
        return int(float(text))
    except ValueError:
        return 0


def driver_gpus() -> Detected | None:
    """CUDA devices as the NVIDIA driver lists them (nvidia-smi), whatever build of torch this venv has, within the
    user's CUDA_VISIBLE_DEVICES."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    visible = os.environ.get(VISIBLE_ENV)
    listed = [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.count(",") == 4]
    rows = selected(listed, visible)
    if not rows:
        return None
    return Detected(
        device="cuda",
        count=len(rows),
        names=tuple(row[2] for row in rows),
        memory_bytes=tuple(_mib(row[3]) * MiB for row in rows),
        visible_devices=visible,
        driver_version=rows[0][4],
    )


def detect(where: Where = "local") -> Detected:
    """The devices the cells can use. `where="image"`: the cells run in the cuda image, so the GPUs the driver lists
    count whatever this venv's torch is, and the image's CUDA build is the one held against the driver. `"local"`:
    CUDA devices through this venv's torch, else Gaudi through habana_frameworks, else the driver's GPUs with this
    torch's build (a CPU build cannot use them: check_profile says so), else cpu."""
    hpu_stack = hpu_stack_available()
    driver = driver_gpus()
    if where == "image":
        return replace(driver, cuda_build=image_cuda_build()) if driver else Detected(device="cpu", hpu_stack=hpu_stack)
    import torch

    gpus = cuda_gpus()
    if gpus:
        return Detected(
            device="cuda",
            count=len(gpus),
            names=tuple(gpu.name for gpu in gpus),
            memory_bytes=tuple(gpu.memory_bytes or 0 for gpu in gpus),
            hpu_stack=hpu_stack,
            visible_devices=os.environ.get(VISIBLE_ENV),
            driver_version=driver.driver_version if driver else None,
            cuda_build=torch.version.cuda,
        )
    if hpu_stack:
        import habana_frameworks.torch.hpu as hthpu  # type: ignore[import-not-found]

        count = int(hthpu.device_count()) if hthpu.is_available() else 0
        if count:
            names = tuple(str(hthpu.get_device_name(i)) for i in range(count))
            memory = tuple(int(hthpu.get_device_properties(i).total_memory) for i in range(count))
            return Detected(device="hpu", count=count, names=names, memory_bytes=memory, hpu_stack=True)
    if driver:  # GPUs this torch does not use: a CPU build, or a CUDA build the driver is too old for
        return replace(driver, hpu_stack=hpu_stack, cuda_build=torch.version.cuda)
    return Detected(device="cpu", hpu_stack=hpu_stack)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def driver_problem(driver: str | None, cuda_build: str | None) -> str | None:
    """Pure: why this driver cannot run this CUDA build, or None (also when either is unknown)."""
    if not driver or not cuda_build:
        return None
    minimum = MINIMUM_DRIVER.get(_version(cuda_build)[0])
    if minimum is None or _version(driver) >= _version(minimum):
        return None
    return (
        f"NVIDIA driver {driver} is older than {minimum}, the oldest that runs CUDA {cuda_build} (the cells' torch "
        "build): update the driver (docs/hardware.md)"
    )


def untested_reason(profile: HardwareProfile, hpu_stack: bool | None = None) -> str | None:
    """Why every cell of `profile` is recorded `untested` on this machine, or None when they can run."""
    stack = hpu_stack_available() if hpu_stack is None else hpu_stack
    if profile.device == "hpu" and not stack:
        return (
            f"profile {profile.name} needs the Habana Gaudi stack (habana_frameworks, optimum-habana); "
            "it is not importable here, so nothing was run"
        )
    return None


def _describe(detected: Detected) -> str:
    if detected.device == "cpu" or detected.count == 0:
        return "0 cuda devices" if detected.device == "cpu" else f"0 {detected.device} devices"
    pairs = zip(detected.names, detected.memory_bytes, strict=True)
    sizes = sorted({f"{name}, {memory / GB:.0f} GB" for name, memory in pairs})
    plural = "s" if detected.count > 1 else ""
    return f"{detected.count} {detected.device} device{plural} ({'; '.join(sizes)})"


def check_profile(profile: HardwareProfile, detected: Detected, emulate: bool) -> BenchError | None:
    """None when `profile` can run here (with --emulate: on bigger devices), else a one-line reason."""
    if profile.device == "cpu":
        if emulate:
            return BenchError(f"--emulate applies to GPU profiles; profile {profile.name} runs as it is")
        return None
    if profile.device == "hpu" and not detected.hpu_stack:
        return None  # every cell is recorded `untested` with the reason
    if emulate and profile.device != "cuda":
        return BenchError(f"--emulate is implemented for cuda profiles only, not {profile.device}")
    if emulate and profile.card is None:
        return BenchError(f"--emulate needs the card profile {profile.name} stands for (key `card`, e.g. NVIDIA L4)")
    needed = profile.needed_devices
    wanted = profile.memory_per_device_gb
    need = f"profile {profile.name} needs {needed} {profile.device} device{'s' if needed > 1 else ''}"
    need += f" with >= {wanted:g} GB" if wanted else ""
    have = f"this machine has {_describe(detected)}"
    if detected.device != profile.device or detected.count < needed:
        return BenchError(f"{need}; {have}")
    if profile.device == "cuda" and detected.cuda_build is None:
        return BenchError(
            f"{have}, but this venv's torch is a CPU build: run `make setup` again (where nvidia-smi lists a GPU it "
            "installs docker/cuda/requirements.lock) or run the cells in the cuda image (--executor docker)"
        )
    problem = driver_problem(detected.driver_version, detected.cuda_build)
    if problem:
        return BenchError(f"{need}; {problem}")
    if wanted is None:
        return None
    used = detected.memory_bytes[:needed]
    if min(used) < wanted * GB * MEMORY_FLOOR:
        return BenchError(f"{need}; {have}")
    if not emulate and max(used) > wanted * GB * MEMORY_CEILING:
        card, _ = identified(detected, needed)
        own = f", --gpu {card.name}:{needed} (this card's own profile)" if card is not None else ""
        return BenchError(
            f"{need}; {have}: bigger devices give memory answers that do not hold on {profile.name}; "
            f"add --emulate to cap each process at the profile's memory (memory answers valid, speed not){own}"
        )
    return None


def memory_fraction(profile: HardwareProfile, detected: Detected) -> float:
    """Share of the smallest used device that equals the profile's memory per device (at most 1)."""
    if profile.memory_per_device_gb is None:
        raise BenchError(f"--emulate needs memory_per_device_gb in profile {profile.name}")
    smallest = min(detected.memory_bytes[: profile.needed_devices])
    return min(1.0, profile.memory_per_device_gb * GB / smallest)


def visible_env(profile: HardwareProfile, detected: Detected) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES naming the profile's first devices (within the user's own selection, if any): the run's
    devices, from which each cell takes its own (bench/run/launch.py)."""
    needed = profile.needed_devices
    if detected.visible_devices:
        visible = [d.strip() for d in detected.visible_devices.split(",") if d.strip()][:needed]
    else:
        visible = [str(i) for i in range(needed)]
    return {VISIBLE_ENV: ",".join(visible)}


def emulation_env(profile: HardwareProfile, detected: Detected) -> dict[str, str]:
    """Launch environment of an emulated cell: only the profile's device count visible, memory capped."""
    return visible_env(profile, detected) | {MEMORY_FRACTION_ENV: f"{memory_fraction(profile, detected):.6f}"}


def preflight(
    profile: HardwareProfile, emulate: bool, detected: Detected | None = None, where: Where = "local"
) -> Preflight:
    """Check the machine against `profile` before anything is built; raises BenchError on a mismatch.
    `where`: see detect()."""
    if profile.device == "cpu" and not emulate:
        return Preflight()  # CPU profiles run anywhere, nothing detected
    found = detected or detect(where)
    error = check_profile(profile, found, emulate)
    if error is not None:
        raise error
    reason = untested_reason(profile, found.hpu_stack)
    if reason:
        return Preflight(untested_reason=reason)
    card, memory = identified(found, profile.needed_devices)
    if emulate:
        real = ", ".join(dict.fromkeys(found.names[: profile.needed_devices]))
        return Preflight(
            launch_env=emulation_env(profile, found), emulated_from=real, card=card, device_memory_bytes=memory
        )
    if found.device == "cuda":
        return Preflight(launch_env=visible_env(profile, found), card=card, device_memory_bytes=memory)
    return Preflight(card=card, device_memory_bytes=memory)


def unwritable(folder: Path) -> str | None:
    """Why no file can be made in `folder` (the system's reason), or None when one can (it is removed again)."""
    try:
        handle, name = tempfile.mkstemp(prefix="dpo-bench-probe-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(handle)
    os.unlink(name)
    return None


def shm_check(plans: Iterable[Plan], folder: Path = SHM_DIR) -> BenchError | None:
    """None when no planned cell that runs here makes DeepSpeed's CPU allreduce buffer in /dev/shm, or a file can be
    made there; else the one-line refusal: such a cell's ranks would wait for their buffer until the time limit."""
    runnable = [p for p in plans if p.not_applicable is None]
    needing = [p.cell.id for p in runnable if buffer_needed(p.profile.device, p.cell.launcher, p.world)]
    if not needing or (why := unwritable(folder)) is None:
        return None
    shown = ", ".join(needing[:3]) + (f" and {len(needing) - 3} more" if len(needing) > 3 else "")
    return BenchError(
        f"{folder} is not writable ({why}): DeepSpeed's CPU allreduce makes its buffers there, so {len(needing)} "
        f"cell(s) ({shown}) would wait for them until their time limit; make {folder} writable (mount -o remount,rw "
        f"{folder}) or leave those cells out with --filter"
    )
