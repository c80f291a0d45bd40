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
import time
import uuid
from pathlib import Path

from bench.executors.base import LaunchPlan, Outcome
from bench.isolation.cgroups import CgroupUnavailable, DeferredSigint, cell_cgroups
from bench.isolation.shm_segments import remove_group_segments

MARKER = "BENCH_CELL_TOKEN"
GRACE_S = 5.0
KILL_WAIT_S = 10.0
TAIL_BYTES = 6000


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


def kill_cell(process: subprocess.Popen, token: str, grace_s: float = GRACE_S) -> None:
    """SIGTERM the group and give the launcher `grace_s` to stop its ranks, then SIGKILL everything still carrying
    the cell's token. grace_s=0: SIGKILL at once (after a Ctrl-C nothing of the cell is kept)."""
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
    for _ in range(3):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        pids = marked_pids(token)
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
    image = None

    def __init__(self, cwd: Path, python: str = sys.executable, memory_budget_bytes: int | None = None) -> None:
        self.cwd = cwd
        self.python = python
        self.memory_budget_bytes = memory_budget_bytes
        """Per-rank memory limit, enforced by one memory cgroup per rank; None: no cgroups."""

    def run(self, plan: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome:
        return run_local(plan, log_path, timeout_s, self.cwd, self.memory_budget_bytes)


def extensions_dir() -> str:
    """Per-environment JIT cache (DeepSpeed ops): one shared cache makes two venvs rebuild each other's ops."""
    return str(Path(sys.prefix) / "torch_extensions")


def remove_stale_build_locks(extensions: Path, since: float) -> list[Path]:
    """Remove the JIT-build lock files (torch's FileBaton, `<op>/lock`) created since `since` (epoch s), once the
    cell that created them is dead: a rank killed mid-build leaves its lock, and every later cell would wait on it
    until its own timeout. Older locks may belong to another run's build and are left alone."""
    removed = []
    for lock in extensions.glob("*/lock"):
        with contextlib.suppress(FileNotFoundError):
            if lock.stat().st_mtime >= since:
                lock.unlink()
                removed.append(lock)
    return removed


def run_local(
    plan: LaunchPlan, log_path: Path, timeout_s: float, cwd: Path, memory_budget_bytes: int | None = None
) -> Outcome:
    """Run the plan as its own process group (and, with a budget, its own cgroups); nothing of it survives."""
    token = uuid.uuid4().hex
    env = {"TORCH_EXTENSIONS_DIR": extensions_dir()} | os.environ | plan.env | {MARKER: token}
    started = time.monotonic()
    started_epoch = time.time()
    # Ctrl-C is recorded, not raised, except while waiting for the cell: setup and cleanup always run to the end.
    with DeferredSigint() as sigint, log_path.open("wb") as log, contextlib.ExitStack() as stack:
        cell = None
        if memory_budget_bytes is not None:
            cell = stack.enter_context(cell_cgroups(token, plan.ranks, memory_budget_bytes))
            env = env | cell.env
        try:
            process = subprocess.Popen(
                plan.argv,
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=cell.add_self if cell else None,
            )
        except FileNotFoundError as exc:
            log.write(f"launcher not found: {exc.filename}: No such file or directory\n".encode())
            log.flush()
            return Outcome(exit_code=127, timed_out=False, wall_s=0.0, log_tail=read_tail(log_path))
        except subprocess.SubprocessError as exc:  # only the preexec_fn raises this
            raise CgroupUnavailable(
                f"per-rank memory budget: could not move the launcher into {cell.path if cell else '?'} ({exc})"
            ) from exc
        timed_out = interrupted = False
        try:
            with sigint.allow():
                process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            # the cell on a timeout or Ctrl-C (no grace: nothing of it is kept), else stragglers a launcher left
            kill_cell(process, token, grace_s=0.0 if interrupted else GRACE_S)
            remove_group_segments(plan.env)
            remove_stale_build_locks(Path(env["TORCH_EXTENSIONS_DIR"]), started_epoch)
        rank_memory = cell.read() if cell else []
    return Outcome(
        exit_code=process.returncode,
        timed_out=timed_out,
        wall_s=time.monotonic() - started,
        log_tail=read_tail(log_path),
        oom_killed=any(rank.oom_kills > 0 for rank in rank_memory),
        rank_memory=rank_memory,
    )
