"""The runners on this machine, whatever their run, profile or results folder: each registers in one machine-wide
folder while it runs, so that a cell measured while another runner ran says so (`overlapped_by`: the machine was
shared, its figures are not the machine's alone), and a runner starting next to a live one names it.

An entry is a small JSON file (pid, run id, run folder, start) that its runner holds flock'd for as long as it runs
and touches every HEARTBEAT_S: a held entry is a live runner; an entry no one holds ended at its last change (a clean
end touches it one last time; a SIGKILLed runner's last heartbeat is at most HEARTBEAT_S before it died).
"""

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bench.results.schema import ResultRecord

RUNNERS_ENV = "BENCH_RUNNERS_DIR"
"""Where the entries are (default: `dpo-bench-runners` in the system's temporary folder)."""
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
    return Path(os.environ.get(RUNNERS_ENV) or Path(tempfile.gettempdir()) / "dpo-bench-runners")


def _held(path: Path) -> bool:
    """Whether a live process holds the entry's lock (its runner)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def seen(folder: Path | None = None) -> list[Seen]:
    """Every runner the folder knows, live or ended; entries ended FORGET_S ago are removed on the way."""
    folder = folder or runners_dir()
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            runner = RunnerEntry.model_validate_json(path.read_bytes())
            ended = None if _held(path) else path.stat().st_mtime
        except (OSError, ValidationError):
            continue
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
    Where the folder cannot be written the run goes on unregistered (nothing else depends on it)."""
    folder = runners_dir()
    runner = RunnerEntry(pid=os.getpid(), run_id=run_id, run_dir=str(run_dir.resolve()), started=time.time())
    path = folder / f"{runner.pid}-{time.time_ns()}.json"
    tmp = path.with_suffix(".tmp")
    fd = -1
    try:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o1777)  # every user's runners register here, as in /tmp
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
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
