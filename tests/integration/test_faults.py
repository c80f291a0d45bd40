"""Fault injection with real processes and real signals (BENCH_FAULT, see bench/worker/faults.py).

Each test runs the real CLI on real cells and checks what is recorded and what is kept afterwards.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.results import load_results

pytestmark = pytest.mark.integration

FAKE_TOKEN = "hf_FAKEdpoBENCHtoken0123456789abcdef"


def leftovers(marker: str) -> list[str]:
    """Live processes whose command line mentions `marker` (each test's own results folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline[:120]}")
    return found


def bench_run(results: Path, cells: str, env: dict[str, str], scenarios: Path | None = None, run_id=None):
    argv = [sys.executable, "-m", "bench", "--results", str(results)]
    if scenarios:
        argv += ["--scenarios", str(scenarios)]
    argv += ["run", "--hw", "cpu", "--executor", "local", "--filter", cells]
    argv += ["--run-id", run_id] if run_id else []
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=os.environ | env)


def only_run(results: Path) -> Path:
    (run_dir,) = (p for p in (results / "cpu").iterdir() if p.is_dir())
    return run_dir


def test_rank_sigkilled_mid_training_is_a_crash_and_leaves_nothing(tmp_path):
    done = bench_run(tmp_path, "one_adapter-none-ddp", {"BENCH_FAULT": "sigkill@rank1:step5"})
    assert done.returncode == 0, done.stderr[-2000:]
    record = load_results(only_run(tmp_path)).records[0]
    assert (record.status, record.error_class) == ("error", "crash")
    assert "SIGKILL" in record.message and record.wall_s < 60
    assert leftovers(str(tmp_path)) == []


def test_hung_rank_times_out_within_the_limit_and_the_group_is_gone(tmp_path, scenario_copy):
    profile = scenario_copy / "hardware" / "cpu.yaml"
    profile.write_text(profile.read_text().replace("timeout_s: 120", "timeout_s: 45"))
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    started = time.monotonic()
    done = bench_run(tmp_path, "one_adapter-none-ddp", {"BENCH_FAULT": "hang@rank1:step5"}, scenarios=scenario_copy)
    assert done.returncode == 0, done.stderr[-2000:]
    record = load_results(only_run(tmp_path)).records[0]
    assert record.status == "timeout" and 45 <= record.wall_s < 45 + 10
    assert time.monotonic() - started < 120
    assert leftovers(str(tmp_path)) == []


def test_host_oom_and_cuda_oom_are_oom_and_the_run_goes_on(tmp_path):
    env = {"BENCH_FAULT": "host_oom@rank0:step3", "BENCH_FAULT_CELL": "one_adapter-none-single"}
    done = bench_run(tmp_path, "one_adapter-none-single,two_models-none-single", env)
    assert done.returncode == 0, done.stderr[-2000:]
    latest = load_results(only_run(tmp_path)).latest_by_cell()
    assert latest["one_adapter-none-single"].status == "oom"
    assert "MemoryError" in latest["one_adapter-none-single"].message
    assert latest["two_models-none-single"].status == "ok"

    cuda = tmp_path / "cuda"
    done = bench_run(cuda, "one_adapter-none-single", {"BENCH_FAULT": "cuda_oom"})
    record = load_results(only_run(cuda)).records[0]
    assert record.status == "oom" and "CUDA out of memory" in record.message


def test_an_abort_at_interpreter_exit_after_the_report_does_not_fail_the_cell(tmp_path):
    done = bench_run(tmp_path, "one_adapter-none-ddp", {"BENCH_FAULT": "abort_at_exit@rank1:step2"})
    assert done.returncode == 0, done.stderr[-2000:]
    record = load_results(only_run(tmp_path)).records[0]
    assert record.status == "ok", record.message
    assert record.metrics and record.metrics.tokens_per_s > 0
    assert leftovers(str(tmp_path)) == []


def test_malformed_worker_result_is_an_error_not_a_crash(tmp_path):
    done = bench_run(tmp_path, "one_adapter-none-single", {"BENCH_FAULT": "bad_result"})
    assert done.returncode == 0, done.stderr[-2000:]
    record = load_results(only_run(tmp_path)).records[0]
    assert record.status == "error" and "malformed rank report" in record.message


def test_ctrl_c_keeps_finished_cells_and_resume_redoes_the_interrupted_one(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "bench",
        "--results",
        str(tmp_path),
        "run",
        "--hw",
        "cpu",
        "--executor",
        "local",
        "--filter",
        "two_models-none-single,one_adapter-none-ddp",
    ]
    env = os.environ | {"BENCH_FAULT": "hang@rank1:step3", "BENCH_FAULT_CELL": "one_adapter-none-ddp"}
    runner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = list((tmp_path / "cpu").glob("*/results.jsonl"))
        if runs and len(load_results(runs[0]).records) == 1:
            break
        time.sleep(0.5)
    time.sleep(8)  # well into the ddp cell, which now hangs
    runner.send_signal(signal.SIGINT)
    output, _ = runner.communicate(timeout=60)
    assert runner.returncode == 130, output[-2000:]
    assert "interrupted during one_adapter-none-ddp" in output
    run_dir = only_run(tmp_path)
    assert [r.cell_id for r in load_results(run_dir).records] == ["two_models-none-single"]
    assert leftovers(str(tmp_path)) == []

    done = bench_run(tmp_path, "two_models-none-single,one_adapter-none-ddp", {}, run_id=run_dir.name)
    assert "1 cell(s) to run, 1 already recorded" in done.stdout
    latest = load_results(run_dir).latest_by_cell()
    assert latest["one_adapter-none-ddp"].status == "ok" and len(load_results(run_dir).records) == 2


def test_corrupted_results_line_is_reported_and_the_run_resumes(tmp_path):
    done = bench_run(tmp_path, "two_models-none-single", {})
    run_dir = only_run(tmp_path)
    with (run_dir / "results.jsonl").open("a") as handle:
        handle.write("{not json\n")
    done = bench_run(tmp_path, "two_models-none-single", {}, run_id=run_dir.name)
    assert done.returncode == 0
    assert f"{run_dir / 'results.jsonl'}:2: unreadable result line" in done.stdout
    assert "0 cell(s) to run, 1 already recorded" in done.stdout


def test_a_planted_token_reaches_no_output_file(tmp_path):
    env = {"HF_TOKEN": FAKE_TOKEN, "MY_SERVICE_API_KEY": "sk-notarealkeybutlongenough42", "BENCH_FAULT": "leak_secret"}
    done = bench_run(tmp_path, "one_adapter-none-single", env)
    assert done.returncode == 0, done.stderr[-2000:]
    matrix = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--results",
            str(tmp_path),
            "matrix",
            "--hw",
            "cpu",
            "--run-id",
            only_run(tmp_path).name,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert matrix.returncode == 0, matrix.stderr
    record = load_results(only_run(tmp_path)).records[0]
    assert record.status == "error" and "***" in record.message
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".log") for p in files) and any(p.name == "MATRIX.md" for p in files)
    for path in files:
        text = path.read_bytes()
        assert FAKE_TOKEN.encode() not in text, path
        assert b"sk-notarealkeybutlongenough42" not in text, path
    assert FAKE_TOKEN not in done.stdout + done.stderr
