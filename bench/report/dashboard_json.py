"""Export a run for github-action-benchmark (`customBiggerIsBetter` / `customSmallerIsBetter` tools), or in
pytest-benchmark's JSON format (`pytest-benchmark compare` then works on result runs).

github-action-benchmark takes one direction per file, so throughput and memory are separate exports.
"""

import bisect
import datetime as dt
import statistics

from bench.report.compare import Run
from bench.report.summary import summarize
from bench.results.env_schema import EnvFingerprint
from bench.results.schema import ResultRecord
from bench.units import MiB

# metric -> (github-action-benchmark tool, unit)
GAB_METRICS = {
    "throughput": ("customBiggerIsBetter", "tokens/s"),
    "memory": ("customSmallerIsBetter", "MiB"),
}


def gab_entries(run: Run, metric: str) -> list[dict]:
    """[{name, unit, value, extra}] for every cell that is ok in `run`, value = median over its ok trials."""
    unit = GAB_METRICS[metric][1]
    profile = (run.env and run.env.hardware_profile) or (run.records[0].hardware if run.records else "?")
    entries = []
    for cell in summarize(run.records).values():
        values = cell.tokens_per_s if metric == "throughput" else [v / MiB for v in cell.train_peak_bytes]
        if cell.status != "ok" or not values:
            continue
        low, high = min(values), max(values)
        entries.append(
            {
                "name": f"{profile}/{cell.cell_id} {metric}",
                "unit": unit,
                "value": round(statistics.median(values), 3),
                "range": f"{high - low:.3f}",
                "extra": f"run {run.name}; median of {len(values)} trial(s); min {low:.3f}, max {high:.3f}",
            }
        )
    return entries


# ---------------------------------------------------------------- pytest-benchmark

PYTEST_BENCHMARK_VERSION = "5.3.1"
"""The pytest-benchmark version whose JSON layout `pytest_benchmark_json` writes (the lock's)."""


def pb_stats(data: list[float]) -> dict:
    """pytest-benchmark's `Stats.as_dict()` of these durations (seconds), computed the same way (its quartile
    methods, Tukey and stddev outlier counts, ops = rounds / total), plus `data` and `iterations` as its JSON has
    them. Pure; tests hold it against pytest_benchmark.stats.Stats."""
    ordered = sorted(data)
    rounds = len(data)
    total = sum(data)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if rounds > 1 else 0
    q1, q3 = _quartiles(ordered)
    iqr = q3 - q1
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    iqr_outliers = sum(v < low or v > high for v in data)
    stddev_outliers = sum(v < mean - stddev or v > mean + stddev for v in data)
    if rounds == 1:
        ld15iqr = hd15iqr = data[0]
    else:
        ld15iqr = ordered[bisect.bisect_left(ordered, low)]
        hd15iqr = ordered[bisect.bisect_right(ordered, high) - 1]
    return {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": rounds,
        "median": statistics.median(data),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": ld15iqr,
        "hd15iqr": hd15iqr,
        "ops": rounds / total if total else 0,
        "total": total,
        "data": list(data),
        "iterations": 1,
    }


def _quartiles(ordered: list[float]) -> tuple[float, float]:
    """Q1 and Q3 as pytest-benchmark computes them (Wikipedia's methods 3 for odd, 2 for even counts)."""
    rounds = len(ordered)
    if rounds == 1:
        return ordered[0], ordered[0]
    if rounds % 2 == 0:
        return statistics.median(ordered[: rounds // 2]), statistics.median(ordered[rounds // 2 :])
    n, q = rounds // 4, rounds % 4
    if q == 1:
        q1 = 0.25 * ordered[n - 1] + 0.75 * ordered[n]
        q3 = 0.75 * ordered[3 * n] + 0.25 * ordered[3 * n + 1]
    else:
        q1 = 0.75 * ordered[n] + 0.25 * ordered[n + 1]
        q3 = 0.25 * ordered[3 * n + 1] + 0.75 * ordered[3 * n + 2]
    return q1, q3


def step_times(records: list[ResultRecord]) -> tuple[list[float], str]:
    """A cell's seconds per step over its ok trials, and what they are: every steady step of every trial where the
    records have them (`metrics.step_times_s`), else one median step time per trial (older records)."""
    if all(r.metrics.step_times_s for r in records):
        return [t for r in records for t in r.metrics.step_times_s], "steady steps"
    return [r.metrics.step_time_median_s for r in records], "trial medians"


def pytest_benchmark_json(run: Run) -> dict:
    """The run in pytest-benchmark's JSON format (what `pytest --benchmark-json` writes and `pytest-benchmark
    compare` loads): one benchmark per `ok` cell, its rounds the seconds per step of the lead rank over every
    steady step of every ok trial (rounds = steady steps x trials). Lower is better, as pytest-benchmark assumes."""
    env = run.env
    profile = (env and env.hardware_profile) or (run.records[0].hardware if run.records else "?")
    by_trial: dict[str, dict[int, ResultRecord]] = {}
    for record in run.records:  # the newest line of a trial wins, as in summarize
        by_trial.setdefault(record.cell_id, {})[record.trial] = record
    benchmarks = []
    for cell in summarize(run.records).values():
        ok = [r for r in by_trial[cell.cell_id].values() if r.status == "ok" and r.metrics is not None]
        if cell.status != "ok" or not ok:
            continue
        data, kind = step_times(ok)
        first = ok[0]
        benchmarks.append(
            {
                "group": profile,
                "name": cell.cell_id,
                "fullname": f"{profile}/{cell.cell_id}",
                "params": {
                    "init": first.init,
                    "quant": first.quant,
                    "backend": first.backend,
                    "launcher": first.launcher,
                },
                "param": None,
                "extra_info": {
                    "run": run.name,
                    "trials": len(ok),
                    "rounds": kind,
                    "tokens_per_s_median": statistics.median(r.metrics.tokens_per_s for r in ok),
                    "workload": first.workload,
                },
                "options": {"timer": "perf_counter", "unit": "seconds per training step"},
                "stats": pb_stats(data),
            }
        )
    return {
        **_machine_and_commit(env, profile),
        "benchmarks": benchmarks,
        "datetime": (env.created_at if env is not None else None) or dt.datetime.now(dt.UTC).isoformat(),
        "version": PYTEST_BENCHMARK_VERSION,
    }


def _machine_and_commit(env: EnvFingerprint | None, profile: str) -> dict:
    """pytest-benchmark's machine_info and commit_info, from the run's env.json (blank where it has none)."""
    machine = env.hardware if env is not None else None
    return {
        "machine_info": {
            "node": "",
            "processor": machine.cpu_model if machine else "",
            "machine": machine.machine if machine else "",
            "python_implementation": "CPython",
            "python_version": env.python if env is not None and env.python else "",
            "release": "",
            "system": "Linux",
            "cpu": {"count": machine.cpu_count if machine else None, "brand_raw": machine.cpu_model if machine else ""},
            "hardware_profile": profile,
            "packages": dict(env.packages) if env is not None else {},
        },
        "commit_info": {
            "id": (env.git_sha if env is not None else None) or "unknown",
            "dirty": bool(env.git_dirty) if env is not None else False,
            "project": "dpo-bench",
            "branch": None,
            "time": env.created_at if env is not None else None,
        },
    }
