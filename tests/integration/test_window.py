"""The window (`python -m bench window`, bench/run/window.py) rehearsed end to end on a CPU profile: the real
command on cpu-budget, its phases' `bench run`s side by side in the host memory's slots (the same scheduler, ledger
and priorities as on a card), each cell's ranks capped by their memory cgroups, small workloads; then what it wrote
under its folder read back, and held against the same cells run one at a time (`--exclusive`). Real runs (about
10 minutes on 2 cores: a 20-minute window, which ends once its phases have; root and the cgroup v1 memory
controller, as this machine kind has)."""

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.results.schema import Status
from bench.results.store import load_results
from bench.run.window_bundle import unpack
from bench.run.window_spec import REHEARSAL
from bench.units import MiB

pytestmark = pytest.mark.long

PROFILE = "cpu-budget"
PEAK_TOLERANCE = 0.05
"""A cell's RSS peak (each rank's) in the window and alone: repeats differ by a few MiB; a neighbour counted in would
add hundreds (tests/integration/test_gpu_slots.py). The kernel's cgroup peak is printed, not held: it counts the
libraries' pages the cgroup read first, so it depends on which cell of the machine read them first (the sft cell:
139.8 MB first in the window, 110.5 MB alone after two others of its run)."""


def bench(results: Path, *argv: str, runners: Path, timeout: float = 1800) -> str:
    """`python -m bench` with its own runners folder (the module's: the autouse one is per test)."""
    env = os.environ | {"BENCH_RUNNERS_DIR": str(runners)}
    done = subprocess.run([sys.executable, "-m", "bench", "--results", str(results), *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> dict:
    """The window on cpu-budget, and the same cells alone, one run per workload."""
    root = tmp_path_factory.mktemp("window")
    out, runners, bundle = root / "out", root / "runners", root / "bundle"
    printed = bench(root, "window", "--hw", PROFILE, "--minutes", "20", "--out", str(out), "--run-id", "w",
                    "--bundle", str(bundle), runners=runners)  # fmt: skip
    alone = root / "alone"
    second, (small, shared, by_itself) = REHEARSAL["second"], REHEARSAL["seven_b"]
    tiny = (*REHEARSAL["dpo"], *REHEARSAL["methods"], *REHEARSAL["methods_rest"])
    for workload, cells in ((REHEARSAL["workload"], tiny), second, (small, (*shared, *by_itself))):
        bench(alone, "run", "--hw", PROFILE, "--workload", workload, "--method", "all", "--filter", ",".join(cells),
              "--run-id", workload, "--exclusive", "--executor", "local", runners=runners)  # fmt: skip
    return {"out": out, "printed": printed, "alone": alone, "bundle": bundle}


def records(folder: Path) -> dict[str, list]:
    """Run id -> its records, of every run under a results folder's profile."""
    return {run.name: load_results(run).records for run in sorted((folder / PROFILE).iterdir()) if run.is_dir()}


def test_the_plan_comes_first_and_every_run_is_written_under_the_folder(rehearsal):
    out = rehearsal["out"]
    planned = json.loads((out / "plan.json").read_text())
    printed = rehearsal["printed"]
    assert printed.index("PREDICTED") < printed.index("[dpo]")  # the plan is printed before any phase runs
    assert [row["name"] for row in planned["phases"]] == [
        "dpo", "methods", f"emulated:{PROFILE}", "7b", "7b-alone", "speed", "methods-rest"
    ]  # fmt: skip
    for run in ("w", "w-methods", "w-emulated", "w-small"):
        folder = out / "results" / PROFILE / run
        assert {"env.json", "results.jsonl", "MATRIX.md"} <= {p.name for p in folder.iterdir()}, run
    assert (out / "window.log").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    print(json.dumps(summary, indent=1))
    for row in summary["phases"]:
        # the plan's logic held: every cell of a generous window ran, the slow end never promised more than ran
        assert row["ran"] == row["planned"] and row["predicted_cells"]["slow"] <= row["ran"], row
        assert row["predicted_cells"]["fast"] == row["planned"], row
        assert row["statuses"] == {"ok": row["planned"]}, row


def test_the_bundle_holds_every_run_in_a_few_flat_files(rehearsal, tmp_path):
    """What a device tool that returns 8 flat files of 16 MiB brings back of the window: every run's records."""
    out, bundle = rehearsal["out"], rehearsal["bundle"]
    files = sorted(bundle.iterdir())
    assert len(files) <= 8 and all(f.is_file() and f.stat().st_size <= 16 * MiB for f in files), files
    runs, left = unpack(bundle, tmp_path)
    assert left == {} and runs == sorted(f"{PROFILE}/{run}" for run in ("w", "w-methods", "w-emulated", "w-small"))
    for run in runs:
        assert (tmp_path / run / "results.jsonl").read_text() == (out / "results" / run / "results.jsonl").read_text()
    assert json.loads((tmp_path / "window" / "w" / "summary.json").read_text()) == json.loads(
        (out / "summary.json").read_text()
    )


def _span(record) -> tuple[dt.datetime, dt.datetime]:
    return dt.datetime.fromisoformat(record.started_at), dt.datetime.fromisoformat(record.finished_at)


def test_the_phases_ran_side_by_side_and_in_their_order_and_the_cells_alone_had_the_host_to_themselves(rehearsal):
    runs = records(rehearsal["out"] / "results")
    first = [r for r in runs["w"] + runs["w-methods"] + runs["w-emulated"] + runs["w-small"] if r.slot != "0-5 of 6"]
    named = {n.split("/", 1)[0] for r in first for n in r.shared_with if "/" in n}
    assert len(named) >= 2, [r.shared_with for r in first]  # cells of other runs beside them: the phases overlapped
    dpo = [r for r in runs["w"] if r.trial == 0]
    speed = [r for r in runs["w"] if r.trial > 0]
    assert len(speed) == 2 and {r.cell_id for r in speed} <= set(REHEARSAL["dpo"])
    assert min(_span(r)[0] for r in speed) >= max(_span(r)[1] for r in dpo) - dt.timedelta(seconds=1)
    alone = next(r for r in runs["w-small"] if r.cell_id in REHEARSAL["seven_b"][2])
    shared = next(r for r in runs["w-small"] if r.cell_id in REHEARSAL["seven_b"][1])
    assert _span(alone)[0] >= _span(shared)[1] - dt.timedelta(seconds=1)  # 7b-alone resumes 7b's run
    for record in [*speed, alone]:
        print(f"{record.cell_id} (trial {record.trial}) alone: overlapped_by {record.overlapped_by}")
        # nothing beside it on the device; another run's runner starting or ending meanwhile is said, not hidden
        assert record.slot == "0-5 of 6" and record.shared_with == [] and not record.gpu_shared
        assert record.memory_cap_bytes is None  # its profile's own memory
    assert not any(r.speed_shared for r in speed)  # every phase above it had ended, the rests wait for it
    rest = next(r for r in runs["w-methods"] if r.cell_id in REHEARSAL["methods_rest"])
    before = next(r for r in runs["w-methods"] if r.cell_id in REHEARSAL["methods"])
    assert _span(rest)[0] >= max(_span(before)[1], *(_span(r)[1] for r in speed)) - dt.timedelta(seconds=1)


def test_each_cell_ends_as_it_does_alone_with_its_own_peak(rehearsal):
    window = {(r.workload, r.cell_id): r for rs in records(rehearsal["out"] / "results").values() for r in rs
              if r.trial == 0}  # fmt: skip
    alone = {(r.workload, r.cell_id): r for rs in records(rehearsal["alone"]).values() for r in rs}
    assert set(window) == set(alone)
    for key, record in window.items():
        reference = alone[key]
        assert record.status == reference.status == Status.OK, key
        rss = [r.peak_rss_bytes for r in record.rank_memory]
        rss_alone = [r.peak_rss_bytes for r in reference.rank_memory]
        mine, theirs = record.metrics.peak_bytes, reference.metrics.peak_bytes
        print(f"{key}: RSS peaks {rss} in the window, {rss_alone} alone; cgroup peak {mine} / {theirs}; "
              f"slot {record.slot}; wall {record.wall_s:.0f} s, {reference.wall_s:.0f} s alone")  # fmt: skip
        assert all(abs(a - b) <= PEAK_TOLERANCE * b for a, b in zip(rss, rss_alone, strict=True)), key
