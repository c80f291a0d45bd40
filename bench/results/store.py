"""Result storage: append-only results.jsonl (one atomic line per cell) and loading it back.

A crash or a full disk mid-write can leave the file's last line cut short, without its newline. Appending after it
would glue the next record onto it, and both would be lost; so before every append (and when a run resumes) a torn
tail is moved aside to `results.jsonl.<byte offset>.torn`, and the file ends with a newline again.
"""

import contextlib
import datetime as dt
import errno
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from bench.errors import BenchError
from bench.files import open_own
from bench.results.layout import RESULTS_FILE
from bench.results.schema import ResultRecord

TORN_SUFFIX = ".torn"
RECORD_START = ('{"' + next(iter(ResultRecord.model_fields)) + '":').encode()
"""How every record's line begins (its first field): where a torn record glued to the next one is cut apart."""
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_MESSAGES = tuple(os.strerror(code) for code in DISK_FULL_ERRNOS)


class DiskFull(BenchError):
    """The results folder's file system is full (or over quota): nothing more can be recorded until space is freed."""


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")


def _is_record(data: bytes) -> bool:
    try:
        ResultRecord.model_validate_json(data)
    except ValidationError:
        return False
    return True


def _last_line_start(fd: int, size: int, chunk: int = 65536) -> int:
    """The offset just after the file's last newline; 0 when it has none."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written != len(data):
        raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)")


def _set_aside(path: Path, offset: int, data: bytes) -> Path:
    """Write `data` to a new `<path>.<offset>[.N].torn` and fsync it; returns its path."""
    for number in range(1, 1000):
        torn = path.with_name(f"{path.name}.{offset}{f'.{number}' if number > 1 else ''}{TORN_SUFFIX}")
        try:
            fd = os.open(torn, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                torn.unlink()
            raise
        os.close(fd)
        return torn
    raise OSError(errno.EEXIST, f"{path.name}.{offset}.*{TORN_SUFFIX}: too many torn tails at this offset")


def _mend_tail(fd: int, path: Path) -> str | None:
    """Make the file end with a newline: a last line that is a whole record gets its newline; anything else after
    the last newline is moved aside (first written to its .torn file, then cut off: a crash in between loses
    nothing). Returns the one-line notice, None when the file was whole. `fd` is open O_RDWR | O_APPEND."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start = _last_line_start(fd, size)
    tail = os.pread(fd, size - start, start)
    if _is_record(tail):  # e.g. a CRLF line cut between its \r and \n: the record is whole
        _write_all(fd, b"\n")
        os.fsync(fd)
        return f"{path}: the last record had no newline; added one"
    torn = _set_aside(path, start, tail)
    os.ftruncate(fd, start)
    os.fsync(fd)
    return f"{path}: torn last line ({len(tail)} bytes at byte {start}, no newline) moved to {torn.name}"


def _store_error(what: str, path: Path, exc: OSError) -> BenchError:
    kind = DiskFull if exc.errno in DISK_FULL_ERRNOS else BenchError
    return kind(f"could not {what} {path}: {exc.strerror or exc}")


def mend_results(run_dir: Path) -> str | None:
    """Move a torn last line of the run's results file aside (see `_mend_tail`); the notice, or None."""
    path = run_dir / RESULTS_FILE
    try:
        fd = open_own(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _store_error("open", path, exc) from None
    try:
        return _mend_tail(fd, path)
    except OSError as exc:
        raise _store_error("mend the torn last line of", path, exc) from None
    finally:
        os.close(fd)


def append_result(run_dir: Path, record: ResultRecord) -> None:
    """One line, one write, fsync'd, after a newline: a torn last line is moved aside first (a warning on stderr).
    A failed or short write (disk full: DiskFull) is cut back off, so the file keeps exactly its earlier lines."""
    line = (record.model_dump_json() + "\n").encode()
    path = run_dir / RESULTS_FILE
    try:
        fd = open_own(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            notice = _mend_tail(fd, path)
            if notice:
                print(f"warning: {notice}", file=sys.stderr, flush=True)
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
    except OSError as exc:
        raise _store_error(f"append the result of {record.cell_id} to", path, exc) from None


@dataclass
class LoadedResults:
    records: list[ResultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def latest_by_cell(self) -> dict[str, ResultRecord]:
        latest: dict[str, ResultRecord] = {}
        for record in self.records:
            latest[record.cell_id] = record
        return latest


def _pieces(line: bytes) -> list[bytes]:
    """A line cut before each record start after the first: a torn record and the record glued to it (files
    written before torn tails were mended) come apart; a record is never read as part of another."""
    cuts = [0]
    while (found := line.find(RECORD_START, cuts[-1] + 1)) > 0:
        cuts.append(found)
    return [line[a:b] for a, b in zip(cuts, [*cuts[1:], len(line)], strict=True)]


_reported: set[str] = set()
"""Problems this process has warned about: a file read by several reports is warned about once."""


def report_problems(problems: list[str], out=None) -> None:
    """Each problem not yet reported by this process, as a `warning:` line on `out` (default stderr)."""
    for problem in problems:
        if problem not in _reported:
            _reported.add(problem)
            print(f"warning: {problem}", file=out or sys.stderr, flush=True)


def what_failed(exc: ValidationError) -> str:
    """`status: Input should be ...`: the first field that failed and why, in one line."""
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "json_invalid":
        what = "invalid JSON: " + first["msg"].removeprefix("Invalid JSON: ")
    else:
        what = f"{'.'.join(str(part) for part in first['loc']) or 'top level'}: {first['msg']}"
    more = f"; {len(errors) - 1} more field(s)" if len(errors) > 1 else ""
    return " ".join((what + more).split())


def load_results(path: Path, quiet: bool = False) -> LoadedResults:
    """Every valid record of a results file; each bad line (or torn piece of one) becomes a problem naming file, line
    and the field that failed, warned about on stderr (once per process) unless `quiet`."""
    loaded = _load(path)
    if not quiet:
        report_problems(loaded.problems)
    return loaded


def _load(path: Path) -> LoadedResults:
    loaded = LoadedResults()
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        return loaded
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                loaded.records.append(ResultRecord.model_validate_json(line))
                continue
            except ValidationError as exc:
                first = what_failed(exc)
            pieces = _pieces(line)
            for piece in pieces if len(pieces) > 1 else []:
                try:
                    loaded.records.append(ResultRecord.model_validate_json(piece))
                except ValidationError:
                    loaded.problems.append(f"{path}:{number}: torn record ({len(piece)} bytes) before the next one")
            if len(pieces) == 1:
                loaded.problems.append(f"{path}:{number}: unreadable result line ({first})")
    return loaded
