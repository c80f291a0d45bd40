"""Cells side by side on disjoint core groups (the cpu-slots profile) against the same cells one at a time: the same
statuses, each cell's memory its own, records that say which cells shared the machine and on which cores, and a
cell that takes every device alone. Real runs of the tiny workload (about a minute on 2 cores)."""

import os
import subprocess
import sys
from pathlib import Path

from bench.results.store import load_results

CELLS = "one_adapter-none-single,two_models-none-single,two_adapters-none-single,one_adapter-none-ddp"
SINGLES = ("one_adapter-none-single", "two_models-none-single", "two_adapters-none-single")
MEMORY_TOLERANCE = 0.05
"""Same-cell repeats on one machine differ by a few MiB of a 600 MiB peak; a neighbour's memory counted in would
add hundreds."""


def run(results: Path, run_id: str, *extra: str) -> dict:
    argv = [sys.executable, "-m", "bench", "--results", str(results), "run", "--hw", "cpu-slots"]
    argv += ["--executor", "local", "--filter", CELLS, "--run-id", run_id, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=os.environ)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return load_results(results / "cpu-slots" / run_id).latest_by_cell()


def test_cells_side_by_side_keep_their_statuses_and_their_own_memory(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        raise AssertionError("the cpu-slots profile splits at least 2 cores; this machine kind has 2")
    alone = run(tmp_path, "alone", "--exclusive")
    beside = run(tmp_path, "beside")
    assert {c: r.status for c, r in beside.items()} == {c: r.status for c, r in alone.items()}
    assert all(r.shared_with == [] and r.devices is None for r in alone.values())
    for cell in SINGLES:
        record = beside[cell]
        assert record.devices is not None and record.devices.startswith("core ")  # one core group of two
        assert record.shared_with and set(record.shared_with) <= set(SINGLES) - {cell}
        mine, reference = record.metrics, alone[cell].metrics
        assert abs(mine.peak_bytes - reference.peak_bytes) <= MEMORY_TOLERANCE * reference.peak_bytes
        assert abs(mine.baseline_bytes - reference.baseline_bytes) <= MEMORY_TOLERANCE * reference.baseline_bytes
    # two ranks take both core groups: alone, after the cells that share the machine
    ddp = beside["one_adapter-none-ddp"]
    assert ddp.shared_with == [] and ddp.devices is not None and ddp.devices.startswith("cores ")
    assert ddp.started_at >= max(beside[c].finished_at for c in SINGLES)
