"""Shared-memory segments that DeepSpeed's CPU allreduce leaves in /dev/shm.

deepspeed/ops/csrc/cpu/comm/shm.cpp creates one segment per rank, named
`deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>`, and never unlinks it: every
multi-rank DeepSpeed cell on CPU would leave about 66 MiB per rank in RAM-backed /dev/shm until reboot.
The worker removes its cell's segments after the final barrier (every rank has mapped them by then, and a
mapping outlives the name); the local executor removes whatever a crashed cell left under its port.
"""

import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "deepspeed_allreduce_buffer"
CREATE_FAILED = re.compile(rf"shared_create {PREFIX}\S* failed")
"""What shm.cpp prints when it cannot make a rank's segment (an unwritable or full /dev/shm); the rank then waits
forever for the segment to appear (shm_interface.cpp polls shared_open while it is missing)."""


def buffer_needed(device: str, launcher: str, world: int) -> bool:
    """Whether a cell's ranks make the segments: DeepSpeed's CPU allreduce, several ranks, all local by the launcher's
    LOCAL_SIZE, which only the `deepspeed` launcher sets (bench/estimate/terms.py charges their memory)."""
    return device == "cpu" and launcher == "deepspeed" and world > 1


def create_failure(log: str) -> str | None:
    """The line of a log where a rank could not make its segment, or None."""
    found = CREATE_FAILED.search(log)
    return found.group(0) if found else None


def segments(addr: str, port: str | int, uid: int | None = None, shm_dir: Path = SHM_DIR) -> list[Path]:
    """The segments of the process group that rendezvoused at addr:port, for every rank."""
    uid = os.getuid() if uid is None else uid
    stem = f"{PREFIX}_{uid}_{addr}_{port}_"
    if not shm_dir.is_dir():
        return []
    return sorted(p for p in shm_dir.iterdir() if p.name.startswith(stem) and p.name[len(stem) :].isdigit())


def remove_segments(addr: str, port: str | int, uid: int | None = None, shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink them; returns the names removed (a peer may unlink the same ones at the same time)."""
    removed = []
    for path in segments(addr, port, uid, shm_dir):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed


def remove_group_segments(env: Mapping[str, str], shm_dir: Path = SHM_DIR) -> list[str]:
    """Those of the process group whose rendezvous `env` names (MASTER_ADDR/MASTER_PORT); none without one."""
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        return []
    return remove_segments(env["MASTER_ADDR"], env["MASTER_PORT"], shm_dir=shm_dir)
