"""Before a run starts, it cleans up after every dead runner of the same profile, and leaves live runners alone."""

import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.executors.local import LIVE_FILE, MARKER, LiveCell
from bench.isolation.server_folder import FOLDER_PREFIX, OWNER, UNNAMED_GRACE_S
from bench.results.lock import lock_run
from bench.run import leftovers
from bench.run.leftovers import clean_up_dead_runners
from tests.unit.results.test_lock import HOLDER


def left_cell(run_dir: Path) -> subprocess.Popen:
    """A process of a cell whose runner died (it survived: nothing armed it), named in the run's LIVE_FILE."""
    token = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], env=os.environ | {MARKER: token}, start_new_session=True
    )
    run_dir.mkdir(parents=True)
    live = LiveCell(
        runner_pid=1 << 22,
        cell=f"cell-of-{run_dir.name}",
        process_group=process.pid,
        token=token,
        extensions_dir=str(run_dir),
        started_epoch=time.time(),
    )
    (run_dir / LIVE_FILE).write_text(live.model_dump_json())
    return process


def test_dead_runners_are_cleaned_up_after_and_a_live_one_is_left_alone(tmp_path):
    hardware = tmp_path / "cpu"
    dead, own, busy = (left_cell(hardware / name) for name in ("dead", "own", "busy"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(hardware / "busy")], stdout=subprocess.PIPE, text=True)
    mine = None
    try:
        assert holder.stdout.readline() == "locked\n"
        mine = lock_run(hardware / "own")  # this runner's run: it holds the lock itself
        lines = clean_up_dead_runners(hardware, hardware / "own")
        assert lines == [
            f"run {name}: runner {1 << 22} ended during cell-of-{name} without cleaning up: killed 1 process(es) of "
            f"process group {process.pid}"
            for name, process in (("dead", dead), ("own", own))
        ]
        assert dead.wait(timeout=5) == own.wait(timeout=5) == -signal.SIGKILL
        assert busy.poll() is None and (hardware / "busy" / LIVE_FILE).exists()  # its runner is alive
        assert clean_up_dead_runners(hardware, hardware / "own") == []
    finally:
        for process in (dead, own, busy, holder):
            process.kill()
        if mine:
            mine.release()


def died_holding_run(run_dir: Path) -> int:
    """A runner that held `run_dir` and was SIGKILLed: its pid stays in the lock file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    return holder.pid


@pytest.fixture
def engines(monkeypatch):
    """Docker and Slurm as the leftovers module sees them: the containers each run folder labels, the jobs each run's
    registry names; what was removed or cancelled is recorded."""
    state = {"containers": {}, "removed": [], "jobs": {}, "cancelled": []}

    def cancel_jobs_of(run_dir: Path, wait_s: float = 30.0):
        jobs = state["jobs"].get(run_dir, [])
        state["cancelled"] += jobs
        return jobs, []

    monkeypatch.setattr(leftovers, "labelled_containers", lambda: state["containers"])
    monkeypatch.setattr(leftovers, "remove_container", state["removed"].append)
    monkeypatch.setattr("bench.executors.slurm.jobs.cancel_jobs_of", cancel_jobs_of)
    return state


def test_containers_and_jobs_of_runs_whose_runner_died_are_removed_and_a_live_runs_are_not(tmp_path, engines):
    hardware = tmp_path / "cpu"
    dead = died_holding_run(hardware / "dead")
    (hardware / "finished").mkdir()
    (hardware / "busy").mkdir()
    (hardware / "own").mkdir()
    lock_run(hardware / "finished").release()  # ended cleanly: its containers are not leftovers of a dead runner
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(hardware / "busy")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        for name in ("dead", "finished", "busy"):
            run = (hardware / name).resolve()
            engines["containers"][run] = [f"dpo-bench-{name}-cell"]
            engines["jobs"][run] = [f"{len(name)}00"]
            (run / "slurm_jobs.json").write_text("{}")
        mine = lock_run(hardware / "own")
        lines = leftovers.clean_up_dead_runners(hardware, hardware / "own")
        mine.release()
    finally:
        holder.kill()
        holder.wait()
    assert lines == [
        f"run dead: runner {dead} ended without cleaning up: removed container(s) dpo-bench-dead-cell",
        f"run dead: runner {dead} ended without cleaning up: cancelled Slurm job(s) 400",
    ]
    assert engines["removed"] == ["dpo-bench-dead-cell"] and engines["cancelled"] == ["400"]


def test_the_own_runs_leftovers_go_when_it_is_taken_over_and_its_jobs_stay_for_a_slurm_resume(tmp_path, engines):
    hardware = tmp_path / "cpu"
    dead = died_holding_run(hardware / "own")
    own = (hardware / "own").resolve()
    engines["containers"][own] = ["dpo-bench-own-cell"]
    engines["jobs"][own] = ["7"]
    (own / "slurm_jobs.json").write_text("{}")
    lock = lock_run(hardware / "own")
    assert lock.dead_holder == dead
    try:
        kept = leftovers.clean_up_dead_runners(hardware, hardware / "own", lock.dead_holder, resumes_jobs=True)
        assert kept == [f"run own: runner {dead} ended without cleaning up: removed container(s) dpo-bench-own-cell"]
        assert engines["cancelled"] == []
        cancelled = leftovers.clean_up_dead_runners(hardware, hardware / "own", lock.dead_holder)
        assert cancelled[-1] == f"run own: runner {dead} ended without cleaning up: cancelled Slurm job(s) 7"
        assert leftovers.clean_up_dead_runners(hardware, hardware / "own", None) == []  # a clean previous end
    finally:
        lock.release()


CLAIM = """
import sys
from pathlib import Path
from bench.isolation.server_folder import claim_folder
folder, fd = claim_folder(Path(sys.argv[1]))
print(folder, flush=True)
sys.stdin.read()
"""


def runner_with_folder(parent: Path) -> tuple[subprocess.Popen, Path]:
    """A runner that made a fork-server folder in `parent` and holds it while it lives."""
    process = subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(parent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return process, Path(process.stdout.readline().strip())


def test_a_dead_runners_fork_server_folder_is_removed_and_a_live_runners_kept(tmp_path):
    (live, live_folder), (dead, dead_folder) = runner_with_folder(tmp_path), runner_with_folder(tmp_path)
    try:
        assert stat.S_IMODE(dead_folder.stat().st_mode) == 0o700 and dead_folder.stat().st_uid == os.getuid()
        assert (dead_folder / OWNER).read_text() == str(dead.pid)
        assert leftovers.remove_left_fork_folders(tmp_path) == []  # both runners live
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        assert leftovers.remove_left_fork_folders(tmp_path) == [
            f"fork server folder {dead_folder} of runner {dead.pid}, which is gone"
        ]
        assert not dead_folder.exists() and live_folder.is_dir()
    finally:
        live.kill()
        live.wait()


def test_a_folder_naming_no_runner_goes_only_once_old_unused_and_the_users_own(tmp_path):
    """Folders made before runners named themselves (or one being made): removed once unchanged for a minute, unless
    a live process names it (its server, a client); never another user's, never through a symbolic link."""
    long_ago = time.time() - UNNAMED_GRACE_S - 60
    folders = {name: tmp_path / f"{FOLDER_PREFIX}{name}" for name in ("young", "old", "used", "foreign")}
    for name, folder in folders.items():
        folder.mkdir(mode=0o700)
        if name != "young":
            os.utime(folder, (long_ago, long_ago))
    os.chown(folders["foreign"], 65534, 65534)
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.utime(target, (long_ago, long_ago))
    (tmp_path / f"{FOLDER_PREFIX}link").symlink_to(target)
    user = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", str(folders["used"] / "bin/python")],
        stdin=subprocess.PIPE,
    )
    try:
        while str(folders["used"]).encode() not in Path(f"/proc/{user.pid}/cmdline").read_bytes():
            time.sleep(0.01)  # a process's command line shows a moment after exec returns to its parent
        lines = leftovers.remove_left_fork_folders(tmp_path)
    finally:
        user.kill()
        user.wait()
    assert lines == [f"fork server folder {folders['old']} that no live process uses"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{FOLDER_PREFIX}{name}" for name in ("young", "used", "foreign", "link")] + ["elsewhere"]
    )
