"""No process of a cell outlives the runner that started it, however the runner ends (SIGKILL included).

- The launcher: `die_with_parent` in its Popen's preexec_fn (PR_SET_PDEATHSIG: the kernel SIGKILLs it when the
  runner's thread that started it ends).
- Every rank, first thing: `die_with_parent` for its own parent (the launcher, or the launcher's agent), and
  `die_with_runner`: a thread that waits on a pidfd of the runner (RUNNER_ENV, set by the local executor) and, when
  the runner ends, SIGKILLs the rank's process group. Launchers put processes of their own between themselves and
  the ranks (deepspeed's launch.py, in the ranks' group), which no parent-death signal of ours reaches. The group
  is the cell's (the local executor starts the launcher in a session of its own), never the runner's.
"""

import ctypes
import os
import select
import signal
import threading
import time
from collections.abc import Mapping

RUNNER_ENV = "BENCH_RUNNER_PID"
PR_SET_PDEATHSIG = 1
POLL_S = 0.5
"""Without pidfd_open (Linux < 5.3): how often a rank looks for its runner."""

_prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here: a preexec_fn should not dlopen after fork


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent ends; at once when `parent` (the pid read before) is already gone.
    Safe in a preexec_fn."""
    if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os.kill(os.getpid(), signal.SIGKILL)


def _end_group(runner_group: int | None) -> None:
    """SIGKILL this process's group when it is a cell's, else this process only. A cell's group leads a session of
    its own (the launcher's, or a rank's that torchrun started in one); the runner's group is never a cell's."""
    group = os.getpgid(0)
    if group == os.getsid(0) and group != runner_group:
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_on_pidfd(fd: int, runner_group: int | None) -> None:
    select.select([fd], [], [])
    _end_group(runner_group)


def _poll(pid: int, runner_group: int | None) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _end_group(runner_group)
        except PermissionError:
            pass
        time.sleep(POLL_S)


def _watch(pid: int, runner_group: int | None) -> None:
    """A daemon thread that ends this process's group as soon as `pid` ends (at once when it already has)."""
    try:
        target, args = _wait_on_pidfd, (os.pidfd_open(pid), runner_group)
    except ProcessLookupError:
        _end_group(runner_group)
        raise
    except (AttributeError, OSError):  # no pidfd_open here
        target, args = _poll, (pid, runner_group)
    threading.Thread(target=target, args=args, name=f"die-with-{pid}", daemon=True).start()


def die_with_runner(environ: Mapping[str, str]) -> bool:
    """In a rank: SIGKILL this process's group as soon as the runner named in RUNNER_ENV ends (at once when it
    already has). False when none is named."""
    value = environ.get(RUNNER_ENV, "")
    if not value.isdigit():
        return False
    pid = int(value)
    try:
        runner_group = os.getpgid(pid)
    except ProcessLookupError:  # the runner ended before this rank got here
        _end_group(None)
        raise
    _watch(pid, runner_group)
    return True


def die_with_process(pid: int) -> None:
    """SIGKILL this process's group as soon as `pid` ends (a fork server's child, with the client that stands for
    it in the launcher's process tree: bench/isolation/fork_server_client.py)."""
    _watch(pid, None)
