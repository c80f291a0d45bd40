"""Real processes: timeouts kill the whole cell, escaped descendants included."""

import os
import sys
import time
from pathlib import Path

from bench.executors.local import marked_pids, run_local
from bench.launch import LaunchPlan

SPAWNER = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
open(sys.argv[1], "w").write("ready")
time.sleep(300)
"""


def _proc_read(pid: str, name: str) -> bytes:
    try:
        return (Path("/proc") / pid / name).read_bytes()
    except OSError:
        return b""


def _alive_with(marker: str) -> list[int]:
    """Live processes whose command line contains `marker`."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _proc_read(p, "cmdline")]


def test_timeout_kills_group_and_escaped_children(tmp_path):
    ready = tmp_path / "ready"
    script = tmp_path / "spawner_unique_marker.py"
    script.write_text(SPAWNER)
    plan = LaunchPlan(argv=[sys.executable, str(script), str(ready)])
    started = time.monotonic()
    outcome = run_local(plan, tmp_path / "log", timeout_s=3, cwd=tmp_path)
    assert outcome.timed_out and time.monotonic() - started < 15
    assert ready.read_text() == "ready"
    # the spawner, its child, and the child that escaped into its own session are all gone
    assert _alive_with("spawner_unique_marker") == []
    sleepers = _alive_with("time.sleep(300)")
    assert [p for p in sleepers if b"BENCH_CELL_TOKEN=" in _proc_read(str(p), "environ")] == []


def test_exit_code_and_log_tail(tmp_path):
    plan = LaunchPlan(argv=[sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"])
    outcome = run_local(plan, tmp_path / "log", timeout_s=30, cwd=tmp_path)
    assert outcome.exit_code == 3 and not outcome.timed_out and "hello" in outcome.log_tail


def test_missing_launcher_is_exit_127_with_a_message(tmp_path):
    outcome = run_local(LaunchPlan(argv=["no-such-launcher-xyz"]), tmp_path / "log", timeout_s=5, cwd=tmp_path)
    assert outcome.exit_code == 127 and "no-such-launcher-xyz" in outcome.log_tail


def test_marked_pids_finds_nothing_for_an_unknown_token():
    assert marked_pids("0" * 32) == []
