"""Fit the constants that cannot be derived, from measured records under results/, and write calibration.json.

What is fitted: only the CPU library baseline, which lies outside the predicted model memory (peak - baseline) and
enters the verdict against a budget: cpu.context_bytes / deepspeed_context_bytes, the median cgroup baseline of the
budgeted records (BUDGET_PROFILES) without / with DeepSpeed. No model-memory term is fitted: the CPU process terms are
measurements of bench/selfbench/memory_phases.py (bench/estimate/cpu_terms.py), every record is held out and only
validated. CUDA needs no constant (bench/estimate/gpu_terms.py); HPU keeps priors (a 0.5 GiB context and 10 %
allocator slack) until HPU records exist.
"""

import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.estimate import VERSION
from bench.estimate.predict import CALIBRATION_FILE, Calibration, DeviceConstants, write_calibration
from bench.matrix.backends import backend_spec
from bench.results.cpu_features import CpuFeatures
from bench.results.schema import ResultRecord, Status
from bench.results.tracked import tracked_results
from bench.units import GiB

BUDGET_PROFILES = ("cpu-budget", "cpu-budget-4g")

PRIORS = {
    "cpu": DeviceConstants(),
    "hpu": DeviceConstants(context_bytes=0.5 * GiB, allocator_slack=0.10),
}


@dataclass
class MeasuredMemory:
    """One measured cell's memory, as the memory estimator's calibration and validation read it."""

    source: str
    record: ResultRecord
    model_memory: float | None
    """Measured per-rank model memory (peak - baseline; CUDA max allocated on GPU), None where not measured."""
    baseline: float | None
    oom: bool
    outcomes: frozenset[bool] = frozenset()
    """Every OOM outcome (True: OOM-killed, False: ran to the end) this cell had in any run of the same hardware and
    workload: both values mean the cell is at the edge, measured both ways."""
    cpu: CpuFeatures | None = None
    """The CPU features of the record's run (bench/results/env.run_cpu_features); None where not recorded."""


_RAN = (Status.OK, Status.SILENT_FALLBACK, Status.LEARNING_FAILED, Status.OOM)


def _runs_oldest_first(results: Path) -> list[Path]:
    from bench.results.runs import run_dirs

    return [run for hardware in sorted(results.iterdir()) if hardware.is_dir() for run in reversed(run_dirs(hardware))]


Flags = tuple[str, ...] | None
"""A CPU's instruction sets as its run recorded them (bench/results/cpu_features.py), None where not recorded."""


def _latest_record_per_cell(results: Path) -> list[tuple[str, ResultRecord, frozenset[bool], CpuFeatures | None]]:
    """The newest record of each cell per hardware, workload and CPU. A CPU of another model is another measurement,
    not a re-run: each keeps its own latest record. A hypervisor may give two generations one model name (an EPYC
    Zen 4 and a Zen 5 both read `AMD EPYC`), so where runs record their instruction sets those tell the CPUs apart;
    a record of a run that recorded none and one of a run that did supersede each other, newest first (the CPU is not
    known to differ)."""
    from bench.results.env import read_env, run_cpu_features
    from bench.results.store import load_results

    latest: dict[tuple[str, str, str, str], dict[Flags, tuple[str, ResultRecord, CpuFeatures | None]]] = {}
    outcomes: dict[tuple[str, str, str, str], dict[Flags, set[bool]]] = {}
    for run_dir in _runs_oldest_first(results):
        cpu = run_cpu_features(run_dir)[0]
        env = read_env(run_dir)
        model = (env.hardware.cpu_model if env is not None else None) or "unknown"
        flags: Flags = tuple(cpu.flags) if cpu is not None else None
        for record in load_results(run_dir).records:
            cell = (record.hardware, record.workload, record.cell_id, model)
            kept, seen = latest.setdefault(cell, {}), outcomes.setdefault(cell, {})
            for other in [f for f in kept if f != flags and (f is None or flags is None)]:
                del kept[other]
                seen.setdefault(flags, set()).update(seen.pop(other, set()))
            kept[flags] = (str(run_dir.relative_to(results.parent)), record, cpu)
            if record.status in _RAN:
                seen.setdefault(flags, set()).add(record.status == Status.OOM)
    return [
        (source, record, frozenset(outcomes[cell].get(flags, ())), cpu)
        for cell, kept in latest.items()
        for flags, (source, record, cpu) in kept.items()
    ]


def measured_records(results: Path | None = None) -> list[MeasuredMemory]:
    """The latest record of every measured cell (ok, silent_fallback, learning_failed, oom) per CPU model under
    `results` (default: the runs git tracks, bench/results/tracked.py), runs ordered by when they started."""
    rows = []
    for source, record, outcomes, cpu in _latest_record_per_cell(results or tracked_results()):
        if record.status not in _RAN:
            continue
        m = record.metrics
        memory = m.model_memory_bytes if m is not None else None
        baseline = m.baseline_bytes if m is not None else None
        if memory is None and record.status == Status.OOM and record.memory_budget_bytes is None and not on_gpu(record):
            continue
        rows.append(MeasuredMemory(source, record, memory, baseline, record.status == Status.OOM, outcomes, cpu))
    return rows


def on_gpu(record) -> bool:
    """A record of a CUDA profile: its out-of-memory is a verdict against the device's memory (or the emulated one)."""
    from bench.matrix.profiles import load_profile

    try:
        return load_profile(record.hardware).device == "cuda"
    except Exception:  # a profile no longer shipped: judged as a CPU record
        return False


def calibration_records(results: Path | None = None) -> list[MeasuredMemory]:
    """The measured records the CPU baselines are fitted on: the latest of every DPO cell of the budgeted profiles
    (the other training methods are held out, docs/estimator.md)."""
    return [m for m in measured_records(results) if m.record.hardware in BUDGET_PROFILES and m.record.method == "dpo"]


def fit(results: Path | None = None) -> Calibration:
    return fit_records(calibration_records(results))


def fit_records(records: list[MeasuredMemory]) -> Calibration:
    """The calibration fitted on `records` (calibration_records or a subset of them: validate leaves cells out)."""
    devices = {k: v.model_copy(deep=True) for k, v in PRIORS.items()}
    cpu = devices["cpu"]
    base = {
        ds: [m.baseline for m in records if m.baseline is not None and _deepspeed(m.record.backend) == ds]
        for ds in (False, True)
    }
    for m in records:
        for rank in m.record.rank_memory:
            if rank.baseline_cgroup_bytes is not None and m.baseline is None:
                base[_deepspeed(m.record.backend)].append(rank.baseline_cgroup_bytes)
    cpu.context_bytes = float(_median(base[False], "context_bytes (a baseline outside DeepSpeed)"))
    cpu.deepspeed_context_bytes = float(statistics.median(base[True])) if base[True] else cpu.context_bytes
    cpu.fitted = ["context_bytes", "deepspeed_context_bytes"]
    return Calibration(version=VERSION, devices=devices)


def _deepspeed(backend: str) -> bool:
    """The record's backend runs under DeepSpeed, whose context is fitted apart (deepspeed_context_bytes)."""
    return backend_spec(backend).deepspeed is not None


def _median(values: list[float], what: str) -> float:
    if not values:
        raise ValueError(f"cannot fit {what}: no such record under the budgeted profiles {', '.join(BUDGET_PROFILES)}")
    return statistics.median(values)


def main(results: Path | None = None, out: Path = CALIBRATION_FILE) -> Calibration:
    """calibration.json from the committed runs (or `results`)."""
    calibration = fit(results)
    write_calibration(calibration, out)
    return calibration
