"""The progress watchdog: a cell whose training steps stop ends as a hang, naming the rank that stalled, instead of
waiting out its whole time limit.

Each rank marks the beginning and end of every training step in its own file in the cell's folder (`mark`) and
removes it when training ends (`end_steps`); the executor reads the files while it waits (`stalled`). Once a rank has
made no progress for the profile's `stall_s` the cell has stalled. The rank named is the one whose process is stopped
(state T in /proc), else the one furthest behind (its peers wait inside the next step's collective), else the one
whose last mark is oldest. Before the first step and after the last no file exists: only the time limit applies.
Files and /proc only, no TRL: the executors and the workers both use it."""

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PREFIX = "progress.rank"
Phase = Literal["began", "ended"]


@dataclass(frozen=True)
class Mark:
    when: float
    """The file's modification time: the rank's last progress."""
    phase: Phase
    step: int
    pid: int | None = None
    """The rank's process (None in a file without one)."""

    @property
    def position(self) -> int:
        """How far the rank got: began step k is 2k - 1, ended step k is 2k."""
        return 2 * self.step - (1 if self.phase == "began" else 0)

    def describe(self) -> str:
        return f"{'inside' if self.phase == 'began' else 'after'} step {self.step}"


def step_file(folder: Path, rank: int) -> Path:
    return folder / f"{PREFIX}{rank}"


class StepMarks:
    """One rank's progress file, kept open while it trains: each mark overwrites the last in place with one write of
    a fixed-width line, which also sets the modification time. Opening and truncating the file at every mark cost
    ~160 us, two marks a step: 1 % of a 30 ms CPU step."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.path = step_file(folder, rank)
        self._fd: int | None = None
        self._pid = os.getpid()

    def mark(self, phase: Phase, step: int) -> None:
        """The rank began or ended training step `step` now."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self._fd, f"{phase} {step:>12} {self._pid:>10}\n".encode(), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def end(self) -> None:
        """Training ended: the file goes (nothing is judged after the last step)."""
        self.close()
        self.path.unlink(missing_ok=True)


def mark(folder: Path, rank: int, phase: Phase, step: int) -> None:
    """One mark, the file closed after it (what StepMarks writes, for a rank that marks once)."""
    marks = StepMarks(folder, rank)
    marks.mark(phase, step)
    marks.close()


def end_steps(folder: Path, rank: int) -> None:
    StepMarks(folder, rank).end()


def read_mark(path: Path) -> Mark | None:
    try:
        when = path.stat().st_mtime
        phase, step, *pid = path.read_text(encoding="utf-8").split()
    except (OSError, ValueError):  # removed meanwhile (the rank ended its steps), or caught mid-write
        return None
    if phase not in ("began", "ended") or not step.isdigit() or len(pid) > 1 or not all(p.isdigit() for p in pid):
        return None
    return Mark(when, phase, int(step), int(pid[0]) if pid else None)  # type: ignore[arg-type]


def process_state(pid: int | None) -> str | None:
    """The state letter of a live process (field 3 of /proc/<pid>/stat: R, S, D, T stopped, t traced); None when
    there is no such process."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()[0]


STOPPED = frozenset("Tt")
"""Process states of a process that cannot run until it is continued: stopped by a signal, or by a tracer."""


def last_marks(folder: Path) -> dict[int, Mark]:
    """Rank -> its last mark, for every rank between its first and last training step."""
    marks = {}
    for path in folder.glob(f"{PREFIX}*"):
        suffix = path.name[len(PREFIX) :]
        if suffix.isdigit() and (found := read_mark(path)) is not None:
            marks[int(suffix)] = found
    return marks


def stall_reason(
    marks: dict[int, Mark], now: float, stall_s: float, states: Mapping[int, str | None] | None = None
) -> str | None:
    """Pure: why the cell has stalled (no rank progressed for `stall_s`), or None. Named is a rank whose process is
    stopped (`states`: rank -> its process state), else the rank furthest behind, else the oldest mark."""
    if not marks or any(now - m.when <= stall_s for m in marks.values()):
        return None
    states = states or {}
    stopped = {r for r, state in states.items() if state in STOPPED}
    rank, behind = min(marks.items(), key=lambda item: (item[0] not in stopped, item[1].position, item[1].when))
    how = f", its process stopped (state {states[rank]})" if rank in stopped else ""
    others = sorted((r, m) for r, m in marks.items() if r != rank)
    also = "; ".join(f"rank {r} waits {m.describe()}" for r, m in others)
    return (
        f"rank {rank} made no progress for {now - behind.when:.0f} s {behind.describe()}{how} (progress watchdog "
        f"limit {stall_s:g} s)" + (f"; {also}" if also else "")
    )


def stalled(folder: Path | None, stall_s: float | None, now: float | None = None) -> str | None:
    """The executor's look: why the cell in `folder` has stalled, or None (also without a watchdog)."""
    if folder is None or stall_s is None:
        return None
    marks = last_marks(folder)
    states = {rank: process_state(mark.pid) for rank, mark in marks.items()}
    return stall_reason(marks, time.time() if now is None else now, stall_s, states)
