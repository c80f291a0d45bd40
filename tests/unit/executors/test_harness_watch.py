"""The harness's own faults with real processes and real signals: a fork server SIGKILLed before it forks, between
cells and during one, and the client standing in for a forked launcher SIGSTOPped while the launcher ends. Each ends
as a HarnessFault (bench/executors/harness_watch.py), never as the cell's own failure; the cells run through
bench/executors/local.py as a run's cells do."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bench.executors.base import LaunchPlan, Outcome
from bench.executors.harness_watch import STAND_IN_GRACE_S, server_death
from bench.executors.local import LocalExecutor, run_local
from bench.isolation.fork_server import ForkServer, how_it_ended, is_client
from bench.isolation.fork_server_client import FRESH_ENV
from bench.isolation.shm_segments import create_failure
from bench.paths import PROJECT_ROOT

PRELOAD = "os:getpid"
FORKED = "from bench.isolation import fork_server_child; print('forked', fork_server_child.FORKED, flush=True)"


@pytest.fixture
def serving(tmp_path):
    """A local executor whose cells fork from a fork server of their own (the tests kill it); in this checkout, as a
    run's (the server imports `bench` from its working folder). Started in the test itself: pytest names the phase it
    is in in the environment, which a request must share with the server."""
    local = LocalExecutor(PROJECT_ROOT)
    servers: list[ForkServer] = []

    def serve() -> LocalExecutor:
        server = local.start_fork_server({}, PRELOAD, tmp_path / "server.log")
        servers.append(server)
        assert server.wait(60) is None, (tmp_path / "server.log").read_text()
        local.fork_server = server
        return local

    yield serve
    for server in servers:
        server.stop()


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def kill_server(server: ForkServer) -> int:
    pid = server.process.pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: server.ended() is not None)
    return pid


def in_thread(call) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def test_a_server_killed_before_it_forks_leaves_the_client_to_start_fresh(serving):
    """kill -9 of the fork server while a cell's launcher connects (its request unread): the client used to end with
    a ConnectionResetError traceback (the cell `error`); nothing was forked yet, so the program starts fresh."""
    executor = serving()
    server = executor.fork_server
    os.kill(server.process.pid, signal.SIGSTOP)  # it accepts nothing more: the request waits in its backlog
    code = f"import os; print('ran', os.environ.get('{FRESH_ENV}'))"
    env = os.environ | server.env
    client = subprocess.Popen([server.client, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: Path(f"/proc/{client.pid}/wchan").read_text() == "unix_stream_read_generic")
    kill_server(server)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err.decode()[-2000:]
    assert out.decode().startswith("ran the fork server at ") and "ended before it forked" in out.decode()


def test_a_server_that_died_between_cells_is_started_again_for_the_next(serving, tmp_path):
    executor = serving()
    server = executor.fork_server
    old_folder, pid = server.folder, kill_server(executor.fork_server)
    outcome = executor.run(LaunchPlan(argv=[executor.python, "-c", FORKED]), tmp_path / "cell.log", 60, {})
    assert outcome.exit_code == 0 and "forked True" in (tmp_path / "cell.log").read_text()
    fault = outcome.harness_fault
    assert fault is not None and not fault.spoiled
    assert fault.what.startswith(f"the fork server (pid {pid}) had ended (killed by SIGKILL) before this cell: ")
    assert f"started again (pid {server.process.pid}, " in fault.what
    assert executor.fork_server is server and server.ended() is None and not old_folder.exists()
    again = executor.run(LaunchPlan(argv=[executor.python, "-c", FORKED]), tmp_path / "next.log", 60, {})
    assert again.harness_fault is None  # the next cell has nothing to say


def test_a_server_that_cannot_be_started_again_leaves_the_cells_to_start_fresh(serving, tmp_path):
    executor = serving()
    server = executor.fork_server
    kill_server(server)
    server.launch = server.launch.__class__(**{**server.launch.__dict__, "preload": "no_such_module:f"})
    outcome = executor.run(LaunchPlan(argv=[executor.python, "-c", FORKED]), tmp_path / "cell.log", 60, {})
    assert outcome.exit_code == 0 and "forked False" in (tmp_path / "cell.log").read_text()
    assert "could not be started again (it ended before serving" in outcome.harness_fault.what
    assert outcome.harness_fault.what.endswith(": the cells start fresh") and executor.fork_server is None


def test_a_server_killed_during_a_cell_is_the_harness_s_fault_and_safe_to_retry(serving, tmp_path):
    """The cell's forked processes die with the server (their parent-death signal): the launcher ends by SIGKILL,
    which used to be recorded as the cell's crash ("a rank was killed by SIGKILL")."""
    executor = serving()
    ready = tmp_path / "ready"
    code = f"import os, time, pathlib; pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(300)"
    launch = LaunchPlan(argv=[executor.python, "-c", code])
    thread, out = in_thread(lambda: executor.run(launch, tmp_path / "cell.log", 120, {}))
    wait_for(ready.exists)
    child = int(ready.read_text())
    pid = kill_server(executor.fork_server)
    thread.join(60)
    (outcome,) = out
    assert (outcome.exit_code, outcome.timed_out) == (-signal.SIGKILL, False) and outcome.wall_s < 60
    assert outcome.harness_fault.spoiled and outcome.harness_fault.retry
    assert outcome.harness_fault.what == (
        f"the fork server (pid {pid}) ended (killed by SIGKILL) while the cell ran, and the cell's forked processes "
        "with it"
    )
    wait_for(lambda: not Path(f"/proc/{child}").exists())


def test_a_dead_server_is_no_fault_of_the_cell_that_starts_fresh_without_it(serving, tmp_path):
    executor = serving()
    kill_server(executor.fork_server)
    launch = LaunchPlan(argv=[executor.python, "-c", FORKED + "; raise SystemExit(3)"])
    outcome = run_local(launch, tmp_path / "cell.log", 60, PROJECT_ROOT, fork_server=executor.fork_server)
    assert (outcome.exit_code, outcome.harness_fault) == (3, None)
    assert "forked False" in (tmp_path / "cell.log").read_text()


def test_server_death_blames_the_harness_only_for_a_cell_that_failed(serving):
    executor = serving()
    assert server_death(executor.fork_server, cell_failed=True) is None  # alive: no fault
    pid = kill_server(executor.fork_server)
    ended_well = server_death(executor.fork_server, cell_failed=False)
    assert not ended_well.spoiled and not ended_well.retry
    assert ended_well.what == f"the fork server (pid {pid}) ended (killed by SIGKILL) as the cell ended well"
    assert how_it_ended(0) == "exit 0" and how_it_ended(-99) == "killed by signal 99"


def launcher_clients() -> list[int]:
    """The fork-server clients this process started: the stand-ins of its cells' forked launchers."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[1]) == os.getpid() and is_client(args):
            found.append(int(entry.name))
    return found


def test_a_stopped_stand_in_for_the_launcher_ends_with_the_launchers_own_exit(serving, tmp_path):
    """SIGSTOP of the client standing in for a forked launcher while the launcher finishes: the cell used to wait for
    its whole time limit (`timeout`, no figures although every rank had reported); now the harness ends the stand-in
    a few seconds after the launcher ended, keeping the launcher's exit and naming the fault."""
    executor = serving()
    go, ready = tmp_path / "go", tmp_path / "ready"
    code = (
        f"import pathlib, time; pathlib.Path({str(ready)!r}).touch()\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "print('launcher done', flush=True)\n"
    )
    launch = LaunchPlan(argv=[executor.python, "-c", code])
    thread, out = in_thread(lambda: executor.run(launch, tmp_path / "cell.log", 40, {}))
    wait_for(ready.exists)
    (stand_in,) = launcher_clients()
    os.kill(stand_in, signal.SIGSTOP)
    go.touch()
    thread.join(60)
    (outcome,) = out
    assert isinstance(outcome, Outcome) and not outcome.timed_out, outcome
    assert outcome.exit_code == 0 and outcome.wall_s < STAND_IN_GRACE_S + 20
    assert not outcome.harness_fault.spoiled
    assert outcome.harness_fault.what == (
        f"the fork server's stand-in for the cell's launcher (pid {stand_in}, state T) had not ended "
        f"{STAND_IN_GRACE_S:g} s after the launcher ended (exit 0): the harness ended it and kept the launcher's own "
        "exit"
    )
    assert not Path(f"/proc/{stand_in}").exists() or Path(f"/proc/{stand_in}/stat").read_text().split()[2] == "Z"
    assert not list((executor.fork_server.folder / "ended").iterdir())  # forgotten with the cell


def test_the_line_deepspeed_prints_when_it_cannot_make_its_buffer_is_found():
    # as a DeepSpeed cell logged it on a read-only /dev/shm (results of the hostile run, one_adapter-none-zero2)
    log = (
        "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully\n"
        "shared_create deepspeed_allreduce_buffer_0_127.0.0.1_49161_0 failed\n"
    )
    assert create_failure(log) == "shared_create deepspeed_allreduce_buffer_0_127.0.0.1_49161_0 failed"
    assert create_failure("shared_open deepspeed_allreduce_buffer_0 failed, errno=2\n") is None
