"""Runners on one machine know of each other (bench/run/runner_registry.py): real processes register, live, end and die;
a cell measured while another runner ran is marked `overlapped_by` with that runner's run id."""

import io
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.results.schema import Engagement
from bench.run import runner_registry
from bench.run.runner import execute
from bench.run.runner_registry import overlapping, registered
from tests.unit.run.test_runner import DDP, FakeExecutor, context

OTHER = """
import sys, time
from pathlib import Path
from bench.run.runner_registry import registered
with registered(sys.argv[1], Path(sys.argv[2])) as others:
    print("registered", ",".join(o.run_id for o in others), flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def other_runner(tmp_path):
    """Start another runner (a process registered under a run id); stop it by closing its stdin."""
    started: list[subprocess.Popen] = []

    def start(run_id: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, "-c", OTHER, run_id, str(tmp_path / run_id)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout.readline().startswith("registered")
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def end(process: subprocess.Popen) -> None:
    process.stdin.close()
    assert process.wait(timeout=30) == 0


def test_runners_register_in_the_folder_the_environment_names(tmp_path):
    assert runner_registry.runners_dir() == Path(
        os.environ[runner_registry.RUNNERS_ENV]
    )  # tests/conftest.py: one per test
    with registered("mine", tmp_path / "mine") as others:
        assert others == []
        (entry,) = runner_registry.runners_dir().glob("*.json")
        assert '"run_id":"mine"' in entry.read_text()
    assert overlapping(0, time.time() + 1) == []  # this process's own runs never overlap it


def test_a_live_runner_is_named_at_start_and_overlaps_a_cell_measured_while_it_runs(tmp_path, other_runner):
    before = time.time()
    other = other_runner("theirs")
    with registered("mine", tmp_path / "mine") as others:
        assert [(o.run_id, o.pid) for o in others] == [("theirs", other.pid)]
        assert overlapping(time.time(), time.time()) == ["theirs"]  # alive now
        end(other)
        ended = time.time()
        assert overlapping(before, ended) == ["theirs"]  # it ran during the cell
        time.sleep(0.05)
        assert overlapping(time.time(), time.time()) == []  # a cell measured after it ended


def test_a_runner_started_and_ended_inside_a_cell_overlaps_it(tmp_path, other_runner):
    cell_started = time.time()
    end(other_runner("brief"))
    assert overlapping(cell_started, time.time()) == ["brief"]


def test_a_sigkilled_runner_overlapped_until_its_last_heartbeat(tmp_path, other_runner):
    other = other_runner("killed")
    (entry,) = runner_registry.runners_dir().glob("*.json")
    time.sleep(0.3)
    heartbeat = time.time() - 0.1  # its last sign of life
    os.utime(entry, (heartbeat, heartbeat))
    other.send_signal(signal.SIGKILL)
    other.wait()
    time.sleep(0.2)
    assert overlapping(heartbeat - 0.05, heartbeat - 0.01) == ["killed"]
    assert overlapping(heartbeat + 0.05, time.time()) == []  # a cell measured after it died


def test_the_heartbeat_keeps_a_live_runners_entry_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_registry, "HEARTBEAT_S", 0.05)
    with registered("mine", tmp_path / "mine"):
        (entry,) = runner_registry.runners_dir().glob("*.json")
        os.utime(entry, (0, 0))
        time.sleep(0.5)
        assert entry.stat().st_mtime > time.time() - 5


def test_entries_of_runners_gone_long_ago_are_forgotten(tmp_path, other_runner):
    end(other_runner("old"))
    (entry,) = runner_registry.runners_dir().glob("*.json")
    long_ago = time.time() - runner_registry.FORGET_S - 60
    os.utime(entry, (long_ago, long_ago))
    assert overlapping(0, time.time()) == []
    assert not entry.exists()


def test_a_folder_that_cannot_be_written_leaves_the_run_unregistered(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(runner_registry.RUNNERS_ENV, str(blocked / "runners"))
    with registered("mine", tmp_path / "mine") as others:
        assert others == []
    assert overlapping(0, time.time()) == []


def test_every_cell_measured_while_another_runner_ran_is_marked(tmp_path, cpu_profile, other_runner):

    ran = Engagement(world_size=2, distributed_type="MULTI_CPU", wrapper="DistributedDataParallel")
    (alone,) = execute(context(tmp_path / "alone", cpu_profile, FakeExecutor(ran)), [DDP], out=io.StringIO())
    assert alone.overlapped_by == []
    other = other_runner("theirs")
    (shared,) = execute(context(tmp_path / "shared", cpu_profile, FakeExecutor(ran)), [DDP], out=io.StringIO())
    assert shared.overlapped_by == ["theirs"]
    end(other)


def test_the_default_registry_is_the_users_own_and_made_only_they_can_enter(tmp_path, monkeypatch):
    monkeypatch.delenv(runner_registry.RUNNERS_ENV)
    assert runner_registry.runners_dir() == Path(tempfile.gettempdir()) / f"dpo-bench-runners-{os.getuid()}"
    folder = tmp_path / "made" / "runners"
    monkeypatch.setenv(runner_registry.RUNNERS_ENV, str(folder))
    with registered("mine", tmp_path / "mine"):
        (entry,) = folder.glob("*.json")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(entry.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda f: (f.mkdir(), f.chmod(0o1777)), "other users can write in it (mode 1777)"),
        (lambda f: (f.mkdir(), os.chown(f, 65534, 65534)), f"owned by uid 65534, not by you (uid {os.getuid()})"),
        (lambda f: (f.parent.joinpath("real").mkdir(mode=0o700), f.symlink_to(f.parent / "real")), "a symbolic link"),
    ],
    ids=["open-to-all", "another-users", "symlink"],
)
def test_a_registry_another_user_could_write_in_is_refused_in_one_line(tmp_path, monkeypatch, make, why):
    folder = tmp_path / "registry"
    make(folder)
    monkeypatch.setenv(runner_registry.RUNNERS_ENV, str(folder))
    with pytest.raises(BenchError) as refused, registered("mine", tmp_path / "mine"):
        pass
    assert str(refused.value) == (
        f"runner registry {folder}: {why}; it must be a folder only you can write in: remove it or point "
        "BENCH_RUNNERS_DIR at another"
    )


def test_a_fifo_a_symlink_and_another_users_entry_are_passed_over_never_waited_on(tmp_path, other_runner):
    """A FIFO planted as an entry used to block every reader in open(); a symlink or another user's file holding a
    valid entry (even one a live process holds) would have named a runner that is not one of this user's."""
    other = other_runner("theirs")
    folder = runner_registry.runners_dir()
    (theirs,) = folder.glob("*.json")
    os.mkfifo(folder / "evil.json")
    (folder / "link.json").symlink_to(theirs)
    planted = folder / "planted.json"
    planted.write_text(
        runner_registry.RunnerEntry(pid=other.pid, run_id="planted", run_dir="/x", started=0).model_dump_json()
    )
    os.chown(planted, 65534, 65534)
    (folder / "huge.json").write_bytes(b" " * (runner_registry.ENTRY_LIMIT + 1))
    found: list = []
    reader = threading.Thread(target=lambda: found.append(runner_registry.seen()), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "reading the registry blocked"
    assert [(s.runner.run_id, s.ended) for s in found[0]] == [("theirs", None)]
