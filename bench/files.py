"""Writing the suite's own files: whole (a reader sees the old content or the new one, never a torn file), never
through a symbolic link, and leaving nothing behind when a write fails.

A link where the suite writes a file whole, or a folder of its own, is replaced (a rename replaces the link, not its
target); a file the suite appends to or holds open (results.jsonl, run.lock) is opened with O_NOFOLLOW and a link
there is refused: its target may hold what the link's owner meant to keep.
"""

import contextlib
import errno
import os
import threading
from pathlib import Path

NOT_THROUGH_LINKS = "a symbolic link; the suite writes through none"
"""The reason a file opened for writing is refused when it is a link."""
TEMPORARY = ".tmp"
"""How the name of a file being written whole ends, before its writer's pid and thread."""


def being_written(path: Path) -> bool:
    """Whether `path` is a temporary of write_whole_bytes: a file that is not yet whole."""
    return path.suffix.startswith(TEMPORARY)


def write_whole(path: Path, text: str) -> None:
    """`text` into `path`, UTF-8, as write_whole_bytes writes."""
    write_whole_bytes(path, text.encode("utf-8"))


def write_whole_bytes(path: Path, data: bytes) -> None:
    """`data` into `path` through a temporary file beside it and a rename (atomic within a filesystem): a link at
    `path` is replaced, its target untouched. The temporary name (TEMPORARY) carries the writer's pid and thread, so
    writers of the same path never share one; it matches no `*.json` glob, is created new (never through a link
    planted there) and is removed when the write fails (a full disk)."""
    tmp = path.with_name(f"{path.name}{TEMPORARY}{os.getpid()}-{threading.get_native_id()}")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # what a dead writer of the same pid left
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            _write_all(fd, data)
        except OSError as exc:  # os.write names no file: say which one could not be written
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_own(path: Path, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags)` that never follows a link at `path`: one there is an OSError (ELOOP) whose reason says
    so (NOT_THROUGH_LINKS)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and path.is_symlink()):
            raise OSError(errno.ELOOP, NOT_THROUGH_LINKS, str(path)) from None
        raise


def without_link(path: Path) -> Path:
    """`path` with a link there removed (its target untouched), so that what opens it for writing next creates a
    file of its own: a log the launcher's output goes into."""
    if path.is_symlink():
        path.unlink()
    return path


def own_folder(path: Path, inside: Path) -> Path:
    """`path` (below `inside`) as a folder of its own: missing folders made, a link on the way below `inside`
    replaced by a folder (its target untouched). `inside` itself may be a link: a run folder moved to another disk
    and linked back."""
    if not path.is_relative_to(inside):
        raise ValueError(f"{path} is not inside {inside}")
    inside.mkdir(parents=True, exist_ok=True)
    folder = inside
    for part in path.relative_to(inside).parts:
        folder = without_link(folder / part)
        folder.mkdir(exist_ok=True)
    return path
