"""Which slots of a device are taken, and which cells ran beside which: the scheduler's one view of what it shares
(bench/run/side_by_side.py).

`Devices` keeps it in the runner (disjoint devices of this machine, one run). `DeviceLedger` keeps it in a file every
runner on the machine shares (`run --gpu-slots`), under its lock, so that several runs' cells share one card's memory
and each record names every cell beside it. A run waiting for the whole device says so, and no other run takes a slot
until it has run; a dead runner's entries are let go by the next reader. With priorities (`run --slot-priority N`,
lower first) a run takes no slot while a higher-priority one wants one (asked in the last WANT_TTL_S and got none)."""

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from bench.errors import BenchError
from bench.files import write_whole
from bench.run.runner_registry import runners_dir
from bench.run.slots import pick

SLOTS_FOLDER = "slots"
"""Under the machine's runners folder (bench/run/runner_registry.py): one ledger per shared device."""
WANT_TTL_S = 5.0
"""A run's unmet request holds lower priorities off this long: a waiting run asks again every second
(bench/run/side_by_side.py POLL_S); one that stopped asking (its cell started, or its time budget left it out) lets
go."""


@dataclass
class Span:
    """A cell on the device from `started` until `ended` (epoch seconds; None: still running)."""

    run_id: str
    cell: str
    started: float
    ended: float | None = None


def beside(mine: Span, spans: list[Span], run_id: str) -> list[str]:
    """The cells that ran at some moment while `mine` (ended) did: its own run's by cell id, another run's as
    `<run>/<cell>`. Pure."""
    assert mine.ended is not None
    names = {
        s.cell if s.run_id == run_id else f"{s.run_id}/{s.cell}"
        for s in spans
        if s is not mine and s.started <= mine.ended and (s.ended is None or s.ended >= mine.started)
    }
    return sorted(names)


@dataclass
class Devices:
    """The machine's own devices, handed out by this runner alone."""

    total: int
    run_id: str = ""
    free: list[int] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    held: dict[int, Span] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free = list(range(self.total))

    def take(self, count: int, cell: str) -> tuple[list[int], Span] | None:
        indexes = pick(self.free, count, self.total)
        if indexes is None:
            return None
        span = Span(self.run_id, cell, time.time())
        self.spans.append(span)
        for index in indexes:
            self.free.remove(index)
        return indexes, span

    def give(self, indexes: list[int], span: Span) -> list[str]:
        """Hand the devices back; the cells that ran beside `span`."""
        span.ended = time.time()
        self.free.extend(indexes)
        return beside(span, self.spans, self.run_id)


class _Holder(BaseModel):
    pid: int
    since: int | None
    """The runner's start time (/proc/<pid>/stat, clock ticks): a pid reused by another process is not it."""
    run_id: str
    cell: str
    started: float
    slots: list[int]


class _Waiter(BaseModel):
    pid: int
    since: int | None
    run_id: str
    priority: int = 0


class _Want(BaseModel):
    """A run that asked for slots and got none, at `at` (epoch seconds)."""

    pid: int
    since: int | None
    run_id: str
    priority: int
    at: float
    first: float = 0.0
    """When it began to wait, renewed since without a break."""


class _SpanRow(BaseModel):
    run_id: str
    cell: str
    started: float
    ended: float


class _LedgerFile(BaseModel):
    slots: int
    memory_bytes: int
    holders: list[_Holder] = []
    waiting: list[_Waiter] = []
    """Runs that wait for every slot (a cell alone): no run of their priority or lower takes one meanwhile."""
    wanting: list[_Want] = []
    """Runs that asked for slots and got none: no run of a lower priority takes one meanwhile."""
    ended: list[_SpanRow] = []


def process_since(pid: int) -> int | None:
    """The process's start time in clock ticks (field 22 of /proc/<pid>/stat); None where it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def _alive(pid: int, since: int | None) -> bool:
    now = process_since(pid)
    return now is not None and (since is None or now == since)


@dataclass
class DeviceLedger:
    """A shared device's slots in a file every runner on the machine reads and writes under its lock."""

    path: Path
    total: int
    memory_bytes: int
    run_id: str
    pid: int = field(default_factory=os.getpid)
    priority: int = 0
    """Lower first: see the module's docstring."""

    @classmethod
    def for_device(cls, key: str, total: int, memory_bytes: int, run_id: str, priority: int = 0) -> "DeviceLedger":
        folder = runners_dir() / SLOTS_FOLDER
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                folder.chmod(0o1777)  # every user's runners share it, as the runners folder
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return cls(folder / f"{name}.json", total, memory_bytes, run_id, priority=priority)

    @contextlib.contextmanager
    def _opened(self) -> Iterator[_LedgerFile]:
        """The file's content under its lock, written back when the block ends; the entries of dead runners let go."""
        lock = self.path.with_suffix(".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            ledger = self._read()
            yield ledger
            write_whole(self.path, ledger.model_dump_json())
        finally:
            os.close(fd)

    def _read(self) -> _LedgerFile:
        try:
            ledger = _LedgerFile.model_validate_json(self.path.read_bytes())
        except (OSError, ValidationError):
            ledger = _LedgerFile(slots=self.total, memory_bytes=self.memory_bytes)
        now = time.time()
        for gone in [h for h in ledger.holders if not _alive(h.pid, h.since)]:
            ledger.holders.remove(gone)
            ledger.ended.append(_SpanRow(run_id=gone.run_id, cell=gone.cell, started=gone.started, ended=now))
        ledger.waiting = [w for w in ledger.waiting if _alive(w.pid, w.since)]
        ledger.wanting = [w for w in ledger.wanting if now - w.at < WANT_TTL_S and _alive(w.pid, w.since)]
        if ledger.holders or ledger.waiting:
            if (ledger.slots, ledger.memory_bytes) != (self.total, self.memory_bytes):
                raise BenchError(self._mismatch(ledger))
        else:
            ledger.slots, ledger.memory_bytes = self.total, self.memory_bytes
        return ledger

    def _mismatch(self, ledger: _LedgerFile) -> str:
        runs = ", ".join(sorted({h.run_id for h in ledger.holders} | {w.run_id for w in ledger.waiting}))
        return (
            f"--gpu-slots {self.total} ({self.memory_bytes / 1e9:.1f} GB): run(s) {runs} share this device in "
            f"{ledger.slots} slots of {ledger.memory_bytes / 1e9:.1f} GB ({self.path}); pass --gpu-slots "
            f"{ledger.slots}, or wait for them to end"
        )

    def take(self, count: int, cell: str) -> tuple[list[int], Span] | None:
        """`count` free slots for `cell`, or None; a request for every slot that cannot be met yet holds the runs of
        its priority or lower off until it is, any other unmet request the runs of a lower priority."""
        with self._opened() as ledger:
            since = process_since(self.pid)
            ahead = [w for w in ledger.waiting if w.run_id != self.run_id and w.priority <= self.priority]
            mine = [w for w in ledger.waiting if w.run_id == self.run_id]
            above = [w for w in ledger.wanting if w.run_id != self.run_id and w.priority < self.priority]
            taken = {i for h in ledger.holders for i in h.slots}
            indexes = pick([i for i in range(self.total) if i not in taken], count, self.total)
            if (ahead and not mine and count < self.total) or above or indexes is None:
                self._want(ledger, since, alone=count >= self.total and not mine and indexes is None)
                return None
            ledger.waiting = [w for w in ledger.waiting if w.run_id != self.run_id]
            ledger.wanting = [w for w in ledger.wanting if w.run_id != self.run_id]
            started = time.time()
            ledger.holders.append(
                _Holder(pid=self.pid, since=since, run_id=self.run_id, cell=cell, started=started, slots=indexes)
            )
        return indexes, Span(self.run_id, cell, started)

    def _want(self, ledger: _LedgerFile, since: int | None, alone: bool) -> None:
        """Note (or renew) this run's unmet request; `alone`: one for every slot, which holds the others off."""
        now = time.time()
        first = min([w.first for w in ledger.wanting if w.run_id == self.run_id], default=now)
        ledger.wanting = [w for w in ledger.wanting if w.run_id != self.run_id]
        ledger.wanting.append(
            _Want(pid=self.pid, since=since, run_id=self.run_id, priority=self.priority, at=now, first=first)
        )
        if alone:
            ledger.waiting.append(_Waiter(pid=self.pid, since=since, run_id=self.run_id, priority=self.priority))

    def give(self, indexes: list[int], span: Span) -> list[str]:
        """Hand the slots back; the cells of every run that ran beside `span` on the device."""
        span.ended = time.time()
        with self._opened() as ledger:
            ledger.holders = [
                h
                for h in ledger.holders
                if not (h.run_id == span.run_id and h.cell == span.cell and h.started == span.started)
            ]
            others = [Span(h.run_id, h.cell, h.started) for h in ledger.holders]
            others += [Span(e.run_id, e.cell, e.started, e.ended) for e in ledger.ended]
            names = beside(span, [*others, span], self.run_id)
            ledger.ended.append(_SpanRow(run_id=span.run_id, cell=span.cell, started=span.started, ended=span.ended))
            oldest = min((h.started for h in ledger.holders), default=span.ended)
            ledger.ended = [e for e in ledger.ended if e.ended >= oldest]  # no cell on the device started before
        return names

    def waiting_runs(self, since: float) -> set[str]:
        """The other runs that have waited for slots since `since` (epoch seconds) without a break and hold none: their
        runners had no cell on the device, only a place in the file."""
        with self._opened() as ledger:
            held = {h.run_id for h in ledger.holders}
            waits = {w.run_id for w in ledger.wanting if w.first <= since}
        return waits - held - {self.run_id}

    def leave(self) -> None:
        """This run is done with the device: nothing of it stays in the file (a Ctrl-C's cells included)."""
        with self._opened() as ledger:
            ledger.waiting = [w for w in ledger.waiting if w.pid != self.pid]
            ledger.wanting = [w for w in ledger.wanting if w.pid != self.pid]
            now = time.time()
            for held in [h for h in ledger.holders if h.pid == self.pid]:
                ledger.holders.remove(held)
                ledger.ended.append(_SpanRow(run_id=held.run_id, cell=held.cell, started=held.started, ended=now))
