"""The local executor's watch on the harness itself (and the machine under it) while a cell runs and once it ended: a
fork server that died (the cell's forked processes died with it), the client standing in for a forked launcher that
outlives the launcher (a stopped stand-in cannot pass on its exit), and a /dev/shm where DeepSpeed cannot make its
allreduce buffer (its ranks then wait forever). Each is a HarnessFault: the record names the harness, never the cell
(bench/judge/record.py)."""

import subprocess
from dataclasses import dataclass, field

from bench.executors.base import HarnessFault
from bench.isolation.fork_server import ForkServer, how_it_ended
from bench.isolation.shm_segments import SHM_DIR, create_failure
from bench.isolation.step_marks import process_state

STAND_IN_GRACE_S = 5.0
"""How long the launcher's stand-in may outlive the launcher it stands for: it passes the exit on within
milliseconds."""


@dataclass(frozen=True)
class Stopped:
    """Why the executor ended a cell that was still running, if it did."""

    stalled: str | None = None
    """The progress watchdog's reason (bench/isolation/step_marks.py)."""
    fault: HarnessFault | None = None
    exit_code: int | None = None
    """The launcher's own exit (Popen's return code) where its stand-in did not pass it on."""


@dataclass
class HarnessWatch:
    """Looks at one cell's harness while it runs: `look` every few seconds, from the executor's wait."""

    token: str
    fork_server: ForkServer | None = None
    """The run's fork server where the cell's launcher was forked from it; None: started fresh."""
    outlived_since: float | None = field(default=None, init=False)
    """When the launcher's stand-in was first seen alive after the launcher ended."""

    def look(self, launcher: subprocess.Popen, log_tail: str, now: float) -> Stopped | None:
        """A reason to end the cell now, or None."""
        if (line := create_failure(log_tail)) is not None:
            what = (
                f"{SHM_DIR} is not writable or full: DeepSpeed's CPU allreduce could not make its buffer there "
                f"({line}), and its ranks wait for it forever; the harness ended the cell (make {SHM_DIR} writable "
                "and give it room, then resume)"
            )
            return Stopped(fault=HarnessFault(what))
        return self.stand_in(launcher, now)

    def stand_in(self, launcher: subprocess.Popen, now: float) -> Stopped | None:
        """The launcher ended, but the client standing in for it did not pass its exit on in STAND_IN_GRACE_S (it
        was stopped): the cell is over, with the launcher's own exit."""
        if self.fork_server is None:
            return None
        code = self.fork_server.ended_as(launcher.pid, self.token)
        if code is None:
            return None
        if self.outlived_since is None:
            self.outlived_since = now
        if now - self.outlived_since < STAND_IN_GRACE_S:
            return None
        what = (
            f"the fork server's stand-in for the cell's launcher (pid {launcher.pid}, state "
            f"{process_state(launcher.pid)}) had not ended {STAND_IN_GRACE_S:g} s after the launcher ended "
            f"({how_it_ended(code)}): the harness ended it and kept the launcher's own exit"
        )
        return Stopped(fault=HarnessFault(what, spoiled=False), exit_code=code)


def server_death(server: ForkServer, cell_failed: bool) -> HarnessFault | None:
    """The fork server died while the cell ran (it is dead once the cell ended): the cell's forked processes died
    with it, so a cell that failed failed on the harness (run it again once: the next cell starts the server
    again); a cell that ended well only names it."""
    how = server.ended()
    if how is None:
        return None
    pid = server.process.pid
    if not cell_failed:
        return HarnessFault(f"the fork server (pid {pid}) ended ({how}) as the cell ended well", spoiled=False)
    return HarnessFault(
        f"the fork server (pid {pid}) ended ({how}) while the cell ran, and the cell's forked processes with it",
        retry=True,
    )
