"""Faults of the harness itself, and of the machine under it, against real runners (`python -m bench` processes, real
cells): the fork server SIGKILLed mid-cell, the client standing in for the launcher SIGSTOPped, a rank SIGSTOPped
inside a step, /dev/shm read-only (a mount namespace of the runner's own), the prepared model folder moved away. The
record names the harness (status `harness`, `harness_fault`), never the cell (docs/reliability.md)."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.isolation.fork_server import is_client
from bench.results.store import load_results
from tests.integration.test_faults import leftovers, only_run, rank_pids, wait_until

pytestmark = pytest.mark.integration

DDP = "one_adapter-none-ddp"
ZERO = "one_adapter-none-zero2"


def runner_argv(results: Path, cells: str, scenarios: Path | None = None) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--results", str(results)]
    argv += ["--scenarios", str(scenarios)] if scenarios else []
    return [*argv, "run", "--hw", "cpu", "--executor", "local", "--filter", cells]


@contextlib.contextmanager
def running(argv: list[str], output: Path, prefix: list[str] | None = None):
    """A runner writing to `output`; whatever it leaves behind is killed once the block ends."""
    with output.open("w") as out:
        runner = subprocess.Popen([*(prefix or []), *argv], stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        yield runner
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for line in leftovers(str(output.parent)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)


def children(pid: int) -> list[tuple[int, list[str]]]:
    """(pid, command line) of the live children of `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if entry.name.isdigit() and int(fields[1]) == pid and fields[0] != "Z":
            found.append((int(entry.name), args))
    return found


def fork_server_of(runner: subprocess.Popen) -> int:
    (server,) = [pid for pid, args in children(runner.pid) if "bench.isolation.fork_server_process" in args]
    return server


def test_a_fork_server_sigkilled_mid_cell_is_the_harness_s_and_the_cell_is_re_run_once(tmp_path):
    """kill -9 of the fork server while a 2-rank cell trains: its forked ranks die with it. It used to be recorded
    `error` "a rank was killed by SIGKILL"; now the server is started again and the cell re-run once."""
    with running(runner_argv(tmp_path, DDP), tmp_path / "runner.out") as runner:
        wait_until(lambda: len(rank_pids(str(tmp_path), DDP)) == 2, f"two live ranks of {DDP}", runner, 300)
        server = fork_server_of(runner)
        os.kill(server, signal.SIGKILL)
        assert runner.wait(timeout=300) == 0, (tmp_path / "runner.out").read_text()[-3000:]
    (record,) = load_results(only_run(tmp_path)).records
    assert (record.status, record.error_class) == ("ok", None), record.message
    assert record.metrics is not None and record.process_start == "forked"
    assert record.harness_fault.startswith(
        f"first try: the fork server (pid {server}) ended (killed by SIGKILL) while the cell ran, and the cell's "
        f"forked processes with it; re-run once; then: the fork server (pid {server}) had ended (killed by SIGKILL) "
        "before this cell: started again (pid "
    ), record.harness_fault
    logs = only_run(tmp_path) / "logs"
    assert (logs / f"{DDP}.first-try.log").is_file() and (logs / f"{DDP}.log").is_file()
    assert "notice: the fork server" in (tmp_path / "runner.out").read_text()
    assert leftovers(str(tmp_path)) == []
    print(f"re-run once: wall {record.wall_s:.1f} s; {record.harness_fault}")


def test_a_sigstopped_stand_in_for_the_launcher_keeps_the_cells_result(tmp_path):
    """SIGSTOP of the client standing in for the forked torchrun while both ranks train: the ranks finish and report,
    torchrun ends, its stand-in cannot pass the exit on. It used to be `timeout` at 120 s with `metrics: null`."""
    with running(runner_argv(tmp_path, DDP), tmp_path / "runner.out") as runner:
        wait_until(lambda: len(rank_pids(str(tmp_path), DDP)) == 2, f"two live ranks of {DDP}", runner, 300)
        (stand_in,) = [pid for pid, args in children(runner.pid) if is_client(args) and "torchrun" in " ".join(args)]
        os.kill(stand_in, signal.SIGSTOP)
        assert runner.wait(timeout=300) == 0, (tmp_path / "runner.out").read_text()[-3000:]
    (record,) = load_results(only_run(tmp_path)).records
    assert (record.status, record.exit_code) == ("ok", 0), record.message
    assert record.metrics is not None and record.metrics.tokens_per_s > 0
    assert record.harness_fault == (
        f"the fork server's stand-in for the cell's launcher (pid {stand_in}, state T) had not ended 5 s after the "
        "launcher ended (exit 0): the harness ended it and kept the launcher's own exit"
    )
    assert record.wall_s < 60, record.wall_s
    assert leftovers(str(tmp_path)) == []
    print(f"stand-in stopped: {record.status}, wall {record.wall_s:.1f} s")


def progress_line(cell_dir: Path, rank: int) -> tuple[str, int, int, float] | None:
    """(phase, step, pid, mtime) of a rank's progress mark, None without one."""
    path = cell_dir / f"progress.rank{rank}"
    try:
        when = path.stat().st_mtime
        phase, step, pid = path.read_text().split()
    except (OSError, ValueError):
        return None
    return phase, int(step), int(pid), when


def stop_rank_1_inside_a_step_behind_rank_0(cell_dir: Path, runner: subprocess.Popen) -> tuple[int, int]:
    """SIGSTOP rank 1 right after it began a step, until a try leaves both ranks inside the same step with rank 0's
    mark the older (the case the watchdog got wrong); returns (rank 1's pid, the step). Real signals, real timing:
    a try that misses is continued (SIGCONT) and tried again at a later step."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert runner.poll() is None, "the runner ended before rank 1 could be stopped inside a step"
        one = progress_line(cell_dir, 1)
        if one is None or one[0] != "began":
            time.sleep(0.002)
            continue
        os.kill(one[2], signal.SIGSTOP)
        time.sleep(1.0)  # rank 0 reaches the step's all-reduce and waits there
        one, zero = progress_line(cell_dir, 1), progress_line(cell_dir, 0)
        if one and zero and one[0] == zero[0] == "began" and one[1] == zero[1] and zero[3] < one[3]:
            return one[2], one[1]
        if one:
            os.kill(one[2], signal.SIGCONT)
        while (again := progress_line(cell_dir, 1)) is not None and again[:2] == (one or again)[:2]:
            time.sleep(0.002)  # wait for the next mark
    raise AssertionError("rank 1 was never stopped inside a step behind rank 0")


def test_a_rank_sigstopped_inside_a_step_is_the_rank_the_watchdog_names(tmp_path, scenario_copy):
    """It used to name rank 0, which waited inside the same step for rank 1's all-reduce, because rank 0's mark was
    older: "rank 0 made no progress ... rank 1 waits inside step k"."""
    profile = scenario_copy / "hardware" / "cpu.yaml"
    profile.write_text(profile.read_text().replace("stall_s: 60", "stall_s: 8"))
    (scenario_copy / "data").symlink_to(Path("scenarios/data").resolve())
    with running(runner_argv(tmp_path, DDP, scenario_copy), tmp_path / "runner.out") as runner:
        wait_until(
            lambda: list((tmp_path / "cpu").glob(f"*/cells/{DDP}/progress.rank1")), "rank 1 training", runner, 300
        )
        (cell_dir,) = (tmp_path / "cpu").glob(f"*/cells/{DDP}")
        pid, step = stop_rank_1_inside_a_step_behind_rank_0(cell_dir, runner)
        assert runner.wait(timeout=300) == 0, (tmp_path / "runner.out").read_text()[-3000:]
    (record,) = load_results(only_run(tmp_path)).records
    assert record.status == "hang", record.message
    assert record.message.startswith("rank 1 made no progress for ")
    assert f"inside step {step}, its process stopped (state T) (progress watchdog limit 8 s)" in record.message
    assert record.message.endswith(f"rank 0 waits inside step {step}")
    assert not Path(f"/proc/{pid}").exists() and leftovers(str(tmp_path)) == []
    print(record.message)


def private_shm(*mount: str) -> list[str]:
    """A runner's command prefix: a mount namespace of its own whose /dev/shm is a tmpfs mounted with `mount`."""
    options = ",".join(mount)
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount -t tmpfs -o {options} tmpfs /dev/shm && exec "$0" "$@"',
    ]


def test_a_read_only_dev_shm_is_refused_in_one_line_before_a_cell_starts(tmp_path):
    """It used to run the DeepSpeed cell, which waited for its allreduce buffer until the 120 s limit (`timeout`)."""
    argv = private_shm("ro", "size=1m") + runner_argv(tmp_path, f"one_adapter-none-single,{ZERO}")
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr == (
        "error: /dev/shm is not writable (Read-only file system): DeepSpeed's CPU allreduce makes its buffers "
        f"there, so 1 cell(s) ({ZERO}) would wait for them until their time limit; make /dev/shm writable (mount -o "
        "remount,rw /dev/shm) or leave those cells out with --filter\n"
    )
    assert "[  0/" not in done.stdout and not (tmp_path / "cpu").exists()
    print(f"refused in {time.monotonic() - started:.1f} s")


def test_dev_shm_turned_read_only_mid_run_ends_the_deepspeed_cell_at_once_as_the_harness_s(tmp_path):
    """/dev/shm remounted read-only once the run passed its checks: DeepSpeed prints `shared_create ... failed` and
    its ranks wait forever; the executor ends the cell as soon as the line is in its log."""
    output = tmp_path / "runner.out"
    with running(runner_argv(tmp_path, ZERO), output, private_shm("size=512m")) as runner:
        wait_until(lambda: f"{ZERO} ..." in output.read_text(), f"{ZERO} started", runner, 600)
        remount = ["nsenter", f"--mount=/proc/{runner.pid}/ns/mnt", "mount", "-o", "remount,ro", "/dev/shm"]
        subprocess.run(remount, check=True)
        assert runner.wait(timeout=300) == 0, output.read_text()[-3000:]
    (record,) = load_results(only_run(tmp_path)).records
    assert (record.status, record.error_class) == ("harness", None), record.message
    assert record.harness_fault == record.message
    assert record.message.startswith(
        "/dev/shm is not writable or full: DeepSpeed's CPU allreduce could not make its buffer there (shared_create "
        "deepspeed_allreduce_buffer_"
    ), record.message
    assert record.wall_s < 60, record.wall_s
    assert leftovers(str(tmp_path)) == []
    print(f"read-only /dev/shm mid-run: harness after {record.wall_s:.1f} s")


def test_a_moved_model_folder_is_prepared_again_and_the_cells_train(tmp_path):
    """The prepared tiny model folder moved away: every cell used to be `error` "Repo id must be in the form ..."."""
    from bench.assets.prepare import prepare
    from bench.matrix.profiles import load_workload

    model = Path(prepare(load_workload("tiny")).model)
    moved = tmp_path / "moved-model"
    shutil.move(model, moved)
    try:
        done = subprocess.run(
            runner_argv(tmp_path, "one_adapter-none-single"), capture_output=True, text=True, timeout=600
        )
    finally:
        if not model.exists():  # put the project's build back as it was
            shutil.move(moved, model)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"notice: the prepared model {model} is gone (moved or deleted): preparing again" in done.stdout
    (record,) = load_results(only_run(tmp_path)).records
    assert record.status == "ok", record.message
