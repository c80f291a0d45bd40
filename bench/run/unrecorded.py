"""A finished cell whose record cannot be appended to the run's results.jsonl (a full, read-only or immutable results
folder): the measurement is not thrown away. The record is kept in a file of its own outside the results folder, and
the error that stops the run says where it is and how to put it back or resume."""

import tempfile
import time
from pathlib import Path

from bench.errors import BenchError
from bench.files import write_whole
from bench.results.layout import RESULTS_FILE, trial_key
from bench.results.schema import ResultRecord
from bench.results.store import DiskFull, append_result

KEPT_FOLDER = "dpo-bench-unrecorded"
"""Under the system's temporary folder (TMPDIR): not the results folder, which just failed."""


class Unrecorded(BenchError):
    """A finished cell's record could not be appended (other than for a full disk: DiskFull)."""


def keep_record(run_dir: Path, record: ResultRecord) -> Path | None:
    """Write the record, as its results.jsonl line, to a file of its own outside the results folder; None when that
    fails too."""
    folder = Path(tempfile.gettempdir()) / KEPT_FOLDER
    name = f"{run_dir.parent.name}-{record.run_id}-{trial_key(record.cell_id, record.trial)}-{time.time_ns()}.jsonl"
    try:
        folder.mkdir(exist_ok=True)
        write_whole(folder / name, record.model_dump_json() + "\n")
    except OSError:
        return None
    return folder / name


def append_or_keep(run_dir: Path, record: ResultRecord) -> None:
    """Append the record; when it cannot be, keep it (keep_record) and raise DiskFull or Unrecorded naming where."""
    try:
        append_result(run_dir, record)
    except BenchError as exc:
        kept = keep_record(run_dir, record)
        results = run_dir / RESULTS_FILE
        where = (
            f"its record is kept in {kept} (to record it once {RESULTS_FILE} can be written: cat {kept} >> {results})"
            if kept
            else "its record could not be kept elsewhere either"
        )
        raise (DiskFull if isinstance(exc, DiskFull) else Unrecorded)(f"{exc}; {where}") from None
