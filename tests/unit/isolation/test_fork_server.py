"""The fork server with real processes: a child becomes the program with the client's streams, environment, exit and
signals; a killed client or cell leaves no child; a child's memory starts where the server's was; what it cannot
serve starts fresh, saying why."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.executors.base import LaunchPlan
from bench.executors.local import run_local
from bench.isolation.fork_server import ForkServer, is_client, route
from bench.isolation.fork_server_client import FRESH_ENV
from bench.paths import PROJECT_ROOT

PRELOAD = "os:getpid"
"""The tests' preload: nothing to import, a server in a fraction of a second."""
TOKEN = "BENCH_CELL_TOKEN"


BASE_ENV = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
"""The server's environment, which every request must match but for per-process variables (pytest changes
PYTEST_CURRENT_TEST from test to test)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("fork_server") / "server.log"
    started = ForkServer.start(sys.executable, PROJECT_ROOT, BASE_ENV, PRELOAD, log)
    assert started.wait(60) is None, log.read_text()
    yield started
    started.stop()
    assert not started.folder.exists()


def client_env(server: ForkServer, **extra: str) -> dict[str, str]:
    return BASE_ENV | server.env | extra


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_a_child_runs_the_program_with_the_clients_streams_environment_and_exit_code(server, tmp_path):
    code = (
        "import os, sys; print(os.environ['RANK'], sys.argv[1:], os.getcwd()); "
        "print('err', file=sys.stderr); sys.exit(3)"
    )
    done = subprocess.run(
        [server.client, "-u", "-c", code, "a", "b"],
        env=client_env(server, RANK="5"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert done.stdout == f"5 ['a', 'b'] {tmp_path}\n" and done.stderr == "err\n"


def test_a_child_is_forked_not_started(server):
    code = (
        "import os, sys; from bench.isolation import fork_server_child; "
        f"print(fork_server_child.FORKED, os.environ.get('{FRESH_ENV}'), sys.executable, os.getppid())"
    )
    done = subprocess.run(
        [server.client, "-c", code], env=client_env(server), capture_output=True, text=True, timeout=60
    )
    forked, reason, executable, parent = done.stdout.split()[-4:]
    assert (forked, reason, executable, int(parent)) == ("True", "None", server.client, server.process.pid)


def test_a_child_killed_by_a_signal_ends_its_client_by_the_same_signal(server):
    done = subprocess.run(
        [server.client, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
        env=client_env(server),
        timeout=60,
    )
    assert done.returncode == -signal.SIGTERM


def test_the_client_forwards_the_signals_a_launcher_sends_its_rank(server, tmp_path):
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        f"pathlib.Path({str(ready)!r}).write_text('1')\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen([server.client, "-c", code], env=client_env(server))
    try:
        wait_for(ready.exists)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 7
    finally:
        process.kill()


def test_a_sigkilled_client_leaves_no_child(server, tmp_path):
    ready = tmp_path / "ready"
    code = f"import os, time, pathlib; pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(300)"
    process = subprocess.Popen([server.client, "-c", code], env=client_env(server, **{TOKEN: "killedclient"}))
    try:
        wait_for(ready.exists)
        child = int(ready.read_text())
        wait_for(lambda: server.pids_of("killedclient") == [child])
    finally:
        process.kill()
        process.wait()
    wait_for(lambda: not Path(f"/proc/{child}").exists() and not server.pids_of("killedclient"))


def test_a_childs_memory_starts_with_the_pages_the_server_had_resident(server, tmp_path):
    """A fork copies the entries of anonymous pages, not of file mappings: the child maps the server's resident
    library pages again, so its RSS starts where a fresh process's would after the same imports."""
    code = "import pathlib; print(pathlib.Path('/proc/self/status').read_text())"
    done = subprocess.run(
        [server.client, "-c", code], env=client_env(server), capture_output=True, text=True, timeout=60
    )
    child = {line.split(":")[0]: int(line.split()[1]) for line in done.stdout.splitlines() if "kB" in line}
    assert child["RssFile"] >= 0.9 * status_kib(server.process.pid, "RssFile")


@pytest.mark.parametrize(
    ("argv", "extra", "reason"),
    [
        (["-X", "importtime", "-c", "import os; print(os.environ.get('{fresh}'))"], {}, "python option -X"),
        (["-c", "import os; print(os.environ.get('{fresh}'))"], {"HF_HOME": "/elsewhere"}, "differs"),
    ],
)
def test_what_the_server_cannot_serve_starts_fresh_saying_why(server, argv, extra, reason):
    argv = [item.replace("{fresh}", FRESH_ENV) for item in argv]
    done = subprocess.run(
        [server.client, *argv], env=client_env(server, **extra), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and reason in done.stdout


def test_without_a_server_the_client_starts_fresh(server):
    env = client_env(server) | {"BENCH_FORK_SERVER_SOCKET": "/nonexistent/socket"}
    code = f"import os; print(os.environ['{FRESH_ENV}'])"
    done = subprocess.run([server.client, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "unreachable" in done.stdout


def test_a_cell_past_its_time_limit_loses_the_servers_children(server, tmp_path):
    ready = tmp_path / "ready"
    code = f"import os, time, pathlib; pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(300)"
    launch = LaunchPlan(argv=[sys.executable, "-c", code])
    outcome = run_local(launch, tmp_path / "log", timeout_s=3, cwd=tmp_path, fork_server=server, python=sys.executable)
    assert outcome.timed_out
    child = int(ready.read_text())
    assert child not in (server.process.pid, os.getpid())
    wait_for(lambda: not Path(f"/proc/{child}").exists())
    assert not list((server.folder / "children").iterdir())


def test_the_interpreter_and_the_scripts_it_runs_are_routed_through_the_client(tmp_path):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("")
    script = python.parent / "torchrun"
    script.write_text(f"#!{python}\nimport sys\n")
    other = python.parent / "mpirun"
    other.write_text("\x7fELF")
    client = "/z/bin/python"
    assert route([str(python), "-m", "bench.worker", "s"], str(python), client) == [client, "-m", "bench.worker", "s"]
    assert route([str(script), "--standalone"], str(python), client) == [client, str(script), "--standalone"]
    assert route([str(other), "-np", "2", str(python), "-m", "w"], str(python), client) == [
        str(other),
        "-np",
        "2",
        client,
        "-m",
        "w",
    ]


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_sigkilled_child_ends_its_client_by_sigkill(server):
    """How a launcher tells a killed rank from one that failed (torchrun: "Signal 9 (SIGKILL) received")."""
    done = subprocess.run(
        [server.client, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        env=client_env(server),
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL


def test_a_child_shows_its_programs_command_line(server, tmp_path):
    """ps, nvidia-smi and whoever looks for a cell's processes see the program, not N copies of the server."""
    ready = tmp_path / "ready"
    code = f"import os, time, pathlib; pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(60)"
    process = subprocess.Popen([server.client, "-u", "-c", code, "arg1"], env=client_env(server))
    try:
        wait_for(ready.exists)
        shown = Path(f"/proc/{ready.read_text()}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        assert shown == [server.client.encode(), b"-u", b"-c", code.encode(), b"arg1"]
        client = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode().split("\0")
        assert is_client(client) and not is_client([a.decode() for a in shown])
    finally:
        process.kill()
