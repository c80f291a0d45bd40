"""The runners on this machine, whatever their run, profile or results folder: each registers in one machine-wide
folder while it runs, so that a cell measured while another runner ran says so (`overlapped_by`), and a runner
starting next to a live one names it.

An entry is a small JSON file (pid, run id, run folder, start) that its runner holds flock'd and touches every
HEARTBEAT_S: a held entry is a live runner; an unheld one ended at its last change. The folder is the user's own
(created 0700; one another user owns or can write in is refused), and only the user's regular files are read, never
waited on: the registry sees the user's own runners, never another user's."""

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bench.errors import BenchError
from bench.results.schema import ResultRecord

RUNNERS_ENV = "BENCH_RUNNERS_DIR"
"""Where the entries are (default: `dpo-bench-runners-<uid>` in the system's temporary folder)."""
ENTRY_LIMIT = 64 << 10
"""Bytes read of an entry at most (one is about 150)."""
SCAN_S = 2.0
"""A reading of the folder passes over the entries still unread after this long: no run waits on the registry."""
HEARTBEAT_S = 5.0
FORGET_S = 2 * 24 * 3600.0
"""An entry whose runner ended this long ago is removed by whoever reads the folder."""


class RunnerEntry(BaseModel):
    """A runner's entry in the machine-wide folder."""

    pid: int
    run_id: str
    run_dir: str
    started: float
    """Epoch seconds."""


@dataclass(frozen=True)
class Seen:
    runner: RunnerEntry
    ended: float | None
    """Epoch seconds of its last sign of life; None while it runs."""


def runners_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"dpo-bench-runners-{os.getuid()}"
    return Path(os.environ.get(RUNNERS_ENV) or default)


def private_folder(folder: Path) -> None:
    """Make the registry folder (0700) unless it exists; BenchError, one line, when it is not a folder of this
    user's that no other user can write in (any user can plant a FIFO or a fake entry in such a folder)."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700, parents=True)
    found = os.lstat(folder)
    why = None
    if stat.S_ISLNK(found.st_mode):
        why = "a symbolic link"
    elif not stat.S_ISDIR(found.st_mode):
        why = "not a folder"
    elif found.st_uid != os.getuid():
        why = f"owned by uid {found.st_uid}, not by you (uid {os.getuid()})"
    elif found.st_mode & 0o022:
        why = f"other users can write in it (mode {stat.S_IMODE(found.st_mode):o})"
    if why:
        raise BenchError(
            f"runner registry {folder}: {why}; it must be a folder only you can write in: remove it or point "
            f"{RUNNERS_ENV} at another"
        )


def read_entry(path: Path) -> tuple[RunnerEntry, float | None] | None:
    """A runner's entry and when it ended (None: its runner holds it, it runs); None for anything but a regular file
    of this user's holding an entry. Never blocks: a FIFO opens at once and is passed over."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid() or found.st_size > ENTRY_LIMIT:
            return None
        runner = RunnerEntry.model_validate_json(os.read(fd, ENTRY_LIMIT))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return runner, None  # its live runner holds it
        return runner, found.st_mtime
    except (OSError, ValidationError):
        return None
    finally:
        os.close(fd)


def seen(folder: Path | None = None) -> list[Seen]:
    """Every runner the folder knows, live or ended; entries ended FORGET_S ago are removed on the way. Entries left
    unread after SCAN_S are passed over."""
    folder = folder or runners_dir()
    found = []
    deadline = time.monotonic() + SCAN_S
    for path in sorted(folder.glob("*.json")):
        if time.monotonic() > deadline:
            break
        if (read := read_entry(path)) is None:
            continue
        runner, ended = read
        if ended is not None and ended < time.time() - FORGET_S:
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        found.append(Seen(runner, ended))
    return found


def _others(entries: list[Seen]) -> list[Seen]:
    return [s for s in entries if s.runner.pid != os.getpid()]


def overlapping(start: float, end: float) -> list[str]:
    """The run ids of the other runners that ran at some moment between `start` and `end` (epoch seconds)."""
    now = time.time()
    ids = [
        s.runner.run_id
        for s in _others(seen())
        if s.runner.started <= end and (now if s.ended is None else s.ended) >= start
    ]
    return sorted(set(ids))


def with_overlap(record: ResultRecord, start: float, end: float) -> ResultRecord:
    """The record, marked with the runs that shared the machine while its cell ran (`start`..`end`)."""
    ids = overlapping(start, end)
    return record.model_copy(update={"overlapped_by": ids}) if ids else record


def sharing_notices(others: list[RunnerEntry]) -> list[str]:
    """What a runner says when it starts next to live ones."""
    return [
        f"notice: run {o.run_id} (runner {o.pid}, {o.run_dir}) is running on this machine too: the cells measured "
        "while it runs are marked overlapped_by, and compare leaves them out of its verdicts"
        for o in others
    ]


def _heartbeat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(OSError):
            os.utime(path)


@contextlib.contextmanager
def registered(run_id: str, run_dir: Path) -> Iterator[list[RunnerEntry]]:
    """This process, registered as the runner of `run_id` until the block ends; yields the other runners live now.
    Where the folder cannot be made or written the run goes on unregistered (nothing else depends on it); a folder
    another user owns or can write in is refused (BenchError)."""
    folder = runners_dir()
    runner = RunnerEntry(pid=os.getpid(), run_id=run_id, run_dir=str(run_dir.resolve()), started=time.time())
    path = folder / f"{runner.pid}-{time.time_ns()}.json"
    tmp = path.with_suffix(".tmp")
    fd = -1
    try:
        private_folder(folder)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.write(fd, runner.model_dump_json().encode())
        fcntl.flock(fd, fcntl.LOCK_EX)  # held before it is visible: an entry in the folder is never read as ended
        tmp.replace(path)
    except OSError:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        yield []
        return
    stop = threading.Event()
    thread = threading.Thread(target=_heartbeat, args=(path, stop), name="runner-heartbeat", daemon=True)
    thread.start()
    try:
        yield [s.runner for s in _others(seen(folder)) if s.ended is None]
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            os.utime(path)  # when it ended
        os.close(fd)
