"""Fault injection with real processes and real signals (BENCH_FAULT, see bench/worker/faults.py).

Each test runs the real CLI on real cells and checks what is recorded and what is kept afterwards.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.isolation.fork_server import is_client
from bench.results.store import load_results
from tests.conftest import fill_up

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


def test_a_stalled_rank_is_a_hang_named_by_the_watchdog_long_before_the_time_limit(tmp_path, scenario_copy):
    """The progress watchdog (bench/isolation/step_marks.py): rank 1 stops at step 5, rank 0 blocks in the next
    all-reduce; with stall_s 8 the cell ends as `hang` about 8 s later, not at its 120 s limit."""
    profile = scenario_copy / "hardware" / "cpu.yaml"
    profile.write_text(profile.read_text().replace("stall_s: 60", "stall_s: 8"))
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    done = bench_run(tmp_path, "one_adapter-none-ddp", {"BENCH_FAULT": "hang@rank1:step5"}, scenarios=scenario_copy)
    assert done.returncode == 0, done.stderr[-2000:]
    record = load_results(only_run(tmp_path)).records[0]
    assert record.status == "hang", (record.status, record.message)
    assert record.message.startswith("rank 1 made no progress for") and "after step 5" in record.message
    assert "rank 0 waits inside step 6" in record.message
    assert "limit 8 s" in record.message
    assert record.wall_s < 60
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


LAUNCHER_PROGRAMS = ("torchrun", "accelerate", "deepspeed", "mpirun", "prterun")


def rank_pids(marker: str, cell_id: str) -> list[int]:
    """The live worker processes (ranks, not their launcher or a fork server's client) of `cell_id` under the results
    folder `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = (Path("/proc") / pid / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        line = " ".join(args)
        # a fork server's client stands in for its forked rank, which shows the rank's command line too
        launcher = any(Path(arg).name in LAUNCHER_PROGRAMS for arg in args[:2]) or is_client(args)
        if marker in line and f"/{cell_id}/" in line and "bench.worker" in line and not launcher:
            found.append(int(pid))
    return found


def wait_until(condition, what: str, runner: subprocess.Popen, timeout_s: float) -> None:
    """Poll an observable state; fail at once if the runner ends first, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert runner.poll() is None, f"the runner ended (exit {runner.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s"
        time.sleep(0.2)


def process_states(pids: list[int]) -> str:
    """State and kernel wait channel of each process and thread, for a runner that does not exit."""
    states = []
    for pid in pids:
        for task in sorted((Path("/proc") / str(pid) / "task").glob("*")):
            try:
                state = next(ln for ln in (task / "status").read_text().splitlines() if ln.startswith("State:"))
                states.append(f"{pid}/{task.name} {state.split(None, 1)[1]} wchan={(task / 'wchan').read_text()}")
            except (OSError, StopIteration):
                continue
    return "; ".join(states)


def test_ctrl_c_keeps_finished_cells_and_resume_redoes_the_interrupted_one(tmp_path):
    """SIGINT while the second cell trains (it would never end: rank 1 hangs at step 3): the runner stops it, exits
    130 promptly, keeps the first cell's record and nothing of the second; resume runs the second cell only."""
    cells = "two_models-none-single,one_adapter-none-ddp"
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu", "--executor", "local"]
    argv += ["--filter", cells]
    env = os.environ | {"BENCH_FAULT": "hang@rank1:step3", "BENCH_FAULT_CELL": "one_adapter-none-ddp"}
    output = tmp_path / "runner.out"  # a file, not a pipe: nothing the runner writes can block it
    with output.open("w") as out:
        runner = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    took = None
    try:

        def first_cell_recorded() -> bool:
            files = list((tmp_path / "cpu").glob("*/results.jsonl"))
            return bool(files) and len(load_results(files[0]).records) == 1

        wait_until(first_cell_recorded, "record of two_models-none-single", runner, 300)
        wait_until(
            lambda: len(rank_pids(str(tmp_path), "one_adapter-none-ddp")) == 2,
            "two live ranks of one_adapter-none-ddp",
            runner,
            300,
        )
        sent = time.monotonic()
        runner.send_signal(signal.SIGINT)
        try:
            runner.wait(timeout=90)
        except subprocess.TimeoutExpired:
            cell = [int(line.split(":")[0]) for line in leftovers(str(tmp_path))]
            pytest.fail(
                f"the runner had not exited 90 s after SIGINT; {process_states([runner.pid, *cell])}; "
                f"output: {output.read_text()[-2000:]}"
            )
        took = time.monotonic() - sent
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for line in leftovers(str(tmp_path)):  # a failed run must not leave a hung cell behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
    text = output.read_text()
    print(f"SIGINT -> runner exit: {took:.2f} s")
    assert runner.returncode == 130, text[-2000:]
    assert "interrupted during one_adapter-none-ddp: it is not recorded" in text, text[-2000:]
    run_dir = only_run(tmp_path)
    assert [r.cell_id for r in load_results(run_dir).records] == ["two_models-none-single"]
    assert leftovers(str(tmp_path)) == []
    assert (run_dir / "logs" / "one_adapter-none-ddp.log").is_file()  # the interrupted cell's log is kept

    done = bench_run(tmp_path, cells, {}, run_id=run_dir.name)
    assert "1 cell(s) to run, 1 already recorded" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
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


def test_a_torn_last_result_line_is_set_aside_and_the_resume_records_the_rerun_cell(tmp_path):
    """A crash (or a full disk) mid-append leaves the last record half-written, without its newline: the resume
    moves it aside, keeps every whole record, re-runs that cell and records it on a line of its own."""
    cells = "two_models-none-single,one_adapter-none-single"
    done = bench_run(tmp_path, cells, {})
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = only_run(tmp_path)
    path = run_dir / "results.jsonl"
    first, second = path.read_bytes().splitlines(keepends=True)
    torn = second[: len(second) // 2]
    path.write_bytes(first + torn)

    done = bench_run(tmp_path, cells, {}, run_id=run_dir.name)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"moved to results.jsonl.{len(first)}.torn" in done.stdout
    assert "1 cell(s) to run, 1 already recorded" in done.stdout, done.stdout[-2000:]
    loaded = load_results(run_dir)
    assert [r.cell_id for r in loaded.records] == cells.split(",") and loaded.problems == []
    assert loaded.records[1].status == "ok"
    assert (run_dir / f"results.jsonl.{len(first)}.torn").read_bytes() == torn

    done = bench_run(tmp_path, cells, {}, run_id=run_dir.name)  # a further resume: nothing lost, nothing to redo
    assert "0 cell(s) to run, 2 already recorded" in done.stdout and "warning" not in done.stdout


def test_a_runner_sigkilled_mid_cell_takes_the_cell_along_and_one_runner_runs_a_run(tmp_path):
    """While a runner trains a 2-rank torchrun cell, a second runner of the same run stops at once naming it; the
    first is SIGKILLed: within 5 s no process of the cell is left; the next run takes the run over, says what it
    cleaned up, and records the cell."""
    cell = "one_adapter-none-ddp"
    argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu", "--executor", "local"]
    argv += ["--filter", cell, "--run-id", "r"]
    output = tmp_path / "runner.out"
    with output.open("w") as out:
        runner = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: len(rank_pids(str(tmp_path), cell)) == 2, f"two live ranks of {cell}", runner, 300)
        started = time.monotonic()
        second = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        refused_s = time.monotonic() - started
        lock = tmp_path / "cpu" / "r" / "run.lock"
        assert second.returncode == 2 and second.stderr == (
            f"error: run r is already being run by pid {runner.pid} (lock {lock}): wait for it to end, or stop it "
            "first\n"
        ), second.stderr
        assert runner.poll() is None and len(rank_pids(str(tmp_path), cell)) == 2  # the first one ran on

        runner.send_signal(signal.SIGKILL)
        runner.wait()
        killed = time.monotonic()
        while leftovers(str(tmp_path)) and time.monotonic() - killed < 5:
            time.sleep(0.1)
        assert leftovers(str(tmp_path)) == [], "processes of the cell outlived their runner by 5 s"
        gone_s = time.monotonic() - killed
    finally:
        if runner.poll() is None:
            runner.kill()
        for line in leftovers(str(tmp_path)):  # a failed test must not leave a training cell behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
    print(f"second runner refused in {refused_s:.2f} s; cell gone {gone_s:.2f} s after the runner's SIGKILL")
    run_dir = tmp_path / "cpu" / "r"
    assert (run_dir / "running.json").is_file() and load_results(run_dir).records == []

    done = bench_run(tmp_path, cell, {}, run_id="r")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"notice: run r was held by runner {runner.pid}, which is gone: taking it over" in done.stdout
    assert f"cleaned up: run r: runner {runner.pid} ended during {cell} without cleaning up: " in done.stdout
    assert not (run_dir / "running.json").exists()
    assert [(r.cell_id, r.status) for r in load_results(run_dir).records] == [(cell, "ok")]


def test_a_results_disk_that_fills_up_mid_cell_stops_the_run_with_one_line_and_it_resumes(small_disk, tmp_path):
    """The results folder on a real tmpfs fills up while a cell trains: the run stops with one line, records nothing
    the disk caused, keeps every record whole, and resumes once space is free."""
    first, second = "two_models-none-single", "one_adapter-none-single"
    argv = [sys.executable, "-m", "bench", "--results", str(small_disk), "run", "--hw", "cpu", "--executor", "local"]
    argv += ["--filter", f"{first},{second}", "--run-id", "r"]
    run_dir = small_disk / "cpu" / "r"
    output = tmp_path / "runner.out"  # not on the disk that fills up
    with output.open("w") as out:
        runner = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: len(load_results(run_dir).records) == 1, f"the record of {first}", runner, 300)
        wait_until(lambda: len(rank_pids(str(small_disk), second)) == 1, f"the rank of {second}", runner, 300)
        filler = fill_up(small_disk)
        assert runner.wait(timeout=300) == 2, output.read_text()[-3000:]
    finally:
        if runner.poll() is None:
            runner.kill()
    text = output.read_text()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: disk full ("), text[-3000:]
    assert errors[0].endswith(f"1 record(s) kept, {second} not recorded; free space, then resume with --run-id r")
    assert "Traceback" not in text
    print(errors[0])
    loaded = load_results(run_dir)
    assert [r.cell_id for r in loaded.records] == [first] and loaded.problems == []
    assert (run_dir / "results.jsonl").read_bytes().endswith(b"\n")
    assert leftovers(str(small_disk)) == []

    filler.unlink()
    done = bench_run(small_disk, f"{first},{second}", {}, run_id="r")
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = load_results(run_dir)
    assert [(r.cell_id, r.status) for r in loaded.records] == [(first, "ok"), (second, "ok")]
    assert loaded.problems == [] and list(run_dir.glob("*.torn")) == []
