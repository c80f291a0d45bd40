"""The run's fork server (bench/isolation/fork_server_process.py) as the runner sees it: started while the run prepares,
waited for before the first cell, and used by the local executor to start every Python process of a cell: the cell's
command line is routed through the server's `python` (its launcher, and the interpreter it names for the ranks), its
environment names the server's socket, and a killed cell loses the server's children too. A server that died is started
again in its place (`restart`); how each of a cell's forked programs ended is read from the server's folder
(`ended_as`), for a client that cannot pass it on.

The server's folder (bench/isolation/server_folder.py) is held by its runner while the server runs and removed when
it stops, a stop signal included."""

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.isolation import lifeline
from bench.isolation.deferred_sigint import DeferredSigint
from bench.isolation.fork_server_client import SOCKET_ENV
from bench.isolation.fork_server_process import CHILDREN, CLIENT, ENDED, SOCKET, TITLE_ROOM
from bench.isolation.server_folder import FOLDER_PREFIX, claim_folder

READY_TIMEOUT_S = 300.0
"""The libraries import in 5-10 s on 2 cores; a busy machine may take minutes."""


def python_script(path: Path, python: str) -> bool:
    """Whether `path` is a script whose shebang runs `python` (a launcher installed beside it: torchrun, deepspeed)."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    interpreter = first[2:].split()[0].decode(errors="replace") if first[2:].split() else ""
    return interpreter == python or os.path.realpath(interpreter) == os.path.realpath(python)


def is_client(args: list[str]) -> bool:
    """Whether a process's command line (its /proc cmdline, split) is a fork server's client standing in for a
    forked child, whose command line is the client's after the interpreter's."""
    return len(args) > 2 and args[1] == "-IS" and args[2].endswith(CLIENT) and FOLDER_PREFIX in args[2]


def route(argv: list[str], python: str, client: str) -> list[str]:
    """Pure but for reading a script's first line: `argv` with every start of `python` through `client` instead.
    The interpreter itself (the python launcher; mpirun's program for its ranks), and a script beside it whose
    shebang runs it (`[client, script, ...]`)."""
    routed = [client if item == python else item for item in argv]
    head = Path(argv[0]) if argv else None
    if head is not None and argv[0] != python and head.parent == Path(python).parent and python_script(head, python):
        routed = [client, argv[0], *routed[1:]]
    return routed


def how_it_ended(code: int) -> str:
    """A process's return code (Popen's: negative for a signal) in words."""
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


@dataclass(frozen=True)
class Launch:
    """How a server was started: what `restart` starts again."""

    python: str
    cwd: Path
    env: dict[str, str]
    preload: str
    log: Path

    def popen(self, folder: Path) -> subprocess.Popen:
        runner = os.getpid()
        with self.log.open("ab") as out:
            return subprocess.Popen(
                [self.python, "-m", "bench.isolation.fork_server_process", str(folder), self.preload, " " * TITLE_ROOM],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=out,
                start_new_session=True,
                preexec_fn=lambda: lifeline.die_with_parent(runner),
            )


@dataclass
class ForkServer:
    folder: Path
    process: subprocess.Popen
    log: Path
    ready: dict | None = None
    why_not: str | None = None
    launch: Launch | None = None
    hold: int = -1
    """The descriptor that holds the folder flock'd (claim_folder)."""

    @classmethod
    def start(cls, python: str, cwd: Path, env: Mapping[str, str], preload: str, log: Path) -> "ForkServer":
        """Start the server: it imports in the background; `wait` before routing anything through it."""
        launch = Launch(python, cwd, dict(env), preload, log)
        folder, hold = claim_folder()
        return cls(folder, launch.popen(folder), log, launch=launch, hold=hold)

    def ended(self) -> str | None:
        """How the server ended (`killed by SIGKILL`), once it has; None while it runs."""
        code = self.process.poll()
        return None if code is None else how_it_ended(code)

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> str | None:
        """Start the server again in its place, in a new folder (the old one goes); None once it serves, else why it
        will not (it is stopped then)."""
        if self.launch is None:
            raise ValueError("this fork server was not started by ForkServer.start")
        self.stop()
        self.folder, self.hold = claim_folder()
        self.process = self.launch.popen(self.folder)
        self.ready = self.why_not = None
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = READY_TIMEOUT_S) -> str | None:
        """Wait until the server serves; None then, else why it will not (it refused, ended or did not answer)."""
        if self.ready is not None or self.why_not is not None:
            return self.why_not
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if readable else b""
        try:
            answer = json.loads(line) if line else {}
        except ValueError:
            answer = {}
        if answer.get("ready"):
            self.ready = answer
            return None
        if "refused" in answer:
            self.why_not = str(answer["refused"])
        elif not readable:
            self.why_not = f"it did not start within {timeout_s:.0f} s (log: {self.log})"
        else:
            self.why_not = f"it ended before serving (log: {self.log})"
        self.stop()
        return self.why_not

    @property
    def client(self) -> str:
        return str(self.folder / CLIENT)

    @property
    def env(self) -> dict[str, str]:
        """What a cell's environment needs to reach the server."""
        return {SOCKET_ENV: str(self.folder / SOCKET)}

    def route(self, argv: list[str], python: str) -> list[str]:
        return route(argv, python, self.client)

    def pids_of(self, token: str) -> list[int]:
        """The server's live children that belong to the cell carrying `token`."""
        pids = []
        for entry in (self.folder / CHILDREN).glob(f"*.{token}"):
            with contextlib.suppress(ValueError):
                pids.append(int(entry.name.split(".", 1)[0]))
        return pids

    def ended_as(self, client: int, token: str) -> int | None:
        """How the program forked for the client `client` of the cell `token` ended (Popen's return code: negative
        for a signal); None while it runs (or was never forked)."""
        try:
            ended = json.loads((self.folder / ENDED / f"{client}.{token}").read_text())
        except (OSError, ValueError):  # not ended yet, or caught mid-write
            return None
        return -int(ended["signal"]) if "signal" in ended else int(ended.get("exit", 1))

    def forget(self, token: str) -> None:
        """Remove what the server noted of the cell `token`'s ended programs."""
        for entry in (self.folder / ENDED).glob(f"*.{token}"):
            entry.unlink(missing_ok=True)

    def stop(self) -> None:
        """End the server (its children die with it) and remove its folder; a stop signal meanwhile waits until it
        is done."""
        with DeferredSigint():
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGTERM)
                deadline = time.monotonic() + 5
                while self.process.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            if self.hold >= 0:
                os.close(self.hold)
                self.hold = -1
