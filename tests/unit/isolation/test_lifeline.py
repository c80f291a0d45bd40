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


GROUP = """
import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(rank.stdout.readline().strip(), rank.pid, sibling.pid, flush=True)
time.sleep(300)
"""


def start_group(runner: int, how: str = "pidfd", env: dict | None = None) -> tuple[subprocess.Popen, int, int]:
    """A process group of its own (as the local executor starts a launcher), holding a rank and a sibling (as
    deepspeed's launch.py holds its ranks); returns the group's leader, the rank and the sibling."""
    env = os.environ | {lifeline.RUNNER_ENV: str(runner)} | (env or {})
    leader = subprocess.Popen(
        [sys.executable, "-c", GROUP, RANK, how], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    armed, rank, sibling = leader.stdout.readline().split()
    assert armed == "True"
    return leader, int(rank), int(sibling)


@pytest.mark.parametrize("how", ["pidfd", "no_pidfd"])
def test_a_rank_takes_its_group_along_when_the_runner_ends(how):
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    leader, rank, sibling = start_group(runner.pid, how)  # not the runner's children: as under deepspeed
    try:
        time.sleep(lifeline.POLL_S * 2)
        assert not gone(rank) and not gone(sibling)  # alive while the runner is
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        assert leader.wait(timeout=5) == -signal.SIGKILL
        assert wait_gone(rank, 5) and wait_gone(sibling, 5)
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
        runner.kill()


def test_the_runners_own_group_is_never_killed():
    """A rank in the runner's own group (never so under the local executor) ends alone when the runner ends."""
    runner_code = (
        "import os, subprocess, sys, time\n"
        f"env = os.environ | {{'{lifeline.RUNNER_ENV}': str(os.getpid())}}\n"
        "rank = subprocess.Popen([sys.executable, '-c', sys.argv[1], 'pidfd'], stdout=subprocess.PIPE, text=True,\n"
        "                        env=env)\n"
        "sibling = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print(rank.stdout.readline().strip(), rank.pid, sibling.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", runner_code, RANK], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        armed, rank, sibling = runner.stdout.readline().split()
        assert armed == "True"
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        assert wait_gone(int(rank), 5)
        time.sleep(0.5)
        assert not gone(int(sibling))
    finally:
        os.killpg(runner.pid, signal.SIGKILL)


def test_a_rank_whose_runner_is_already_gone_dies_at_once():
    runner = subprocess.Popen([sys.executable, "-c", "pass"])
    runner.wait()
    env = os.environ | {lifeline.RUNNER_ENV: str(runner.pid)}
    # in a session of its own, as a cell's ranks are: it ends its group, which must not be this test's (where pytest
    # leads its own session, as under `setsid make test`, the group would be pytest's)
    rank = subprocess.Popen(
        [sys.executable, "-c", RANK, "pidfd"], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert rank.wait(timeout=30) == -signal.SIGKILL


def test_without_a_runner_named_nothing_is_watched():
    assert lifeline.die_with_runner({}) is False
    assert lifeline.die_with_runner({lifeline.RUNNER_ENV: "not-a-pid"}) is False
