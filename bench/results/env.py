"""The environment fingerprint of a run (env.json): what it ran on and with which software, written once per run."""

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from bench.errors import BenchError
from bench.files import write_whole
from bench.install import stamped_commit
from bench.isolation.deferred_sigint import uncut
from bench.matrix.packages import installed_versions
from bench.paths import BUILD_DIR, IN_CHECKOUT, PROJECT_ROOT
from bench.results.cpu_features import CpuFeatures, MeasuredAfter, detect_cpu_features
from bench.results.env_schema import DetectedGpu, EnvFingerprint, HostHardware, Training
from bench.results.layout import CPU_FEATURES_AFTER_FILE, ENV_FILE
from bench.results.memory_settings import MemorySettings, detect_memory_settings
from bench.results.microbench import cpu_matmul_gflops, cpu_memory_gbps
from bench.results.store import now_iso
from bench.secrets import redact


def lock_file_hash(lock: Path) -> str | None:
    return hashlib.sha256(lock.read_bytes()).hexdigest()[:16] if lock.is_file() else None


CODE_PATHS = ("bench", "scenarios", "docker", "pyproject.toml", "Makefile")
"""What a cell's behaviour depends on in the checkout; results/ and docs do not count."""


def _git(*args: str) -> str | None:
    if not IN_CHECKOUT:  # an installed wheel: the folder it lies in may be another project's repository
        return None
    try:
        out = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_sha() -> str | None:
    """The checkout's commit, else the one an installed wheel was built from (bench/install.py)."""
    return (_git("rev-parse", "HEAD") or "").strip() or stamped_commit().sha


def git_dirty() -> bool | None:
    """Whether the code that runs differs from `git_sha` (changed or new files under CODE_PATHS); a wheel's stamp
    outside a checkout; None outside git."""
    status = _git("status", "--porcelain", "--", *CODE_PATHS)
    return stamped_commit().dirty if status is None else bool(status.strip())


def cpu_model() -> str | None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return None
    lines = cpuinfo.read_text().splitlines()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)


def cuda_gpus() -> list[DetectedGpu]:
    """The CUDA devices this interpreter's torch sees (within CUDA_VISIBLE_DEVICES, in torch's numbering): the one
    enumeration of them, for env.json and for the preflight (bench/run/preflight.py detect)."""
    import torch

    if not torch.cuda.is_available():
        return []
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return [DetectedGpu(name=p.name, memory_bytes=int(p.total_memory)) for p in props]


def detect_hardware() -> HostHardware:
    import torch

    cuda = torch.cuda.is_available()
    gpus = cuda_gpus()
    return HostHardware(
        machine=platform.machine(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        cuda_available=cuda,
        cuda=torch.version.cuda if cuda else None,
        gpus=gpus,
        cpu_matmul_gflops=cpu_matmul_gflops(),
        cpu_memory_gbps=cpu_memory_gbps(),
    )


OFFLINE_STAMP = ".installed-offline"
"""What docker/offline/install.py writes into the venv it made (JSON)."""
OVERLAY_STAMP = ".installed-overlay"
"""What bench/selfbench/overlay.py writes into an overlay venv (JSON): the packages it replaced over which venv."""


PIP_INSTALL = "pip: an installed dpo-bench wheel, the versions pip resolved (no lock)"


def installation(prefix: Path | None = None) -> tuple[str, list[str]]:
    """(installed_from, lock_differences) of the interpreter running this; an overlay's are its packages over its
    base venv's."""
    try:
        overlay = json.loads((Path(sys.prefix if prefix is None else prefix) / OVERLAY_STAMP).read_text("utf-8"))
    except (OSError, ValueError):
        overlay = None
    if isinstance(overlay, dict):
        where, differences = installation(Path(str(overlay.get("over"))))
        packages = " ".join(str(p) for p in overlay.get("packages", []))
        return f"overlay {packages} over {where}", [*differences, *map(str, overlay.get("differences", []))]
    stamp = Path(sys.prefix if prefix is None else prefix) / OFFLINE_STAMP
    try:
        record = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ("lock" if IN_CHECKOUT else PIP_INSTALL), []
    where = f"wheelhouse {record.get('wheelhouse')} over {record.get('base_python')}"
    return where, [str(line) for line in record.get("differences", [])]


def memory_settings(executor: str) -> MemorySettings:
    """The memory settings and filesystems that decide what a rank's RSS counts: torch's shared libraries (the local
    venv's; in an image they are the image's), the checkout and the assets."""
    import torch

    folders = {"checkout": PROJECT_ROOT, "assets": BUILD_DIR / "assets"}
    if executor != "docker":
        folders["libraries"] = Path(torch.__file__).parent / "lib"
    return detect_memory_settings(folders, PROJECT_ROOT)


def _project_relative(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def environment_fingerprint(
    hardware: str,
    workload: str,
    executor: str,
    lock: Path | None,
    image: str | None,
    training: Training | None = None,
    host: HostHardware | None = None,
    cpu: CpuFeatures | None = None,
) -> EnvFingerprint:
    """`lock`: the image flavour's lock file, None for a flavour without one (hpu) or an installed wheel (none
    shipped); `training`: the run's profile and workload's (bench/matrix/settings.py `training_of`); `host`, `cpu`:
    this host's hardware and CPU features, measured earlier (None: measured now)."""
    installed_from, differences = installation()
    lock = lock if lock is not None and lock.is_file() else None
    return EnvFingerprint(
        created_at=now_iso(),
        hardware_profile=hardware,
        workload=workload,
        executor=executor,
        image=image,
        hardware=host or detect_hardware(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        packages=installed_versions(),
        lock_file=_project_relative(lock) if lock else None,
        lock_hash=lock_file_hash(lock) if lock else None,
        installed_from=installed_from if executor != "docker" else "lock",
        lock_differences=differences if executor != "docker" else [],
        git_sha=git_sha(),
        git_dirty=git_dirty(),
        command=redact(" ".join(sys.argv)),
        training=training,
        cpu_features=cpu or detect_cpu_features(),
        memory_settings=memory_settings(executor),
    )


def read_env(run_dir: Path) -> EnvFingerprint | None:
    """A run's env.json, None when it has none; one-line error when it is not a fingerprint."""
    path = run_dir / ENV_FILE
    if not path.is_file():
        return None
    try:
        env = EnvFingerprint.model_validate_json(path.read_bytes())  # bytes: binary garbage is invalid JSON too
    except OSError as exc:
        raise BenchError(f"{path}: cannot read the environment fingerprint ({exc.strerror or exc})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise BenchError(f"{path}: not a valid environment fingerprint ({where}: {first['msg']})") from None
    if not env.model_fields_set - set(env.model_extra or {}):  # `{}`, or only keys of something else
        raise BenchError(
            f"{path}: no environment fingerprint in it (none of its keys is one); remove it, then resume with "
            "--force or start a new run"
        )
    return env


def _as_flag(name: str, value: object) -> str:
    """`--precision bf16`, `--lora-targets q_proj,v_proj`, `--gradient-checkpointing on`; `workload tiny` (--workload
    or --model names it)."""
    if isinstance(value, bool):
        shown = "on" if value else "off"
    elif isinstance(value, list):
        shown = ",".join(str(item) for item in value)
    else:
        shown = "default" if value is None else str(value)
    return f"workload {shown}" if name == "workload" else f"--{name.replace('_', '-')} {shown}"


def check_training(run_dir: Path, env: EnvFingerprint, asked: Training, defaults: Training) -> None:
    """One line naming each training setting a resumed run asks for (`asked`) that differs from what its records
    were measured with. An env.json written before the settings were recorded is taken to hold its workload's
    defaults (`defaults`: this command's, without its training-setting flags)."""
    recorded = env.training
    if recorded is None:
        recorded = defaults | ({"workload": env.workload} if env.workload else {})
    differ = [name for name, value in asked.items() if recorded.get(name, value) != value]
    if not differ:
        return
    theirs = ", ".join(_as_flag(name, recorded.get(name)) for name in differ)
    ours = ", ".join(_as_flag(name, asked[name]) for name in differ)
    assumed = "" if env.training is not None else " (the defaults: its env.json predates recorded training settings)"
    raise BenchError(
        f"{run_dir}: this run trained with {theirs}{assumed}; this command asks for {ours}: a resumed run keeps its "
        "training settings; start a new run (another --run-id) for these"
    )


def check_resumable(
    run_dir: Path, force: bool, asked: Training | None = None, defaults: Callable[[], Training] | None = None
) -> None:
    """Before a run (re)starts: its env.json reads, its training settings are the ones `asked` (see
    `check_training`; with `force` too: the re-run cells would sit beside the others), and a run with records has
    an env.json (else the package-version check that resuming relies on cannot be made): one line otherwise, unless
    `force` re-runs the cells."""
    from bench.results.store import load_results

    env = read_env(run_dir)
    if env is not None and asked is not None:
        assumed = defaults() if env.training is None and defaults is not None else asked
        check_training(run_dir, env, asked, assumed)
    if env is not None or force:
        return
    if recorded := len(load_results(run_dir).records):
        raise BenchError(
            f"{run_dir}: {recorded} record(s) but no {ENV_FILE}: the software they were measured with is unknown, "
            "so resuming cannot check it; start a new run, or re-run the cells with --force "
            f"({ENV_FILE} then describes this environment)"
        )


def run_cpu_features(run_dir: Path) -> tuple[CpuFeatures | None, str]:
    """The CPU features a run was measured with, and where they come from: its env.json, else a measurement after
    the run on a machine of its kind (CPU_FEATURES_AFTER_FILE), else none (`not recorded`)."""
    env = read_env(run_dir)
    if env is not None and env.cpu_features is not None:
        return env.cpu_features, ENV_FILE
    after = run_dir / CPU_FEATURES_AFTER_FILE
    if after.is_file():
        try:
            measured = MeasuredAfter.model_validate_json(after.read_text(encoding="utf-8"))
        except ValidationError as exc:
            raise BenchError(f"{after}: not valid CPU features ({exc.errors()[0]['msg']})") from None
        return measured.cpu_features, f"{CPU_FEATURES_AFTER_FILE}: measured {measured.measured_at} after the run"
    return None, "not recorded"


def write_env(run_dir: Path, env: EnvFingerprint) -> None:
    """Write env.json once; resuming a run checks that the software it measures with is still the same."""
    path = run_dir / ENV_FILE
    old = read_env(run_dir)
    if old is not None:
        if (old.lock_hash, old.packages) != (env.lock_hash, env.packages):
            raise BenchError(
                f"{path}: this run was measured with other package versions; start a new run instead of resuming"
            )
        return
    write_whole(path, redact(uncut(lambda: env.model_dump_json(indent=2))))
