"""One runner per run: `<run>/run.lock`, held with flock(2) for as long as a runner works on the run, names its pid.

The kernel drops the lock when the runner's process ends, however it ends: a lock left by a runner that was killed
is simply taken over. A runner that ends normally empties the file, so a pid found in it when the lock is taken
names a runner that died holding the run. The file is never removed (removing a lock file lets two runners lock two
different files).
"""

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.files import open_own

LOCK_FILE = "run.lock"


class RunBusy(BenchError):
    """Another runner holds the run."""


@dataclass
class RunLock:
    path: Path
    fd: int
    dead_holder: int | None
    """The pid of the runner that held the run before and died without releasing it; None after a clean end."""

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)  # closing the last descriptor drops the lock
        self.fd = -1


def _holder(fd: int) -> int | None:
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


def _open(run_dir: Path) -> tuple[Path, int]:
    path = run_dir / LOCK_FILE
    try:
        return path, open_own(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BenchError(f"cannot open the run's lock file {path}: {exc.strerror}") from None


def lock_run(run_dir: Path) -> RunLock:
    """Hold the run (the folder must exist) for this process; RunBusy, one line naming the holder's pid, when
    another runner holds it."""
    path, fd = _open(run_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        who = f"pid {holder}" if holder else "another runner"
        raise RunBusy(
            f"run {run_dir.name} is already being run by {who} (lock {path}): wait for it to end, or stop it first"
        ) from None
    dead = _holder(fd)
    os.ftruncate(fd, 0)
    # The pid only names the holder; the flock is the lock. On a full disk the run goes on, to say what it keeps.
    with contextlib.suppress(OSError):
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunLock(path, fd, dead if dead != os.getpid() else None)


@contextlib.contextmanager
def runner_gone(run_dir: Path) -> Iterator[bool]:
    """True (the run's lock held meanwhile) when no runner holds the run, False when one does."""
    _, fd = _open(run_dir)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def died_holding(run_dir: Path) -> Iterator[int | None]:
    """The pid of the runner that died holding the run (its pid is still in the lock file and no one holds the lock),
    the run's lock held meanwhile; None when the run ended cleanly, never ran here, or a runner holds it now."""
    try:
        fd = open_own(run_dir / LOCK_FILE, os.O_RDWR)
    except OSError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield _holder(fd)
    finally:
        os.close(fd)
