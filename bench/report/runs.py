"""Which run of a hardware folder (results/<HW>/) a report shows."""

from pathlib import Path

from bench.errors import BenchError
from bench.results import RESULTS_FILE, load_results
from bench.results_schema import ResultRecord


def run_dirs(hardware_dir: Path) -> list[Path]:
    """Every run under hardware_dir, newest first (run ids sort by time)."""
    return sorted((p.parent for p in hardware_dir.glob(f"*/{RESULTS_FILE}")), reverse=True)


def run_is_complete(records: dict[str, ResultRecord], cell_ids: list[str]) -> bool:
    return all(cell_id in records for cell_id in cell_ids)


def latest_complete_run(hardware_dir: Path, cell_ids: list[str]) -> Path:
    for run_dir in run_dirs(hardware_dir):
        if run_is_complete(load_results(run_dir).latest_by_cell(), cell_ids):
            return run_dir
    raise BenchError(f"no complete run under {hardware_dir}; run `make bench` without FILTER first")
