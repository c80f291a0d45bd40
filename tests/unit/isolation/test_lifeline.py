"""A cell's processes die with their parent and with the runner, however the runner ends (real SIGKILLs)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.isolation import lifeline

RANK = """
import os, sys, time
from bench.isolation import lifeline
if sys.argv[1] == "no_pidfd":
    del os.pidfd_open
print(lifeline.die_with_runner(os.environ), flush=True)
time.sleep(300)
"""


def gone(pid: int) -> bool:
    """Not running any more: no such process, or a zombie no one has reaped yet."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def start_parent(armed: bool) -> tuple[subprocess.Popen, int]:
    script = (
        "import os, subprocess, sys, time\n"
        "from bench.isolation import lifeline\n"
        "me = os.getpid()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
        f"                         preexec_fn={'lambda: lifeline.die_with_parent(me)' if armed else 'None'})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    return parent, int(parent.stdout.readline())


@pytest.mark.parametrize("armed", [True, False], ids=["armed", "unarmed_control"])
def test_a_launcher_dies_with_the_runner_that_started_it(armed):
    parent, child = start_parent(armed)
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert wait_gone(child, 5) is armed  # unarmed, the child outlives its runner: what the issue saw
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def start_rank(runner: int, how: str = "pidfd") -> subprocess.Popen:
    env = os.environ | {lifeline.RUNNER_ENV: str(runner)}
    rank = subprocess.Popen([sys.executable, "-c", RANK, how], stdout=subprocess.PIPE, text=True, env=env)
    assert rank.stdout.readline() == "True\n"
    return rank


@pytest.mark.parametrize("how", ["pidfd", "no_pidfd"])
def test_a_rank_dies_with_the_runner_whoever_is_between_them(how):
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    rank = start_rank(runner.pid, how)  # not the runner's child: as under deepspeed's launch.py
    try:
        time.sleep(lifeline.POLL_S * 2)
        assert rank.poll() is None  # alive while the runner is
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        assert rank.wait(timeout=5) == -signal.SIGKILL
    finally:
        rank.kill()
        runner.kill()


def test_a_rank_whose_runner_is_already_gone_dies_at_once():
    runner = subprocess.Popen([sys.executable, "-c", "pass"])
    runner.wait()
    env = os.environ | {lifeline.RUNNER_ENV: str(runner.pid)}
    rank = subprocess.Popen([sys.executable, "-c", RANK, "pidfd"], stdout=subprocess.PIPE, text=True, env=env)
    assert rank.wait(timeout=30) == -signal.SIGKILL


def test_without_a_runner_named_nothing_is_watched():
    assert lifeline.die_with_runner({}) is False
    assert lifeline.die_with_runner({lifeline.RUNNER_ENV: "not-a-pid"}) is False
