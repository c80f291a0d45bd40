"""Which run of a hardware folder (results/<HW>/) a report shows, and which matrix rows a run is held to."""

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.errors import BenchError
from bench.results.env import read_env
from bench.results.schema import ResultRecord
from bench.results.store import load_results
from bench.results.layout import RESULTS_FILE

_UNKNOWN_START = dt.datetime.min.replace(tzinfo=dt.UTC)


def run_dirs(hardware_dir: Path) -> list[Path]:
    """Every run under hardware_dir, newest first, by when it started (env.json), then by run id. A run named with
    --run-id sorts by its start, not by its name: `recipes` is not newer than every timestamped run."""
    runs = [p.parent for p in hardware_dir.glob(f"*/{RESULTS_FILE}")]
    return sorted(runs, key=lambda run: (run_started(run) or _UNKNOWN_START, run.name), reverse=True)


def run_is_complete(records: dict[str, ResultRecord], cell_ids: list[str]) -> bool:
    return all(cell_id in records for cell_id in cell_ids)


def run_started(run_dir: Path) -> dt.datetime | None:
    """When the run started (env.json `created_at`), None when unknown."""
    env = read_env(run_dir)
    if env is None or not env.created_at:
        return None
    try:
        started = dt.datetime.fromisoformat(env.created_at)
    except ValueError:
        return None
    return started if started.tzinfo else started.replace(tzinfo=dt.UTC)


def rows_for_run(cell_ids: list[str], added: Mapping[str, dt.datetime], started: dt.datetime | None) -> list[str]:
    """The matrix rows a run is held to: a row added after the run started is not (it shows as not run yet).
    A run of unknown start is held to every row. Pure."""
    if started is None:
        return list(cell_ids)
    return [c for c in cell_ids if c not in added or added[c] <= started]


def latest_complete_run(
    hardware_dir: Path, cell_ids: list[str], added: Mapping[str, dt.datetime] | None = None
) -> Path:
    """The newest run that covers every row of the matrix that existed when it started (`added`: cell id -> when
    its row joined the matrix, scenario.rows_added)."""
    for run_dir in run_dirs(hardware_dir):
        required = rows_for_run(cell_ids, added or {}, run_started(run_dir))
        if run_is_complete(load_results(run_dir).latest_by_cell(), required):
            return run_dir
    raise BenchError(f"no complete run under {hardware_dir}; run `make bench` without FILTER first")


def later_records(run_dir: Path, cell_ids: Sequence[str]) -> dict[Path, list[ResultRecord]]:
    """Rows `run_dir` has no record of (they joined the matrix after it started), measured by a later run of the same
    hardware folder: each cell's trials from the newest run that has it, grouped by that run."""
    started = run_started(run_dir) or _UNKNOWN_START
    wanted, found = set(cell_ids), {}
    for later in run_dirs(run_dir.parent):
        if later == run_dir or (run_started(later) or _UNKNOWN_START) < started or not wanted:
            continue
        by_cell = load_results(later).records
        here = {r.cell_id for r in by_cell} & wanted
        if here:
            found[later] = [r for r in by_cell if r.cell_id in here]
            wanted -= here
    return found
