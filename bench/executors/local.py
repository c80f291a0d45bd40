"""Local executor: one process group per cell, a wall-clock limit, and no survivors afterwards.

Every process of a cell carries BENCH_CELL_TOKEN in its environment, so descendants that leave the
process group (launchers sometimes start their own sessions) are found in /proc and killed too.

With a per-rank memory budget every rank runs in a memory cgroup of its own whose limit is the budget
(bench/isolation/cgroups.py): the launcher joins the cell cgroup before exec, each worker its rank's cgroup, and the
kernel's peak and OOM-kill figures come back in `Outcome.rank_memory`. SIGINT is deferred everywhere but in the
wait for the cell, so a Ctrl-C at any moment still kills the cell and removes its cgroups before it re-raises.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ValidationError

from bench.executors.base import HarnessFault, LaunchPlan, Outcome
from bench.executors.harness_watch import HarnessWatch, Stopped, server_death
from bench.files import write_whole
from bench.isolation import lifeline, step_marks
from bench.isolation.cgroups import CellCgroups, CgroupUnavailable, cell_cgroups, remove_cgroup
from bench.isolation.deferred_sigint import DeferredSigint, uncut
from bench.isolation.fork_server import ForkServer
from bench.isolation.shm_segments import remove_group_segments, remove_segments

MARKER = "BENCH_CELL_TOKEN"
GRACE_S = 5.0
KILL_WAIT_S = 10.0
WATCH_EVERY_S = 1.0
"""How often the progress watchdog looks at the ranks' step files while the cell runs."""
TAIL_BYTES = 6000
LIVE_FILE = "running.json"
"""Names the running cell in its run folder; cells side by side each name theirs in `running.<slot>.json`."""
LIVE_FILES = "running*.json"

_running: dict[str, tuple[subprocess.Popen, "ForkServer | None"]] = {}
"""The cells this process runs now, by token (several when cells run side by side), for `stop_all`."""
_running_lock = threading.Lock()


def read_tail(path: Path, size: int = TAIL_BYTES) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def marked_pids(token: str) -> list[int]:
    needle = f"{MARKER}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def kill_cell(
    process: subprocess.Popen, token: str, grace_s: float = GRACE_S, fork_server: ForkServer | None = None
) -> None:
    """SIGTERM the group and give the launcher `grace_s` to stop its ranks, then SIGKILL everything still carrying
    the cell's token, and the fork server's children of the cell. grace_s=0: SIGKILL at once (after a Ctrl-C
    nothing of the cell is kept)."""
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
    for _ in range(3):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        pids = marked_pids(token) + (fork_server.pids_of(token) if fork_server else [])
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.poll()
        if not pids:
            break
        time.sleep(0.2)
    try:
        process.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:  # e.g. stuck in uninterruptible sleep: never hang the runner (or its Ctrl-C)
        print(f"warning: launcher {process.pid} survived SIGKILL for {KILL_WAIT_S:g} s; left behind", file=sys.stderr)


class LocalExecutor:
    """Cells run as process groups on this machine, in this interpreter's environment."""

    name = "local"
    concurrent = False
    image = None

    def __init__(
        self,
        cwd: Path,
        python: str = sys.executable,
        memory_budget_bytes: int | None = None,
        live_file: Path | None = None,
    ) -> None:
        self.cwd = cwd
        self.python = venv_python(python)
        self.memory_budget_bytes = memory_budget_bytes
        """Per-rank memory limit, enforced by one memory cgroup per rank; None: no cgroups."""
        self.live_file = live_file
        """Where the running cell is named (the run folder's LIVE_FILE), for `clean_up_after`; None: nowhere."""
        self.fork_server: ForkServer | None = None
        """The run's fork server, once it serves: every Python process of a cell forks from it."""
        self._serving = threading.Lock()
        """Held while a fork server that died is started again (cells side by side start at once)."""

    def start_fork_server(self, shared_env: Mapping[str, str], preload: str, log: Path) -> ForkServer:
        """Start the run's fork server with the environment every cell shares (`shared_env`: what the launch plans
        add, without the per-cell variables); it serves once `wait` says so (then set `fork_server`)."""
        if self.memory_budget_bytes is not None:
            raise ValueError("a fork server cannot serve cells with a memory budget")
        return ForkServer.start(self.python, self.cwd, cell_env(shared_env), preload, log)

    def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        live = self.live_file
        if live is not None and launch.slot is not None:
            live = live.with_name(f"running.{launch.slot}.json")
        restarted = self.serving()
        budget = launch.memory_budget_bytes if launch.memory_budget_bytes is not None else self.memory_budget_bytes
        outcome = run_local(launch, log_path, timeout_s, self.cwd, budget, live, self.fork_server, self.python)
        if restarted is not None and outcome.harness_fault is None:
            outcome.harness_fault = restarted
        return outcome

    def serving(self) -> HarnessFault | None:
        """Start the fork server again where it died since the last cell, or let the cells start fresh where it
        cannot be; what happened (the next record names it), None where it serves."""
        with self._serving:
            server = self.fork_server
            if server is None or (how := server.ended()) is None:
                return None
            pid, started = server.process.pid, time.monotonic()
            why_not = server.restart()
            what = f"the fork server (pid {pid}) had ended ({how}) before this cell"
            if why_not is None:
                what += f": started again (pid {server.process.pid}, {time.monotonic() - started:.1f} s)"
            else:
                self.fork_server = None
                what += f" and could not be started again ({why_not}): the cells start fresh"
        print(f"notice: {what}", file=sys.stderr, flush=True)
        return HarnessFault(what, spoiled=False)

    def stop_all(self) -> None:
        """Kill every cell this process runs now (cells side by side, on Ctrl-C or a failure that stops the run)."""
        stop_all()


def stop_all() -> None:
    """SIGKILL every cell this process runs now; their waits return and their cleanup runs in their own threads."""
    with _running_lock:
        cells = list(_running.items())
    for token, (process, fork_server) in cells:
        kill_cell(process, token, 0.0, fork_server)


def cell_env(plan_env: Mapping[str, str]) -> dict[str, str]:
    """The environment a cell's launcher starts with, before its token and runner are added."""
    return {"TORCH_EXTENSIONS_DIR": extensions_dir()} | dict(os.environ) | dict(plan_env)


def venv_python(python: str) -> str:
    """The interpreter at its venv's real path (a venv reached through a linked folder: a worktree's `.venv`). The
    launchers installed in the venv name that path in their shebangs, and DeepSpeed keys a JIT-built op on its source
    paths: a cell started under one path and a host-op build under the other rebuild the op for each other, inside
    the timed cell. The interpreter file itself is left unresolved (it links to the base Python, outside the venv)."""
    path = Path(python)
    return str(path.parent.resolve() / path.name) if path.is_absolute() else python


def extensions_dir() -> str:
    """Per-environment JIT cache (DeepSpeed ops): one shared cache makes two venvs rebuild each other's ops."""
    return str(Path(sys.prefix) / "torch_extensions")


def _held_open(paths: list[Path]) -> set[Path]:
    """Those of `paths` that a live process holds open."""
    wanted = {os.path.realpath(p): p for p in paths}
    held: set[Path] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            for entry in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(entry)) in wanted:
                        held.add(wanted[target])
    return held


def remove_stale_build_locks(extensions: Path, since: float) -> list[Path]:
    """Remove the JIT-build lock files (torch's FileBaton, `<op>/lock`) created since `since` (epoch s), once the
    cell that created them is dead: a rank killed mid-build leaves its lock, and every later cell would wait on it
    until its own timeout. Older locks, and locks a live process holds open (a build holds its lock open until it
    is done: another runner's), are left alone."""
    recent = []
    for lock in extensions.glob("*/lock"):
        with contextlib.suppress(FileNotFoundError):
            if lock.stat().st_mtime >= since:
                recent.append(lock)
    removed = []
    for lock in sorted(set(recent) - _held_open(recent)):
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
            removed.append(lock)
    return removed


class LiveCell(BaseModel):
    """A running cell, as the run folder's LIVE_FILE names it: everything needed to clean up after its runner."""

    runner_pid: int
    cell: str
    """The cell's log name (cell id, `.trialN` for a repeat)."""
    process_group: int
    """The launcher's process group (its pid: it starts a session of its own)."""
    token: str
    """BENCH_CELL_TOKEN: every process of the cell carries it in its environment."""
    cgroup: str | None = None
    master_addr: str | None = None
    master_port: str | None = None
    extensions_dir: str
    started_epoch: float


def _write_live(path: Path, live: LiveCell) -> None:
    write_whole(path, uncut(live.model_dump_json))


def _group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid` (field 5 of /proc/<pid>/stat)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _kill_left(live: LiveCell, wait_s: float = KILL_WAIT_S) -> tuple[int, bool]:
    """SIGKILL what is left of the cell: its process group when a process of the group carries the cell's token
    (a group id is reused once the group is gone), and every process carrying the token. Returns how many
    processes, and whether the group was the cell's."""
    killed: set[int] = set()
    group = False
    deadline = time.monotonic() + wait_s
    while True:
        marked = set(marked_pids(live.token))
        if live.process_group in marked or marked & set(_group_members(live.process_group)):
            group = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(live.process_group, signal.SIGKILL)
            marked |= set(_group_members(live.process_group))
        if not marked or time.monotonic() > deadline:
            return len(killed), group
        for pid in marked - {os.getpid()}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= marked
        time.sleep(0.1)


def clean_up_after(live_file: Path) -> str | None:
    """Clean up after the dead runner that left `live_file` (the caller knows it is dead: bench.results.lock): kill
    what is left of its cell, remove the cell's cgroups, shared-memory segments and build locks, then the file.
    Returns one line saying what was removed; None when there is no such file."""
    try:
        live = LiveCell.model_validate_json(live_file.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        live_file.unlink(missing_ok=True)
        return f"removed {live_file}: unreadable ({str(exc).splitlines()[0]})"
    removed = []
    killed, group = _kill_left(live)
    if killed:
        removed.append(f"killed {killed} process(es)" + (f" of process group {live.process_group}" if group else ""))
    if live.cgroup and Path(live.cgroup).is_dir():
        left = remove_cgroup(Path(live.cgroup))
        removed.append(f"could not remove cgroup {live.cgroup}" if left else f"removed cgroup {live.cgroup}")
    segments = remove_segments(live.master_addr, live.master_port) if live.master_addr and live.master_port else []
    if segments:
        removed.append(f"removed {len(segments)} shared-memory segment(s) ({', '.join(segments)})")
    if locks := remove_stale_build_locks(Path(live.extensions_dir), live.started_epoch):
        removed.append(f"removed build lock(s) {', '.join(map(str, locks))}")
    live_file.unlink(missing_ok=True)
    what = "; ".join(removed) if removed else "nothing of it was left"
    return f"runner {live.runner_pid} ended during {live.cell} without cleaning up: {what}"


def run_local(
    launch: LaunchPlan,
    log_path: Path,
    timeout_s: float,
    cwd: Path,
    memory_budget_bytes: int | None = None,
    live_file: Path | None = None,
    fork_server: ForkServer | None = None,
    python: str = sys.executable,
) -> Outcome:
    """Run `launch` as its own process group (and, with a budget, its own cgroups); nothing of it survives, not even
    a SIGKILL of this process. With `live_file`, the running cell is named there until it is cleaned up. With a
    `fork_server` (never under a budget: a forked child's libraries stay charged to the server's cgroup), every
    start of `python` in the cell forks from it."""
    token = uuid.uuid4().hex
    runner = os.getpid()
    env = cell_env(launch.env) | {MARKER: token, lifeline.RUNNER_ENV: str(runner)}
    argv = launch.argv
    if memory_budget_bytes is not None or (fork_server is not None and fork_server.ended() is not None):
        fork_server = None  # a dead server's clients start fresh: its death is no fault of this cell's
    if fork_server is not None:
        argv = fork_server.route(launch.argv, python)
        env |= fork_server.env
    watch = HarnessWatch(token, fork_server)
    started = time.monotonic()
    started_epoch = time.time()
    try:
        # Ctrl-C is recorded, not raised, except while waiting for the cell: setup and cleanup always run to the end.
        with DeferredSigint() as sigint, log_path.open("wb") as log, contextlib.ExitStack() as stack:
            cell = None
            if memory_budget_bytes is not None:
                cell = stack.enter_context(cell_cgroups(token, launch.ranks, memory_budget_bytes))
                env = env | cell.env
            process = _start_launcher(argv, cwd, env, log, runner, launch.cores, cell)
            if process is None:
                return Outcome(exit_code=127, timed_out=False, wall_s=0.0, log_tail=read_tail(log_path))
            launched = _Launched(process, token, launch, env["TORCH_EXTENSIONS_DIR"], started_epoch, fork_server)
            live = launched.live(runner, log_path.stem, str(cell.path) if cell else None)
            timed_out, stopped = launched.wait(timeout_s, sigint, live_file, live, _Looking(watch, log_path))
            ended_epoch = time.time()
            rank_memory = cell.read() if cell else []
    finally:
        if live_file is not None:  # the cell and its cgroups are gone (or reported left over by cell_cgroups)
            with DeferredSigint():
                live_file.unlink(missing_ok=True)
    exit_code = process.returncode if stopped.exit_code is None else stopped.exit_code
    failed = timed_out or stopped.stalled is not None or exit_code != 0
    fault = stopped.fault or (server_death(fork_server, failed) if fork_server is not None else None)
    return Outcome(
        exit_code=exit_code,
        timed_out=timed_out,
        wall_s=time.monotonic() - started,
        log_tail=read_tail(log_path),
        oom_killed=any(rank.oom_kills > 0 for rank in rank_memory),
        rank_memory=rank_memory,
        stalled=stopped.stalled,
        harness_fault=fault,
        launched_at=started_epoch,
        ended_at=ended_epoch,
    )


@dataclass(frozen=True)
class _Looking:
    """What the wait for a cell looks at besides its launcher: the harness (with the cell's log) and the ranks'
    progress."""

    harness: HarnessWatch
    log_path: Path

    def look(self, process: subprocess.Popen, launch: LaunchPlan) -> Stopped | None:
        if (reason := step_marks.stalled(launch.progress_dir, launch.stall_s)) is not None:
            return Stopped(stalled=reason)
        return self.harness.look(process, read_tail(self.log_path), time.monotonic())


@dataclass(frozen=True)
class _Launched:
    """A cell's launcher once started: what naming it, waiting for it and cleaning up after it need."""

    process: subprocess.Popen
    token: str
    launch: LaunchPlan
    extensions_dir: str
    started_epoch: float
    fork_server: ForkServer | None

    def live(self, runner: int, cell: str, cgroup: str | None) -> LiveCell:
        return LiveCell(
            runner_pid=runner,
            cell=cell,
            process_group=self.process.pid,
            token=self.token,
            cgroup=cgroup,
            master_addr=self.launch.env.get("MASTER_ADDR"),
            master_port=self.launch.env.get("MASTER_PORT"),
            extensions_dir=self.extensions_dir,
            started_epoch=self.started_epoch,
        )

    def wait(
        self, timeout_s: float, sigint: DeferredSigint, live_file: Path | None, live: LiveCell, looking: "_Looking"
    ) -> tuple[bool, Stopped]:
        """Name the cell in `live_file`, wait for it (Ctrl-C is let through only here), then kill what is left of it
        and clean up after it: (timed out, why the executor ended it: its steps stalled, a fault of the harness)."""
        timed_out = interrupted = False
        stopped = None
        with _running_lock:
            _running[self.token] = (self.process, self.fork_server)
        try:
            if live_file is not None:
                _write_live(live_file, live)
            with sigint.allow():
                stopped = wait_watching(self.process, timeout_s, self.launch, looking)
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            # the cell on a timeout or Ctrl-C (no grace: nothing of it is kept), else stragglers a launcher left; a
            # launcher that ended with its stand-in stopped has nothing left to stop gracefully
            ended = interrupted or (stopped is not None and stopped.exit_code is not None)
            kill_cell(self.process, self.token, 0.0 if ended else GRACE_S, self.fork_server)
            with _running_lock:
                _running.pop(self.token, None)
            remove_group_segments(self.launch.env)
            remove_stale_build_locks(Path(self.extensions_dir), self.started_epoch)
            if self.fork_server is not None:
                self.fork_server.forget(self.token)
        return timed_out, stopped or Stopped()


def _start_launcher(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log: BinaryIO,
    runner: int,
    cores: list[int] | None,
    cell: CellCgroups | None,
) -> subprocess.Popen | None:
    """The launcher started in a session of its own, armed to die with the runner, on its launch's cores and, under a
    budget, inside the cell's cgroup; None where its program does not exist (the log says so)."""

    def before_exec() -> None:  # in the launcher, between fork and exec
        lifeline.die_with_parent(runner)
        if cores:
            os.sched_setaffinity(0, cores)
        if cell:
            cell.add_self()

    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=before_exec,
        )
    except FileNotFoundError as exc:
        log.write(f"launcher not found: {exc.filename}: No such file or directory\n".encode())
        log.flush()
        return None
    except subprocess.SubprocessError as exc:  # only the preexec_fn raises this
        raise CgroupUnavailable(
            f"per-rank memory budget: could not move the launcher into {cell.path if cell else '?'} ({exc})"
        ) from exc


def wait_watching(
    process: subprocess.Popen, timeout_s: float, launch: LaunchPlan, looking: _Looking | None = None
) -> Stopped | None:
    """Wait for the launcher to exit; TimeoutExpired at `timeout_s`. Every WATCH_EVERY_S, `looking` looks at the
    ranks' progress and at the harness: returns why the cell is to end now (a rank's steps stopped for longer than the
    launch plan's stall_s, a fault of the harness; the caller kills the cell), else None once the launcher exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(launch.argv, timeout_s)
        try:
            process.wait(timeout=min(WATCH_EVERY_S, left))
            return None
        except subprocess.TimeoutExpired:
            if looking is not None and (stopped := looking.look(process, launch)) is not None:
                return stopped
