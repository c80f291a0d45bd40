"""Per-rank memory cgroups: a memory budget per rank that the kernel enforces, and the kernel's own figures.

Ranks are started by launchers the executor does not control, so the executor creates `<own memory
cgroup>/dpo-bench-<token>/rank<R>` for every rank before the launch, with the budget as the limit, and names the cell
cgroup in the environment (CELL_ENV); the launcher moves itself into the cell cgroup in its preexec_fn, and every
worker moves into its rank's cgroup first thing (`join_rank`). Cleanup finds every process of the cell there and
removes the cgroups after any end. cgroup v1 (memory controller, writable as root) is preferred; v2 needs `+memory`
in the own cgroup's subtree_control. The filesystem is a `CgroupFs`, so that tests run v1 and v2 on a fake tree."""

import contextlib
import errno
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from bench.errors import BenchError
from bench.isolation.deferred_sigint import DeferredSigint

CELL_ENV = "BENCH_CGROUP_DIR"
PREFIX = "dpo-bench-"
RANK_PREFIX = "rank"
KILL_WAIT_S = 10.0
"""How long cleanup waits for the SIGKILLed processes to leave the cgroups before it gives up."""
STALE_AFTER_S = 60.0
"""`remove_stale` leaves younger cell cgroups alone: a runner beside this one may be between setup and launch."""
WHAT_IS_NEEDED = (
    "run as root on a machine with the cgroup v1 memory controller mounted, or from a cgroup v2 that has the "
    "memory controller delegated and no processes of its own"
)

Version = Literal["v1", "v2"]


class CgroupUnavailable(BenchError):
    """No memory cgroup can be made here; the message is one line: why, and what is needed."""


class CgroupLeftover(RuntimeError):
    """Cleanup could not empty or remove a cell's cgroups (a process survived SIGKILL for KILL_WAIT_S)."""


class RankMemory(BaseModel):
    rank: int
    limit_bytes: int | None
    """The limit that was set, as the kernel reports it."""
    peak_bytes: int | None
    """Peak usage of the rank's cgroup (v1 memory.max_usage_in_bytes, v2 memory.peak); None where absent."""
    oom_kills: int
    """Processes the kernel's OOM killer killed in the rank's cgroup."""
    version: Version


@dataclass(frozen=True)
class Files:
    """The names of a cgroup version's memory files."""

    limit: str
    peak: str
    usage: str
    oom_events: str
    swap: str
    swap_value: Callable[[int], str]


FILES: dict[str, Files] = {
    "v1": Files(
        limit="memory.limit_in_bytes",
        peak="memory.max_usage_in_bytes",
        usage="memory.usage_in_bytes",
        oom_events="memory.oom_control",
        swap="memory.memsw.limit_in_bytes",  # memory + swap: equal to the limit, no swap at all
        swap_value=str,
    ),
    "v2": Files(
        limit="memory.max",
        peak="memory.peak",
        usage="memory.current",
        oom_events="memory.events",
        swap="memory.swap.max",
        swap_value=lambda _limit: "0",
    ),
}


@dataclass(frozen=True)
class CgroupFs:
    """Where /proc and the mount points are, and the few operations on cgroup files (a fake tree overrides them)."""

    proc: Path = Path("/proc")
    root: Path = Path("/")

    def mkdir(self, path: Path) -> None:
        path.mkdir()

    def rmdir(self, path: Path) -> None:
        path.rmdir()

    def write(self, path: Path, text: str) -> None:
        with path.open("w") as handle:
            handle.write(text)

    def kill(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)


SYSTEM = CgroupFs()


@dataclass(frozen=True)
class MemoryCgroup:
    """The calling process's own memory cgroup."""

    version: Version
    path: Path

    @property
    def files(self) -> Files:
        return FILES[self.version]


# --- detection -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupMount:
    root: str
    """The path of the hierarchy that is mounted (field 4 of mountinfo), "/" unless a subtree is mounted."""
    point: str
    fstype: str
    super_options: tuple[str, ...]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), field)


def mounts(fs: CgroupFs = SYSTEM) -> list[CgroupMount]:
    found = []
    for line in (fs.proc / "self" / "mountinfo").read_text().splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        found.append(CgroupMount(_unescape(fields[3]), _unescape(fields[4]), tail[0], tuple(tail[2].split(","))))
    return found


def own_cgroups(fs: CgroupFs = SYSTEM) -> list[tuple[list[str], str]]:
    """(controllers, path) per line of /proc/self/cgroup; v2's line has no controllers."""
    lines = []
    for line in (fs.proc / "self" / "cgroup").read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            lines.append(([c for c in parts[1].split(",") if c], parts[2]))
    return lines


def _mounted_path(fs: CgroupFs, mount: CgroupMount, cgroup_path: str) -> Path | None:
    """Where `cgroup_path` of the mounted hierarchy lies on disk; None when the mount does not show it."""
    rel = cgroup_path
    if mount.root != "/":
        if cgroup_path != mount.root and not cgroup_path.startswith(mount.root.rstrip("/") + "/"):
            return None
        rel = cgroup_path[len(mount.root) :]
    return fs.root / mount.point.lstrip("/") / rel.lstrip("/")


def _find_v1(fs: CgroupFs, cgroup_lines: list[tuple[list[str], str]], need_write: bool) -> MemoryCgroup | str:
    line = next((path for controllers, path in cgroup_lines if "memory" in controllers), None)
    if line is None:
        return "cgroup v1: memory controller not mounted"
    mount = next((m for m in mounts(fs) if m.fstype == "cgroup" and "memory" in m.super_options), None)
    if mount is None:
        return "cgroup v1: memory controller not mounted"
    path = _mounted_path(fs, mount, line)
    if path is None or not path.is_dir():
        return f"cgroup v1: own memory cgroup {line} not visible under {mount.point}"
    if need_write and not os.access(path, os.W_OK):
        return f"cgroup v1: {path} not writable"
    return MemoryCgroup("v1", path)


def _find_v2(fs: CgroupFs, cgroup_lines: list[tuple[list[str], str]], need_write: bool) -> MemoryCgroup | str:
    line = next((path for controllers, path in cgroup_lines if not controllers), None)
    mount = next((m for m in mounts(fs) if m.fstype == "cgroup2"), None)
    if line is None or mount is None:
        return "cgroup v2: not mounted"
    path = _mounted_path(fs, mount, line)
    if path is None or not path.is_dir():
        return f"cgroup v2: own cgroup {line} not visible under {mount.point}"
    try:
        controllers = (path / "cgroup.controllers").read_text().split()
    except OSError:
        controllers = []
    if "memory" not in controllers:
        return f"cgroup v2: memory controller not delegated to {path}"
    if need_write and not os.access(path, os.W_OK):
        return f"cgroup v2: {path} not writable"
    return MemoryCgroup("v2", path)


def _enable_children_memory(fs: CgroupFs, group: MemoryCgroup) -> str | None:
    """v2: children get the memory controller only through the parent's subtree_control; the reason if refused."""
    control = group.path / "cgroup.subtree_control"
    with contextlib.suppress(OSError):
        if "memory" in control.read_text().split():
            return None
    try:
        fs.write(control, "+memory")
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EBUSY:
            why += ": the cgroup holds processes, and cgroup v2 gives controllers only to children of one without"
        return f"cgroup v2: {control} refused +memory ({why})"
    return None


def locate(fs: CgroupFs = SYSTEM, need_write: bool = True) -> MemoryCgroup:
    """The own memory cgroup, v1 preferred; with `need_write`, one that can get children with a memory limit
    (on v2 this enables +memory in its cgroup.subtree_control). Raises CgroupUnavailable."""
    try:
        cgroup_lines = own_cgroups(fs)
    except OSError as exc:
        raise CgroupUnavailable(
            f"per-rank memory budget: cannot read {fs.proc / 'self' / 'cgroup'} ({exc.strerror}): {WHAT_IS_NEEDED}"
        ) from exc
    reasons = []
    for find in (_find_v1, _find_v2):
        try:
            found = find(fs, cgroup_lines, need_write)
        except OSError as exc:
            found = f"cannot read {exc.filename}: {exc.strerror}"
        if isinstance(found, MemoryCgroup):
            refused = _enable_children_memory(fs, found) if need_write and found.version == "v2" else None
            if refused is None:
                return found
            found = refused
        reasons.append(found)
    raise CgroupUnavailable(
        f"per-rank memory budget: no writable memory cgroup ({'; '.join(reasons)}): {WHAT_IS_NEEDED}"
    )


def check_available(fs: CgroupFs = SYSTEM) -> None:
    """Raises CgroupUnavailable unless cell cgroups can be made here. Cheap: reads /proc, writes nothing on v1."""
    locate(fs, need_write=True)


# --- reading ---------------------------------------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    """An integer file; None when absent, unreadable or "max" (v2's no limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _read_key(path: Path, key: str) -> int:
    """`key N` from a flat keyed file (memory.oom_control, memory.events); 0 when absent."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _own_file(name: str, fs: CgroupFs) -> int | None:
    try:
        group = locate(fs, need_write=False)
    except (CgroupUnavailable, OSError):
        return None
    return _read_int(group.path / getattr(group.files, name))


def own_usage_bytes(fs: CgroupFs = SYSTEM) -> int | None:
    """Current usage of the caller's memory cgroup (v1 memory.usage_in_bytes, v2 memory.current)."""
    return _own_file("usage", fs)


def own_peak_bytes(fs: CgroupFs = SYSTEM) -> int | None:
    """Peak usage of the caller's memory cgroup (v1 memory.max_usage_in_bytes, v2 memory.peak)."""
    return _own_file("peak", fs)


# --- a cell's cgroups ------------------------------------------------------------------------------------------


def _cgroup_dirs(path: Path) -> list[Path]:
    """`path` and every cgroup below it, deepest first (the order they can be removed in)."""
    found: list[Path] = []
    try:
        children = [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        children = []
    for child in children:
        found.extend(_cgroup_dirs(child))
    if path.is_dir():
        found.append(path)
    return found


def _pids(path: Path) -> set[int]:
    pids: set[int] = set()
    for directory in _cgroup_dirs(path):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split() if p.isdigit())
    return pids


def _write_pid(procs_file: Path, pid: int) -> None:
    """Move `pid` into the cgroup: one write(2), nothing else (this runs in a preexec_fn)."""
    fd = os.open(procs_file, os.O_WRONLY)
    try:
        os.write(fd, str(pid).encode())
    finally:
        os.close(fd)


def remove_cgroup(path: Path, fs: CgroupFs = SYSTEM, wait_s: float = KILL_WAIT_S) -> list[Path]:
    """SIGKILL every process in `path` and below, wait (bounded) until they are gone, remove the cgroups deepest
    first. Returns what could not be removed. Tolerates a tree that is half made, half removed, or absent."""
    deadline = time.monotonic() + wait_s
    kill_file = path / "cgroup.kill"  # v2, kernel >= 5.14: the kernel kills the whole subtree itself
    while True:
        pids = _pids(path) - {os.getpid()}
        if not pids:
            break
        if kill_file.exists():
            with contextlib.suppress(OSError):
                fs.write(kill_file, "1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                fs.kill(pid)
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    left = []
    for directory in _cgroup_dirs(path):
        while True:
            try:
                fs.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    left.append(directory)
                    break
                time.sleep(0.05)
    return left


class CellCgroups:
    """One cell's cgroups: the cell cgroup (launchers, no limit) and rank0..rank{ranks-1} (limit each)."""

    def __init__(self, group: MemoryCgroup, token: str, ranks: int, limit_bytes: int, fs: CgroupFs = SYSTEM):
        self.group = group
        self.path = group.path / f"{PREFIX}{token}"
        self.ranks = ranks
        self.limit_bytes = limit_bytes
        self.fs = fs
        self.owned = False
        """Set once this object made the cell cgroup: cleanup never touches one it did not make."""

    @property
    def version(self) -> Version:
        return self.group.version

    @property
    def env(self) -> dict[str, str]:
        return {CELL_ENV: str(self.path)}

    def rank_path(self, rank: int) -> Path:
        return self.path / f"{RANK_PREFIX}{rank}"

    def create(self) -> None:
        files = self.group.files
        try:
            self.fs.mkdir(self.path)
            self.owned = True
            for rank in range(self.ranks):
                rank_dir = self.rank_path(rank)
                self.fs.mkdir(rank_dir)
                self.fs.write(rank_dir / files.limit, str(self.limit_bytes))
                if (rank_dir / files.swap).exists():
                    self.fs.write(rank_dir / files.swap, files.swap_value(self.limit_bytes))
        except OSError as exc:
            raise CgroupUnavailable(
                f"per-rank memory budget: could not set up {exc.filename or self.path} ({exc.strerror}): "
                f"{WHAT_IS_NEEDED}"
            ) from exc

    def add_self(self) -> None:
        """Move the calling process into the cell cgroup (the launcher's preexec_fn)."""
        _write_pid(self.path / "cgroup.procs", os.getpid())

    def pids(self) -> set[int]:
        return _pids(self.path)

    def read(self) -> list[RankMemory]:
        files = self.group.files
        result = []
        for rank in range(self.ranks):
            rank_dir = self.rank_path(rank)
            result.append(
                RankMemory(
                    rank=rank,
                    limit_bytes=_read_int(rank_dir / files.limit),
                    peak_bytes=_read_int(rank_dir / files.peak),
                    oom_kills=_read_key(rank_dir / files.oom_events, "oom_kill"),
                    version=self.version,
                )
            )
        return result

    def cleanup(self, wait_s: float = KILL_WAIT_S) -> list[Path]:
        if not self.owned:
            return []
        return remove_cgroup(self.path, self.fs, wait_s)


@contextmanager
def cell_cgroups(token: str, ranks: int, limit_bytes: int, fs: CgroupFs = SYSTEM) -> Iterator[CellCgroups]:
    """Create the cell's cgroups, yield them, and on any exit kill what is inside and remove them. SIGINT is
    deferred during setup and cleanup, so neither is cut half-way; a KeyboardInterrupt from the body still
    cleans up. Raises CgroupUnavailable when they cannot be made, CgroupLeftover when they cannot be removed
    (only when the body ended normally; otherwise the leftover is reported on stderr)."""
    if ranks < 1 or limit_bytes < 1:
        raise ValueError(f"cell_cgroups needs ranks >= 1 and limit_bytes >= 1, got {ranks} and {limit_bytes}")
    group = locate(fs, need_write=True)
    cell = CellCgroups(group, token, ranks, limit_bytes, fs)
    finished = False
    try:
        with DeferredSigint():
            cell.create()
        yield cell
        finished = True
    finally:
        with DeferredSigint():
            left = cell.cleanup()
        if left:
            message = f"could not remove {', '.join(map(str, left))}: processes survived SIGKILL for {KILL_WAIT_S} s"
            if finished:
                raise CgroupLeftover(message)
            print(f"warning: {message}", file=sys.stderr)


def join_rank(rank: int, environ: Mapping[str, str]) -> bool:
    """In a worker, first thing: move this process into its rank's cgroup. False when the cell has none."""
    cell_dir = environ.get(CELL_ENV)
    if not cell_dir:
        return False
    rank_dir = Path(cell_dir) / f"{RANK_PREFIX}{rank}"
    if not rank_dir.is_dir():
        raise RuntimeError(
            f"rank {rank} cannot join its memory cgroup: {rank_dir} does not exist ({CELL_ENV}={cell_dir})"
        )
    try:
        _write_pid(rank_dir / "cgroup.procs", os.getpid())
    except OSError as exc:
        raise RuntimeError(
            f"rank {rank} cannot join its memory cgroup: writing {rank_dir / 'cgroup.procs'}: {exc.strerror}"
        ) from exc
    return True


def remove_stale(fs: CgroupFs = SYSTEM, min_age_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the dpo-bench-* cgroups under the own memory cgroup that hold no live process (a runner that was
    SIGKILLed leaves them) and are older than `min_age_s` (younger ones may belong to a runner beside this one,
    between setup and launch). Returns what was removed."""
    try:
        group = locate(fs, need_write=True)
    except CgroupUnavailable:
        return []
    removed = []
    now = time.time()
    for path in sorted(group.path.glob(f"{PREFIX}*")):
        try:
            young = now - path.stat().st_mtime < min_age_s
        except OSError:
            continue
        if young or not path.is_dir() or _pids(path):
            continue
        if not remove_cgroup(path, fs, wait_s=1.0):
            removed.append(path)
    return removed
