"""No process of a cell outlives the runner that started it, however the runner ends (SIGKILL included).

- The launcher: `die_with_parent` in its Popen's preexec_fn (PR_SET_PDEATHSIG: the kernel SIGKILLs it when the
  runner's thread that started it ends).
- Every rank, first thing: `die_with_parent` for its own parent (the launcher, or the launcher's agent), and
  `die_with_runner`: a thread that waits on a pidfd of the runner (RUNNER_ENV, set by the local executor) and
  SIGKILLs the rank when the runner ends. Launchers put processes of their own between themselves and the ranks
  (deepspeed's launch.py), which no parent-death signal of ours reaches.
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


def _wait_on_pidfd(fd: int) -> None:
    select.select([fd], [], [])
    os.kill(os.getpid(), signal.SIGKILL)


def _poll(pid: int) -> None:
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), signal.SIGKILL)
        except PermissionError:
            pass
        time.sleep(POLL_S)


def die_with_runner(environ: Mapping[str, str]) -> bool:
    """In a rank: SIGKILL this process as soon as the runner named in RUNNER_ENV ends. False when none is named."""
    value = environ.get(RUNNER_ENV, "")
    if not value.isdigit():
        return False
    pid = int(value)
    try:
        target, args = _wait_on_pidfd, (os.pidfd_open(pid),)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
    except (AttributeError, OSError):  # no pidfd_open here
        target, args = _poll, (pid,)
    threading.Thread(target=target, args=args, name="die-with-runner", daemon=True).start()
    return True
