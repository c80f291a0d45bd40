"""Result storage: append-only results.jsonl (one atomic line per cell) and loading it back."""

import contextlib
import datetime as dt
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from bench.errors import BenchError
from bench.results.layout import RESULTS_FILE
from bench.results.schema import ResultRecord



def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")


def append_result(run_dir: Path, record: ResultRecord) -> None:
    """One line, one write, fsync'd. A failed or short write (disk full) is cut back off, so the file keeps
    exactly its earlier lines."""
    line = (record.model_dump_json() + "\n").encode()
    path = run_dir / RESULTS_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
    except OSError as exc:
        raise BenchError(f"could not append the result of {record.cell_id} to {path}: {exc.strerror or exc}") from None


@dataclass
class LoadedResults:
    records: list[ResultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def latest_by_cell(self) -> dict[str, ResultRecord]:
        latest: dict[str, ResultRecord] = {}
        for record in self.records:
            latest[record.cell_id] = record
        return latest


def load_results(path: Path) -> LoadedResults:
    """Every valid line of a results file; each bad line becomes a problem naming file and line."""
    loaded = LoadedResults()
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        return loaded
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                loaded.records.append(ResultRecord.model_validate_json(line))
            except ValidationError as exc:
                first = str(exc).splitlines()[0]
                loaded.problems.append(f"{path}:{number}: unreadable result line ({first})")
    return loaded
