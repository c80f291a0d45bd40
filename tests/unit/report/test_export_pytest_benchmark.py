"""export --format pytest-benchmark: the JSON that `pytest-benchmark compare` loads, one benchmark per ok cell."""

import json
import random
import subprocess
import sys

import pytest
from pytest_benchmark.stats import Stats

from bench.cli import main
from bench.report.compare import Run
from bench.report.dashboard_json import pb_stats, pytest_benchmark_json
from bench.results.schema import Status
from tests.unit.report.test_compare import ENV, fingerprint, rec, write_run

STEADY = [0.050, 0.052, 0.049, 0.051, 0.060]


def with_steps(record, steps):
    return record.model_copy(update={"metrics": record.metrics.model_copy(update={"step_times_s": steps})})


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 9, 10, 25, 101])
def test_stats_are_pytest_benchmarks_own(n):
    rng = random.Random(n)
    data = [rng.lognormvariate(-3, 0.3) for _ in range(n)]
    if n > 5:
        data[0] = 1.0  # an outlier
    stats = Stats()
    for value in data:
        stats.update(value)
    expected = stats.as_dict() | {"data": data, "iterations": 1}
    got = pb_stats(data)
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == (pytest.approx(value) if isinstance(value, float) else value), key


def test_one_benchmark_per_ok_cell_with_every_steady_step_of_every_trial():
    cell = "one_adapter-none-single"
    records = [with_steps(rec(cell, trial=t), [s + t / 1000 for s in STEADY]) for t in range(3)]
    records += [rec("one_adapter-none-ddp", Status.ERROR), rec("two_models-none-single", trial=0)]
    data = pytest_benchmark_json(Run("20260101-000000", records, fingerprint(git_sha="abc123", git_dirty=True)))
    assert set(data) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert data["commit_info"]["id"] == "abc123" and data["commit_info"]["dirty"] is True
    by_name = {b["name"]: b for b in data["benchmarks"]}
    assert set(by_name) == {cell, "two_models-none-single"}  # the failing cell is left out
    bench = by_name[cell]
    assert bench["fullname"] == f"cpu/{cell}" and bench["group"] == "cpu"
    assert bench["params"] == {"init": "one_adapter", "quant": "none", "backend": "single", "launcher": "python"}
    assert bench["stats"]["rounds"] == len(STEADY) * 3 and bench["extra_info"]["rounds"] == "steady steps"
    assert bench["stats"]["min"] == pytest.approx(0.049) and bench["stats"]["iterations"] == 1
    older = by_name["two_models-none-single"]  # no per-step times: one round per trial, its median step time
    assert older["stats"]["rounds"] == 1 and older["stats"]["data"] == [0.05]
    assert older["extra_info"]["rounds"] == "trial medians"
    json.dumps(data)


def test_pytest_benchmark_compare_loads_two_exports(tmp_path):
    cell = "one_adapter-none-single"
    runs = []
    for name, scale in (("20260101-000000", 1.0), ("20260102-000000", 1.1)):
        records = [with_steps(rec(cell, trial=t), [s * scale for s in STEADY]) for t in range(2)]
        records.append(with_steps(rec("one_adapter-none-ddp"), [0.1 * scale] * 5))
        runs.append(write_run(tmp_path / "cpu" / name, records, ENV))
    files = []
    for run_dir in runs:
        out = tmp_path / f"{run_dir.name}.json"
        assert main(["export", "--format", "pytest-benchmark", str(run_dir), "--output", str(out)]) == 0
        files.append(str(out))
    for extra in ([], ["--between", "median,ops"], ["--group-by", "name", "--columns", "min,median,rounds"]):
        done = subprocess.run(
            [sys.executable, "-m", "pytest_benchmark", "compare", *extra, *files],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert cell in done.stdout and "one_adapter-none-ddp" in done.stdout, done.stdout


def test_export_defaults_to_github_action_benchmark(tmp_path, capsys):
    run_dir = write_run(tmp_path / "cpu" / "r1", [rec("one_adapter-none-single")], ENV)
    assert main(["export", str(run_dir)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["name"] == "cpu/one_adapter-none-single throughput" and entry["unit"] == "tokens/s"
