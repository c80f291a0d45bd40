"""DeepSpeed's host ops (DeepSpeedCPUAdam, the CPU all-reduce) built before the first timed cell.

DeepSpeed JIT-builds an op at its first use: inside a timed cell the build (a minute or more) would count as the
cell's training, into whatever folder the cell finds. `make setup` builds them into the venv's extensions folder;
a run builds whatever is still missing there before its first DeepSpeed cell starts (a no-op when setup did it),
with the same script the images use (docker/cpu/prebuild_deepspeed_ops.py).
"""

import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.paths import IN_CHECKOUT, PACKAGE_DIR, PACKAGED_HOST_OPS, PROJECT_ROOT

SCRIPT = (
    PROJECT_ROOT / "docker" / "cpu" if IN_CHECKOUT else PACKAGE_DIR / PACKAGED_HOST_OPS
) / "prebuild_deepspeed_ops.py"
"""The checkout's script, or a wheel's copy of it (setup.py)."""


def needs_host_ops(cells: Iterable[Cell]) -> bool:
    return any(backend_spec(cell.backend).deepspeed is not None for cell in cells)


def start_build(python: str, extensions_dir: str, log: Path) -> subprocess.Popen:
    """The build as a background process writing to `log`."""
    env = os.environ | {"TORCH_EXTENSIONS_DIR": extensions_dir}
    with log.open("wb") as out:
        return subprocess.Popen([python, str(SCRIPT)], env=env, stdout=out, stderr=subprocess.STDOUT)


def ensure_built(python: str, extensions_dir: str, log: Path) -> str:
    """Build what is missing and wait; one line saying how it went (a failed build is the cells' to report)."""
    started = time.monotonic()
    code = start_build(python, extensions_dir, log).wait()
    took = time.monotonic() - started
    if code != 0:
        return f"warning: DeepSpeed's host ops did not build (exit {code}, {log}); the DeepSpeed cells will say why"
    return f"DeepSpeed's host ops ready in {extensions_dir} ({took:.0f} s)"
