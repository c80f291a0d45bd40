"""A fork server's folder (bench/isolation/fork_server_process.py: its socket, its client, its children's entries) as
runners share the system's temporary folder: made 0700 by the runner, flock'd by it for as long as its server runs, and
naming it in OWNER. A folder whose lock no one holds was left behind by a runner that died (SIGKILL, a crash); the next
run removes it (bench/run/leftovers.py), never one a live runner holds."""

import contextlib
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

FOLDER_PREFIX = "dpo-bench-fork-server-"
"""A server's folder in the system's temporary folder: short, as a socket's path has at most 107 bytes."""
OWNER = "runner"
"""The file in a server's folder naming the runner that holds the folder's lock."""
UNNAMED_GRACE_S = 60.0
"""A folder that names no runner (it is being made, or a runner made it before they named themselves) is another's
for this long after its last change."""


def claim_folder(parent: Path | None = None) -> tuple[Path, int]:
    """A new server folder (0700, this user's) and a descriptor that holds it flock'd until it is closed; OWNER
    names this process, written once the lock is held, so that a folder naming a runner and held by no one is one
    that runner left behind."""
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    (folder / OWNER).write_text(str(os.getpid()))
    return folder, fd


def _owner(folder_fd: int) -> int | None:
    """The pid the folder's OWNER names; None where it names none."""
    try:
        fd = os.open(OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return None
    try:
        return int(os.read(fd, 32)) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def left_behind(folder: Path) -> Iterator[int | None]:
    """Whether `folder` is a server folder of this user's that no runner holds, for the block (its lock is held
    meanwhile, so no runner takes it): the pid of the runner that left it, 0 for a folder that names none and has not
    changed for UNNAMED_GRACE_S; None for a live runner's, a folder being made, or anything else."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        found = os.fstat(fd)
        runner = None
        if found.st_uid == os.getuid() and _lock_free(fd):
            runner = _owner(fd)
            if runner is None and time.time() - found.st_mtime > UNNAMED_GRACE_S:
                runner = 0
        yield runner
    finally:
        os.close(fd)


def _lock_free(fd: int) -> bool:
    """Take the folder's lock unless its runner holds it (held until `fd` is closed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
