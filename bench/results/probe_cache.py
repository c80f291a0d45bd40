"""The CPU probe's output kept per machine and interpreter (bench/results/cpu_features.py): the probe imports torch and
bitsandbytes and runs a training step of each quantization, about 12 s on 2 cores, and its answer is the same for
every run of one interpreter on one machine. Kept under the build folder, keyed by everything the answer depends on:
the CPU (model and flags), the kernel release, the interpreter and the versions of the libraries the probe asks, the
oneDNN/MKL variables set and the probe's own code. Only an answer from this process's own interpreter is kept: another
interpreter's libraries cannot be listed without starting it. A key that matches nothing, or an unreadable file,
probes again."""

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from bench.paths import BUILD_DIR

PROBE_CACHE_DIR = BUILD_DIR / "cpu-probe"
PROBED_PACKAGES = ("torch", "bitsandbytes", "intel-extension-for-pytorch", "transformers", "peft")
"""The distributions whose version decides the probe's answer (what it imports and dispatches)."""


def probe_key(python: str, cpuinfo: str, library_env: dict[str, str]) -> str | None:
    """The cache key of a probe of `python` on this machine; None where it cannot be kept (another interpreter)."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):  # not realpath: venvs share a base binary
        return None
    cpu = [ln for ln in cpuinfo.splitlines() if ln.startswith(("model name", "flags", "cpu family", "model\t"))][:4]
    probe = Path(__file__).with_name("cpu_probe.py")
    parts = {
        "python": [os.path.realpath(sys.executable), sys.prefix, sys.version],
        "packages": {name: _version(name) for name in PROBED_PACKAGES},
        "cpu": cpu,
        "kernel": platform.release(),
        "env": library_env,
        "probe": hashlib.sha256(probe.read_bytes()).hexdigest() if probe.is_file() else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def kept_output(key: str) -> tuple[str, str] | None:
    """(stdout, probed_at) of the probe kept under `key`; None where none is or it cannot be read."""
    try:
        kept = json.loads((PROBE_CACHE_DIR / f"{key}.json").read_text(encoding="utf-8"))
        return str(kept["stdout"]), str(kept["probed_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_output(key: str, stdout: str, probed_at: str) -> None:
    """Keep a successful probe's stdout under `key` (written whole, then renamed); a folder that cannot be written
    keeps nothing."""
    try:
        PROBE_CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = PROBE_CACHE_DIR / f".{key}.{os.getpid()}.tmp"
        partial.write_text(json.dumps({"stdout": stdout, "probed_at": probed_at}), encoding="utf-8")
        partial.replace(PROBE_CACHE_DIR / f"{key}.json")
    except OSError:
        return
