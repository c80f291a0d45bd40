"""What this machine has, whether a hardware profile fits it, and how `--emulate` runs a smaller profile on
bigger GPUs. Runner side: nothing here imports TRL; torch is imported only inside detect()."""

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass, field

from bench.errors import BenchError
from bench.matrix.axes import Device
from bench.matrix.profiles import HardwareProfile, needed_devices
from bench.units import MiB
from bench.worker.emulate import MEMORY_FRACTION_ENV

GB = 1e9
MEMORY_FLOOR = 0.9
"""A device counts as having the profile's memory from this fraction of it up: vendors sell '24 GB' cards
that report 22-24 GB to CUDA."""
MEMORY_CEILING = 1.15
"""Without --emulate a device bigger than this would give memory answers that do not hold on the profile."""


@dataclass(frozen=True)
class Detected:
    device: Device
    count: int = 0
    names: tuple[str, ...] = ()
    memory_bytes: tuple[int, ...] = ()
    hpu_stack: bool = False
    visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES as found, so emulation narrows the user's own selection."""


@dataclass(frozen=True)
class Preflight:
    launch_env: dict[str, str] = field(default_factory=dict)
    emulated_from: str | None = None
    """--emulate: the real GPU(s) the smaller profile runs on (the driver's names), None otherwise."""
    untested_reason: str | None = None


def hpu_stack_available() -> bool:
    return importlib.util.find_spec("habana_frameworks") is not None


def driver_gpus() -> Detected | None:
    """CUDA devices as the NVIDIA driver lists them (nvidia-smi), whatever build of torch this venv has."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [line.rsplit(",", 1) for line in out.splitlines() if "," in line]
    if not rows:
        return None
    return Detected(
        device="cuda",
        count=len(rows),
        names=tuple(name.strip() for name, _ in rows),
        memory_bytes=tuple(int(float(mib)) * MiB for _, mib in rows),
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def detect(driver_ok: bool = False) -> Detected:
    """CUDA devices through torch.cuda, else Gaudi through habana_frameworks, else cpu. `driver_ok`: the cells run in
    the cuda image (docker executor), so GPUs the driver lists count even when this venv's torch is a CPU build."""
    hpu_stack = hpu_stack_available()
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        return Detected(
            device="cuda",
            count=len(props),
            names=tuple(p.name for p in props),
            memory_bytes=tuple(int(p.total_memory) for p in props),
            hpu_stack=hpu_stack,
            visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
    if hpu_stack:
        import habana_frameworks.torch.hpu as hthpu  # type: ignore[import-not-found]

        count = int(hthpu.device_count()) if hthpu.is_available() else 0
        if count:
            names = tuple(str(hthpu.get_device_name(i)) for i in range(count))
            memory = tuple(int(hthpu.get_device_properties(i).total_memory) for i in range(count))
            return Detected(device="hpu", count=count, names=names, memory_bytes=memory, hpu_stack=True)
    found = driver_gpus() if driver_ok else None
    return found or Detected(device="cpu", hpu_stack=hpu_stack)


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
    needed = needed_devices(profile)
    wanted = profile.memory_per_device_gb
    need = f"profile {profile.name} needs {needed} {profile.device} device{'s' if needed > 1 else ''}"
    need += f" with >= {wanted:g} GB" if wanted else ""
    have = f"this machine has {_describe(detected)}"
    if detected.device != profile.device or detected.count < needed:
        return BenchError(f"{need}; {have}")
    if wanted is None:
        return None
    used = detected.memory_bytes[:needed]
    if min(used) < wanted * GB * MEMORY_FLOOR:
        return BenchError(f"{need}; {have}")
    if not emulate and max(used) > wanted * GB * MEMORY_CEILING:
        return BenchError(
            f"{need}; {have}: bigger devices give memory answers that do not hold on {profile.name}; "
            "add --emulate to cap each process at the profile's memory (memory answers valid, speed not)"
        )
    return None


def memory_fraction(profile: HardwareProfile, detected: Detected) -> float:
    """Share of the smallest used device that equals the profile's memory per device (at most 1)."""
    if profile.memory_per_device_gb is None:
        raise BenchError(f"--emulate needs memory_per_device_gb in profile {profile.name}")
    smallest = min(detected.memory_bytes[: needed_devices(profile)])
    return min(1.0, profile.memory_per_device_gb * GB / smallest)


def visible_env(profile: HardwareProfile, detected: Detected) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES naming the profile's first devices (within the user's own selection, if any)."""
    needed = needed_devices(profile)
    if detected.visible_devices:
        visible = [d.strip() for d in detected.visible_devices.split(",") if d.strip()][:needed]
    else:
        visible = [str(i) for i in range(needed)]
    return {"CUDA_VISIBLE_DEVICES": ",".join(visible)}


def emulation_env(profile: HardwareProfile, detected: Detected) -> dict[str, str]:
    """Launch environment of an emulated cell: only the profile's device count visible, memory capped."""
    return visible_env(profile, detected) | {MEMORY_FRACTION_ENV: f"{memory_fraction(profile, detected):.6f}"}


def preflight(
    profile: HardwareProfile, emulate: bool, detected: Detected | None = None, driver_ok: bool = False
) -> Preflight:
    """Check the machine against `profile` before anything is built; raises BenchError on a mismatch.
    `driver_ok`: see detect()."""
    if profile.device == "cpu" and not emulate:
        return Preflight()  # exactly as before: CPU profiles run anywhere, nothing detected
    found = detected or detect(driver_ok)
    error = check_profile(profile, found, emulate)
    if error is not None:
        raise error
    reason = untested_reason(profile, found.hpu_stack)
    if reason:
        return Preflight(untested_reason=reason)
    if emulate:
        real = ", ".join(dict.fromkeys(found.names[: needed_devices(profile)]))
        return Preflight(launch_env=emulation_env(profile, found), emulated_from=real)
    if found.device == "cuda" and found.count > needed_devices(profile):
        return Preflight(launch_env=visible_env(profile, found))  # device_map would spread over every GPU
    return Preflight()
