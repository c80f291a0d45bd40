"""One runner per run: real processes hold and lose the run's flock."""

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.errors import BenchError
from bench.results.lock import LOCK_FILE, RunBusy, died_holding, lock_run, runner_gone

HOLDER = """
import sys, time
from pathlib import Path
from bench.results.lock import lock_run
lock = lock_run(Path(sys.argv[1]))
print("locked", flush=True)
time.sleep(300)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the run's lock (as a runner does while it runs)."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "locked\n"
    yield process
    process.kill()
    process.wait()


def test_a_second_runner_stops_at_once_naming_the_first_ones_pid(tmp_path, holder):
    started = time.monotonic()
    with pytest.raises(RunBusy) as raised:
        lock_run(tmp_path)
    assert time.monotonic() - started < 1
    message = str(raised.value)
    assert message == (
        f"run {tmp_path.name} is already being run by pid {holder.pid} (lock {tmp_path / LOCK_FILE}): wait for it "
        "to end, or stop it first"
    )
    assert "\n" not in message
    with runner_gone(tmp_path) as gone:
        assert gone is False


def test_the_lock_of_a_killed_runner_is_taken_over(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / LOCK_FILE).read_text() == f"{holder.pid}\n"  # the dead runner's pid stays in the file
    with runner_gone(tmp_path) as gone:
        assert gone is True
    lock = lock_run(tmp_path)
    assert lock.dead_holder == holder.pid
    assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    lock.release()


def test_a_clean_end_leaves_no_dead_holder(tmp_path):
    first = lock_run(tmp_path)
    first.release()
    assert (tmp_path / LOCK_FILE).read_text() == ""
    second = lock_run(tmp_path)
    assert second.dead_holder is None
    second.release()
    second.release()  # idempotent


def test_the_lock_is_not_inherited_by_the_cells_a_runner_starts(tmp_path):
    lock = lock_run(tmp_path)
    # even a child that keeps every inheritable descriptor: the lock's is close-on-exec
    code = "import time; print('started', flush=True); time.sleep(300)"
    child = subprocess.Popen([sys.executable, "-c", code], close_fds=False, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "started\n"  # past its exec (the kernel closes such descriptors there)
        lock.release()
        again = lock_run(tmp_path)  # the child does not hold it
        again.release()
    finally:
        child.kill()
        child.wait()


def test_a_run_whose_runner_died_holding_it_names_that_runner(tmp_path, holder):
    with died_holding(tmp_path) as pid:
        assert pid is None  # its runner is alive
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with died_holding(tmp_path) as pid:
        assert pid == holder.pid
        with pytest.raises(RunBusy):  # held while the caller cleans up after it
            lock_run(tmp_path)
    assert (tmp_path / LOCK_FILE).read_text() == f"{holder.pid}\n"  # the resume still takes it over by name


def test_a_run_that_ended_cleanly_or_never_ran_names_no_dead_runner(tmp_path):
    with died_holding(tmp_path / "never") as pid:
        assert pid is None and not (tmp_path / "never").exists()
    lock_run(tmp_path).release()
    with died_holding(tmp_path) as pid:
        assert pid is None


def test_a_lock_file_linked_elsewhere_is_refused_not_truncated(tmp_path, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("user") / "notes.txt"
    elsewhere.write_text("the user's own\n")
    (tmp_path / LOCK_FILE).symlink_to(elsewhere)
    with pytest.raises(BenchError) as refused:
        lock_run(tmp_path)
    assert str(refused.value) == (
        f"cannot open the run's lock file {tmp_path / LOCK_FILE}: a symbolic link; the suite writes through none"
    )
    assert elsewhere.read_text() == "the user's own\n"
