"""Progress of long work on standard error: a line every few seconds with how much is done, the time each item
took on average and the time left at that pace, and a last line when it is done."""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@dataclass
class ProgressLine:
    what: str
    """What is counted, as the line starts: `decision page, tiny`."""
    total: int
    unit: str = "points"
    every_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    out: TextIO | None = None
    """None: standard error as it is when a line is written."""
    started: float = field(init=False)
    shown: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.shown = self.clock()

    def advanced(self, done: int) -> None:
        """`done` of `total` are done: a line when `every_s` has passed since the last one, and at the end."""
        now = self.clock()
        if done < self.total and now - self.shown < self.every_s:
            return
        self.shown = now
        elapsed = now - self.started
        each = elapsed / done if done else 0.0
        if done >= self.total:
            line = f"{self.what}: {done:,} {self.unit} in {duration(elapsed)} ({each:.2f} s each)"
        else:
            left = duration(each * (self.total - done))
            line = f"{self.what}: {done:,}/{self.total:,} {self.unit}, {each:.2f} s each, about {left} left"
        print(line, file=self.out or sys.stderr, flush=True)
