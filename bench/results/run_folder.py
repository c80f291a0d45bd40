"""A runner's hold on its run folder, results/<HW>/<run-id>/: made and checked writable before any process starts
(one line naming the folder and what to do when it cannot be), locked for one runner (bench/results/lock.py), and
removed again when the runner leaves nothing in a folder it made (rejected input, an error before the first cell).
"""

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from bench.errors import BenchError
from bench.files import open_own
from bench.results.layout import ENV_FILE, FORK_SERVER_LOG, HOST_OPS_LOG
from bench.results.lock import LOCK_FILE, RunLock, lock_run

NOTHING_RECORDED = frozenset({LOCK_FILE, ENV_FILE, FORK_SERVER_LOG, HOST_OPS_LOG})
"""What the folder of a run that ended before its first cell holds (paths inside it)."""


def what_to_do(code: int | None) -> str:
    """The advice after a file-system error in the results folder."""
    if code == errno.EROFS:
        return "choose a writable results folder with --results"
    if code in (errno.EACCES, errno.EPERM):
        return "make it writable (chmod u+w, chattr -i), or choose another results folder with --results"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "free space, or choose another results folder with --results"
    return "choose another results folder with --results"


def folder_error(what: str, path: Path, exc: OSError) -> BenchError:
    return BenchError(f"{what} {path}: {exc.strerror or exc}; {what_to_do(exc.errno)}")


def _not_a_folder(results: Path, run_dir: Path) -> Path | None:
    """The first path from `results` down to `run_dir` (inside it) that exists and is not a folder; None if none."""
    path = results
    for part in ("", *run_dir.relative_to(results).parts):
        path = path / part if part else path
        if not path.exists():
            return None
        if not path.is_dir():
            return path
    return None


def _missing_folders(run_dir: Path) -> list[Path]:
    """`run_dir` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (run_dir, *run_dir.parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def check_writable(run_dir: Path) -> None:
    """Create, write and remove a file in the folder: an immutable or read-only folder fails here, not after a cell's
    launcher has started."""
    probe = run_dir / f".write-check.{os.getpid()}"
    try:
        fd = open_own(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"ok\n")
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise folder_error("cannot write in the run folder", run_dir, exc) from None


def _remove_if_unused(made: list[Path]) -> None:
    """Remove the folders this runner made when nothing was recorded in them (deepest first, empty ones only)."""
    run_dir = made[0]
    with contextlib.suppress(OSError):
        inside = sorted(run_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True)
        files = [p for p in inside if not p.is_dir()]
        if any(p.relative_to(run_dir).as_posix() not in NOTHING_RECORDED for p in files):
            return
        for path in files:
            path.unlink()
        for folder in [p for p in inside if p.is_dir()] + made:
            folder.rmdir()


@contextlib.contextmanager
def open_run(results: Path, run_dir: Path) -> Iterator[RunLock]:
    """Hold `run_dir` (under the results folder `results`) for this runner: one line when the folder cannot be made
    or written, or another runner holds it; a folder made here that holds nothing recorded at the end is removed."""
    if (blocker := _not_a_folder(results, run_dir)) is not None:
        where = "" if blocker == results else f" ({blocker} is a file)"
        raise BenchError(f"--results {results}: not a folder{where}; point --results at a folder")
    made = _missing_folders(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise folder_error("cannot create the run folder", run_dir, exc) from None
    lock = None
    try:
        check_writable(run_dir)
        lock = lock_run(run_dir)  # one line naming the other runner's pid when one is running this run
        yield lock
    finally:
        if made:
            _remove_if_unused(made)
        if lock is not None:
            lock.release()
