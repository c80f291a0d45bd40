"""SIGTERM and SIGHUP (what `timeout`, systemd and job schedulers send) stop a run as Ctrl-C does; the fork-server
folder of a runner that died is removed by the next run, never a live runner's; a hostile runner registry neither
hangs a run nor names a runner that is not one. Real runners (`python -m bench` processes), real signals, real
cells of the tiny workload.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.isolation.shm_segments import segments
from bench.results.store import load_results
from tests.integration.test_faults import leftovers, only_run, rank_pids, wait_until
from tests.integration.test_hostile import one_line

pytestmark = pytest.mark.integration

SINGLE = "two_models-none-single"
ZERO2 = "one_adapter-none-zero2"


def start_runner(
    results: Path, cells: str, output: Path, env=None, hw="cpu", run_id=None, scenarios: Path | None = None
) -> subprocess.Popen:
    argv = [sys.executable, "-m", "bench", "--results", str(results)]
    argv += ["--scenarios", str(scenarios)] if scenarios else []
    argv += ["run", "--hw", hw, "--executor", "local"]
    argv += ["--filter", cells] + (["--run-id", run_id] if run_id else [])
    with output.open("w") as out:  # a file, not a pipe: nothing the runner writes can block it
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=os.environ | (env or {}))


def fork_server_folder(runner: int) -> Path | None:
    """The folder of the runner's fork server (its child `python -m bench.isolation.fork_server_process FOLDER ...`)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (Path("/proc") / pid / "stat").read_text()
            args = (Path("/proc") / pid / "cmdline").read_bytes().split(b"\0")
            if int(stat.rsplit(")", 1)[1].split()[1]) == runner and b"bench.isolation.fork_server_process" in args:
                return Path(args[args.index(b"bench.isolation.fork_server_process") + 1].decode())
    return None


def recorded(results: Path, count: int, hw: str = "cpu"):
    def check() -> bool:
        files = list((results / hw).glob("*/results.jsonl"))
        return bool(files) and len(load_results(files[0]).records) == count

    return check


def stop(runner: subprocess.Popen, signum: int, output: Path, results: Path) -> float:
    """Send `signum`; the seconds until the runner exited (it must within 90 s)."""
    sent = time.monotonic()
    runner.send_signal(signum)
    try:
        runner.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the runner had not exited 90 s after {signum!r}; output: {output.read_text()[-2000:]}")
    return time.monotonic() - sent


@contextlib.contextmanager
def killed_at_the_end(results: Path, *runners: subprocess.Popen):
    """A failed test leaves no runner and no hung cell behind."""
    try:
        yield
    finally:
        for runner in runners:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
        for line in leftovers(str(results)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_sigterm_stops_a_deepspeed_cell_as_ctrl_c_does_and_leaves_nothing(tmp_path):
    """SIGTERM while a 2-rank DeepSpeed cell trains (rank 1 hangs at step 3, so it would never end): exit 143 with one
    line, the finished cell's record kept, nothing of the stopped one: no process, no running.json, no fork-server
    folder, no /dev/shm segment."""
    env = {"BENCH_FAULT": "hang@rank1:step3", "BENCH_FAULT_CELL": ZERO2}
    output = tmp_path / "runner.out"
    runner = start_runner(tmp_path, f"{SINGLE},{ZERO2}", output, env)
    with killed_at_the_end(tmp_path, runner):
        wait_until(recorded(tmp_path, 1), f"record of {SINGLE}", runner, 300)
        run_dir = only_run(tmp_path)
        wait_until((run_dir / "running.json").is_file, f"{ZERO2} named in running.json", runner, 60)
        port = json.loads((run_dir / "running.json").read_text())["master_port"]
        wait_until(lambda: len(segments("127.0.0.1", port)) == 2, "DeepSpeed's two shm segments", runner, 120)
        folder = fork_server_folder(runner.pid)
        assert folder is not None and folder.is_dir()
        took = stop(runner, signal.SIGTERM, output, tmp_path)
    text = output.read_text()
    print(f"SIGTERM -> runner exit: {took:.2f} s")
    assert runner.returncode == 143, text[-2000:]
    line = f"interrupted by SIGTERM during {ZERO2}: it is not recorded; re-run with --run-id {run_dir.name} to resume"
    assert text.count(line) == 1 and "Traceback" not in text, text[-2000:]
    assert [r.cell_id for r in load_results(run_dir).records] == [SINGLE]
    assert leftovers(str(tmp_path)) == []
    assert not (run_dir / "running.json").exists()
    assert not folder.exists()
    assert segments("127.0.0.1", port) == []


def test_sigterm_stops_cells_side_by_side_and_keeps_the_finished_ones(tmp_path):
    """Two single-rank cells side by side on the cpu-slots profile's two core groups; one ends, the other hangs:
    SIGTERM stops it (not recorded), keeps the first's record, exits 143, leaves no process and no fork-server
    folder."""
    hung = "one_adapter-none-single"
    env = {"BENCH_FAULT": "hang@rank0:step3", "BENCH_FAULT_CELL": hung}
    output = tmp_path / "runner.out"
    runner = start_runner(tmp_path, f"{SINGLE},{hung}", output, env, hw="cpu-slots")
    with killed_at_the_end(tmp_path, runner):
        wait_until(recorded(tmp_path, 1, "cpu-slots"), f"record of {SINGLE}", runner, 300)
        wait_until(lambda: len(rank_pids(str(tmp_path), hung)) == 1, f"the live rank of {hung}", runner, 300)
        folder = fork_server_folder(runner.pid)
        assert folder is not None and folder.is_dir()
        took = stop(runner, signal.SIGTERM, output, tmp_path)
    text = output.read_text()
    print(f"SIGTERM -> runner exit (side by side): {took:.2f} s")
    assert runner.returncode == 143, text[-2000:]
    assert text.count(f"stopped {hung}: not recorded") == 1 and "Traceback" not in text, text[-2000:]
    (run_dir,) = (tmp_path / "cpu-slots").iterdir()
    assert [r.cell_id for r in load_results(run_dir).records] == [SINGLE]
    assert leftovers(str(tmp_path)) == []
    assert not folder.exists()


def test_the_next_run_removes_a_dead_runners_fork_server_folder_never_a_live_ones(tmp_path, scenario_copy):
    """Runner `live` trains a cell that hangs (its watchdog and time limit raised past the test's length); runner
    `dead` is SIGKILLed once its fork server's folder exists. The next run removes the dead runner's folder, saying
    so, and leaves the live runner's; SIGHUP then stops the live runner (exit 129), which removes its own."""
    profile = scenario_copy / "hardware" / "cpu.yaml"
    profile.write_text(
        profile.read_text().replace("stall_s: 60", "stall_s: 900").replace("timeout_s: 120", "timeout_s: 900")
    )
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    env = {"BENCH_FAULT": "hang@rank0:step3", "BENCH_FAULT_CELL": "one_adapter-none-single"}
    live = start_runner(
        tmp_path, "one_adapter-none-single", tmp_path / "live.out", env, run_id="live", scenarios=scenario_copy
    )
    dead = start_runner(tmp_path, SINGLE, tmp_path / "dead.out", run_id="dead")
    with killed_at_the_end(tmp_path, live, dead):
        wait_until(lambda: fork_server_folder(dead.pid) is not None, "the fork server of `dead`", dead, 120)
        dead_folder = fork_server_folder(dead.pid)
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        wait_until(lambda: fork_server_folder(dead.pid) is None, "the end of `dead`'s fork server", live, 10)
        assert dead_folder.is_dir()  # SIGKILL leaves it behind
        wait_until(lambda: len(rank_pids(str(tmp_path), "one_adapter-none-single")) == 1, "a hung rank", live, 300)
        live_folder = fork_server_folder(live.pid)
        assert live_folder is not None

        done = subprocess.run(
            [
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
                SINGLE,
                "--run-id",
                "next",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert f"cleaned up: fork server folder {dead_folder} of runner {dead.pid}, which is gone" in done.stdout
        assert not dead_folder.exists()
        assert live.poll() is None, (tmp_path / "live.out").read_text()[-2000:]
        assert live_folder.is_dir()
        assert str(live_folder) not in done.stdout

        took = stop(live, signal.SIGHUP, tmp_path / "live.out", tmp_path)
    text = (tmp_path / "live.out").read_text()
    print(f"SIGHUP -> runner exit: {took:.2f} s")
    assert live.returncode == 129, text[-2000:]
    assert "interrupted by SIGHUP during one_adapter-none-single: it is not recorded" in text, text[-2000:]
    assert not live_folder.exists()
    assert leftovers(str(tmp_path)) == []


def test_a_fifo_a_symlink_or_anothers_entry_in_the_runner_registry_neither_hangs_nor_fools_a_run(
    tmp_path, own_runners_dir
):
    """`mkfifo $BENCH_RUNNERS_DIR/evil.json` used to hang every run before its first cell. A FIFO, a symlink and an
    entry owned by another user (held by a live process, so it would read as a live runner) are passed over: the run
    records its cell and names no other runner. A registry another user can write to is refused in one line."""
    os.mkfifo(own_runners_dir / "evil.json")
    planted = own_runners_dir / "planted.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(planted), json.dumps(entry_of(os.getpid(), "planted"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        os.chown(planted, 65534, 65534)
        (own_runners_dir / "link.json").symlink_to(planted)
        argv = [sys.executable, "-m", "bench", "--results", str(tmp_path), "run", "--hw", "cpu"]
        argv += ["--executor", "local", "--filter", SINGLE, "--run-id", "r"]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    print(f"a run next to a FIFO, a symlink and a foreign entry: {took:.1f} s")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "planted" not in done.stdout and "is running on this machine too" not in done.stdout
    assert [r.status for r in load_results(tmp_path / "cpu" / "r").records] == ["ok"]

    open_to_all = tmp_path / "open-registry"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o1777)
    refused = subprocess.run(
        [*argv[:-2], "--run-id", "r2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"BENCH_RUNNERS_DIR": str(open_to_all)},
    )
    assert one_line(refused) == (
        f"error: runner registry {open_to_all}: other users can write in it (mode 1777); it must be a folder only you "
        "can write in: remove it or point BENCH_RUNNERS_DIR at another"
    )
    assert not (tmp_path / "cpu" / "r2").exists()


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, sys.argv[2].encode())
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def entry_of(pid: int, run_id: str) -> dict:
    return {"pid": pid, "run_id": run_id, "run_dir": f"/tmp/{run_id}", "started": time.time()}
