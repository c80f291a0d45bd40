"""A runner SIGKILLed mid-cell: its launcher and ranks die with it, and what it leaves is named in the run folder
for the next run to clean up (real processes, real cgroups, real signals)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.executors.local import LIVE_FILE, MARKER, LiveCell, clean_up_after, marked_pids
from tests.unit.executors.test_local_executor import MIB, ROOT, own_cgroup  # noqa: F401 (a fixture)
from tests.unit.isolation.test_lifeline import gone, wait_gone

# launcher -> middle (a session of its own, no lifeline: deepspeed's launch.py) -> 2 ranks (as bench.worker starts),
# and two stragglers that nothing arms (daemons a library left), one in the launcher's process group, one in a
# session of its own: only the next run's clean-up ends them.
RANK = """
import os, sys, time
from bench.isolation import lifeline
lifeline.die_with_parent(os.getppid())
lifeline.die_with_runner(os.environ)
time.sleep(300)
"""
MIDDLE = """
import subprocess, sys
ranks = [subprocess.Popen([sys.executable, sys.argv[1]]) for _ in range(2)]
open(sys.argv[2], "w").write(" ".join(str(r.pid) for r in ranks))
[r.wait() for r in ranks]
"""
LAUNCHER = """
import os, subprocess, sys, time
middle = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2], sys.argv[3]], start_new_session=True)
straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
in_group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[4], "w").write(f"{os.getpid()} {middle.pid} {straggler.pid} {in_group.pid}")
time.sleep(300)
"""
RUNNER = """
import sys
from pathlib import Path
from bench.executors.base import LaunchPlan
from bench.executors.local import run_local
argv, run_dir = sys.argv[3:], Path(sys.argv[1])
(run_dir / "logs").mkdir()
launch = LaunchPlan(argv=argv, ranks=2, env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": sys.argv[2]})
run_local(launch, run_dir / "logs" / "cell.log", 300, run_dir, 64 << 20, run_dir / "running.json")
"""


def wait_for(path: Path, runner: subprocess.Popen, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text()):
        assert runner.poll() is None, f"the runner ended (exit {runner.returncode})"
        assert time.monotonic() < deadline, f"no {path.name} after {timeout_s} s"
        time.sleep(0.05)
    return path.read_text()


def test_a_killed_runner_takes_its_cell_along_and_the_next_run_cleans_up(tmp_path, own_cgroup, monkeypatch):  # noqa: F811
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    scripts = {}
    for name, text in {"rank": RANK, "middle": MIDDLE, "launcher": LAUNCHER, "runner": RUNNER}.items():
        scripts[name] = tmp_path / f"{name}.py"
        scripts[name].write_text(text)
    port = str(40000 + os.getpid() % 20000)
    segment = Path("/dev/shm") / f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_0"
    run_dir, ranks_file, launched_file = tmp_path / "run", tmp_path / "ranks", tmp_path / "launched"
    run_dir.mkdir()
    argv = [sys.executable, scripts["launcher"], scripts["middle"], scripts["rank"], ranks_file, launched_file]
    runner = subprocess.Popen([sys.executable, scripts["runner"], run_dir, port, *map(str, argv)])
    stragglers = []
    try:
        launcher, middle, *stragglers = map(int, wait_for(launched_file, runner).split())
        ranks = list(map(int, wait_for(ranks_file, runner).split()))
        segment.write_bytes(b"\0" * 4096)  # as DeepSpeed's CPU allreduce leaves one
        live = LiveCell.model_validate_json(wait_for(run_dir / LIVE_FILE, runner))
        assert (live.runner_pid, live.process_group, live.cell) == (runner.pid, launcher, "cell")
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        killed_at = time.monotonic()
        for pid in [launcher, *ranks, middle]:  # the middle one ends once its ranks have
            assert wait_gone(pid, 5 - (time.monotonic() - killed_at)), f"{pid} outlived its runner by 5 s"
        print(f"launcher, middle and ranks gone {time.monotonic() - killed_at:.2f} s after the runner's SIGKILL")
        assert not any(map(gone, stragglers)) and Path(live.cgroup).is_dir() and segment.exists()

        line = clean_up_after(run_dir / LIVE_FILE)
        assert line == (
            f"runner {runner.pid} ended during cell without cleaning up: killed 2 process(es) of process group "
            f"{launcher}; removed cgroup {live.cgroup}; removed 1 shared-memory segment(s) ({segment.name})"
        )
        assert all(wait_gone(pid, 5) for pid in stragglers) and not Path(live.cgroup).exists() and not segment.exists()
        assert not (run_dir / LIVE_FILE).exists() and clean_up_after(run_dir / LIVE_FILE) is None
    finally:
        runner.kill()
        segment.unlink(missing_ok=True)
        for pid in stragglers:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_process_group_that_is_not_the_cells_any_more_is_left_alone(tmp_path):
    """A group id is reused once its group is gone: only a group that still holds a process of the cell is killed."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    token = uuid.uuid4().hex
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], env=os.environ | {MARKER: token}
    )  # a process of the cell, in another group
    live = LiveCell(
        runner_pid=1 << 22,
        cell="c",
        process_group=stranger.pid,
        token=token,
        extensions_dir=str(tmp_path),
        started_epoch=time.time(),
    )
    (tmp_path / LIVE_FILE).write_text(live.model_dump_json())
    try:
        line = clean_up_after(tmp_path / LIVE_FILE)
        assert line == f"runner {1 << 22} ended during c without cleaning up: killed 1 process(es)"
        assert orphan.wait(timeout=5) == -signal.SIGKILL and stranger.poll() is None and marked_pids(token) == []
    finally:
        stranger.kill()
        orphan.kill()


def test_a_live_file_that_cannot_be_read_is_removed_with_a_line(tmp_path):
    (tmp_path / LIVE_FILE).write_text(json.dumps({"runner_pid": "x"}))
    line = clean_up_after(tmp_path / LIVE_FILE)
    assert line.startswith(f"removed {tmp_path / LIVE_FILE}: unreadable (") and not (tmp_path / LIVE_FILE).exists()
