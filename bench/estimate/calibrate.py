"""Fit the constants that cannot be derived, from measured records under results/, and write calibration.json.

What is fitted (CPU, per rank; a median of residuals, never one constant per cell):
- cpu.runtime_bytes       on single-process cells with quant none (measured model memory - modelled terms);
- cpu.multi_process_bytes on multi-process non-DeepSpeed cells with quant none (residual - runtime);
- cpu.deepspeed_bytes     on DeepSpeed adapter cells (residual - runtime - multi_process);
fitted on the budgeted CPU profiles of the small workload (BUDGET_PROFILES: cpu-budget, and cpu-budget-4g whose 4 GiB
budget lets the cells that are OOM-killed at 0.75 GiB run to their peak).
- cpu.context_bytes / deepspeed_context_bytes: median cgroup baseline of budgeted records without / with DeepSpeed.
Everything else (int8, nf4, FSDP fallbacks, two_models, every OOM verdict) is held out and only validated.
GPU constants stay priors (CUDA context 0.5 GiB, 10 % caching-allocator slack) until GPU records exist; then
cuda.allocator_slack is refitted as the median of (nvml peak - CUDA max allocated - context) / allocated.
"""

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.estimate import VERSION
from bench.estimate.predict import CALIBRATION_FILE, Calibration, DeviceConstants, predict_cell, write_calibration
from bench.matrix.backends import backend_spec
from bench.paths import PROJECT_ROOT
from bench.results.schema import ResultRecord, Status
from bench.units import GiB, MiB

BUDGET_PROFILES = ("cpu-budget", "cpu-budget-4g")
CALIBRATION_WORKLOAD = "small"
"""The workload of the budgeted profiles: the CPU constants hold for it; other CPU workloads are extrapolations."""

PRIORS = {
    "cpu": DeviceConstants(head_tiles=4.0),
    "cuda": DeviceConstants(head_tiles=1.0, context_bytes=0.5 * GiB, allocator_slack=0.10),
    "hpu": DeviceConstants(head_tiles=1.0, context_bytes=0.5 * GiB, allocator_slack=0.10),
}
"""head_tiles: derived from TRL's chunked_logprob.py (GPU: the Triton kernel folds the tile in place, 1 tile; CPU:
the torch fallback `_forward_tile` keeps ~4 tile-sized temporaries: tile.float()/transform, masked_fill copy,
z - max, exp; a microbenchmark of the forward measured 4.4)."""


@dataclass
class Measured:
    source: str
    record: ResultRecord
    model_memory: float | None
    """Measured per-rank model memory (peak - baseline; CUDA max allocated on GPU), None where not measured."""
    baseline: float | None
    oom: bool
    outcomes: frozenset[bool] = frozenset()
    """Every OOM outcome (True: OOM-killed, False: ran to the end) this cell had in any run of the same hardware and
    workload: both values mean the cell is at the edge, measured both ways."""


_RAN = (Status.OK, Status.SILENT_FALLBACK, Status.LEARNING_FAILED, Status.OOM)


def _runs_oldest_first(results: Path) -> list[Path]:
    from bench.results.runs import run_dirs

    return [run for hardware in sorted(results.iterdir()) if hardware.is_dir() for run in reversed(run_dirs(hardware))]


def _latest_record_per_cell(results: Path) -> list[tuple[str, ResultRecord, frozenset[bool]]]:
    from bench.results.store import load_results

    latest: dict[tuple[str, str, str], tuple[str, ResultRecord]] = {}
    outcomes: dict[tuple[str, str, str], set[bool]] = {}
    for run_dir in _runs_oldest_first(results):
        for record in load_results(run_dir).records:
            key = (record.hardware, record.workload, record.cell_id)
            latest[key] = (str(run_dir.relative_to(results.parent)), record)
            if record.status in _RAN:
                outcomes.setdefault(key, set()).add(record.status == Status.OOM)
    return [(source, record, frozenset(outcomes.get(key, ()))) for key, (source, record) in latest.items()]


def measured_records(results: Path = PROJECT_ROOT / "results") -> list[Measured]:
    """The latest record of every measured cell (ok, silent_fallback, learning_failed, oom) under results/, runs
    ordered by when they started."""
    rows = []
    for source, record, outcomes in _latest_record_per_cell(results):
        if record.status not in _RAN:
            continue
        m = record.metrics
        memory = m.model_memory_bytes if m is not None else None
        baseline = m.baseline_bytes if m is not None else None
        if memory is None and record.status == Status.OOM and record.memory_budget_bytes is None:
            continue
        rows.append(Measured(source, record, memory, baseline, record.status == Status.OOM, outcomes))
    return rows


@functools.cache
def _cells_by_id(hardware: str):
    from bench.matrix.profiles import load_profile, load_workload
    from bench.matrix.scenario import expand, load_matrix

    profile = load_profile(hardware)
    workload = load_workload(profile.workload)
    return profile, workload, {c.id: c for c in expand(load_matrix())}


def calibration_records(results: Path = PROJECT_ROOT / "results") -> list[Measured]:
    """The measured records the CPU constants are fitted on: the latest of every DPO cell of the budgeted profiles
    (the other training methods are held out: nothing is fitted on them, docs/estimator.md)."""
    return [m for m in measured_records(results) if m.record.hardware in BUDGET_PROFILES and m.record.method == "dpo"]


def fit(results: Path = PROJECT_ROOT / "results") -> Calibration:
    return fit_records(calibration_records(results))


def fit_records(records: list[Measured]) -> Calibration:
    """The calibration fitted on `records` (calibration_records or a subset of them: validate leaves cells out)."""
    devices = {k: v.model_copy(deep=True) for k, v in PRIORS.items()}
    zero = Calibration(version=VERSION, devices={k: v.model_copy(deep=True) for k, v in PRIORS.items()})
    fitted_on: list[str] = []
    cpu = devices["cpu"]
    base = {
        ds: [m.baseline for m in records if m.baseline is not None and ("zero" in m.record.backend) == ds]
        for ds in (False, True)
    }
    for m in records:  # OOM records keep the surviving rank's baseline
        for rank in m.record.rank_memory:
            if rank.baseline_cgroup_bytes is not None and m.baseline is None:
                base["zero" in m.record.backend].append(rank.baseline_cgroup_bytes)
    cpu.context_bytes = _median(base[False], "context_bytes (a baseline outside DeepSpeed)")
    cpu.deepspeed_context_bytes = statistics.median(base[True]) if base[True] else cpu.context_bytes
    setups = {hardware: _cells_by_id(hardware) for hardware in {m.record.hardware for m in records}}

    def residual(m: Measured) -> float:
        profile, workload, cells = setups[m.record.hardware]
        return m.model_memory - predict_cell(cells[m.record.cell_id], profile, workload, zero).train_bytes

    # adapters only: every two_models figure is held out, and so are int8 and nf4
    ok = [
        m for m in records if m.model_memory is not None and m.record.quant == "none" and m.record.init != "two_models"
    ]
    # one process without a process group: a multi-process backend on one rank (`+1rank`) is not `single`
    single = [m for m in ok if not backend_spec(m.record.backend).multi_process]
    cpu.runtime_bytes = _median([residual(m) for m in single], "runtime_bytes (a single-process adapter cell)")
    multi = [m for m in ok if m.record.world_size > 1 and "zero" not in m.record.backend]
    cpu.multi_process_bytes = _median(
        [residual(m) - cpu.runtime_bytes for m in multi], "multi_process_bytes (a multi-process adapter cell)"
    )
    ds = [m for m in ok if "zero" in m.record.backend]
    cpu.deepspeed_bytes = _median(
        [residual(m) - cpu.runtime_bytes - cpu.multi_process_bytes for m in ds], "deepspeed_bytes (a ZeRO adapter cell)"
    )
    fitted_on += [f"{m.source}:{m.record.cell_id}" for m in single + multi + ds]
    cpu.fitted = ["runtime_bytes", "multi_process_bytes", "deepspeed_bytes", "context_bytes", "deepspeed_context_bytes"]
    return Calibration(version=VERSION, devices=devices, fitted_on=fitted_on)


def _median(values: list[float], what: str) -> float:
    if not values:
        raise ValueError(f"cannot fit {what}: no such record under the budgeted profiles {', '.join(BUDGET_PROFILES)}")
    return statistics.median(values)


def main(results: Path = PROJECT_ROOT / "results", out: Path = CALIBRATION_FILE) -> Calibration:
    calibration = fit(results)
    write_calibration(calibration, out)
    return calibration


if __name__ == "__main__":
    cal = main()
    for kind, c in cal.devices.items():
        print(
            kind, {k: (round(v / MiB, 1) if isinstance(v, float) and v > 100 else v) for k, v in c.model_dump().items()}
        )
