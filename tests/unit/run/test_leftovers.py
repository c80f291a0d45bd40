"""Before a run starts, it cleans up after every dead runner of the same profile, and leaves live runners alone."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.executors.local import LIVE_FILE, MARKER, LiveCell
from bench.results.lock import lock_run
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
