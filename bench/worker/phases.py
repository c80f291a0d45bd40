"""The moments a rank passes from its process's start to its exit, in wall-clock (epoch) seconds, the clock the runner
reads too: the judge splits a cell's wall time between the launcher, each phase of a rank and the exit from them
(bench/judge/wall_split.py). A mark is a clock read and a dictionary entry; the step marks are set once per step.
"""

import os
import time
from pathlib import Path

EVENTS = (
    "process_start",
    "main_start",
    "torch_imported",
    "cuda_init",
    "imported",
    "model_loaded",
    "trainer_built",
    "train_begun",
    "first_step",
    "last_step",
    "finished",
)
"""In the order a rank passes them. process_start: the kernel's start of the process (a forked rank: the fork);
main_start: the worker's module begins to run (the interpreter and its site set up); torch_imported: its spec read,
the worker's own modules and torch imported; cuda_init: torch's CUDA state initialised (ranks that have CUDA);
imported: the cell's libraries; model_loaded: the policy and the reference built; trainer_built: the method's
trainer; train_begun: the trainer prepared its training (data loader, precomputed reference log-probs, optimizer,
accelerator.prepare, DeepSpeed's engine) and begins; first_step: the first step begins; last_step: the last step
ended; finished: evaluated, saved, left the process group, the report about to be written (the process leaves right
after)."""

_marks: dict[str, float] = {}


def mark(event: str, at: float | None = None) -> None:
    """Note that this rank reached `event` now (or at `at`); a later mark of the same event replaces it."""
    if event not in EVENTS:
        raise ValueError(f"unknown phase event {event!r}; one of {', '.join(EVENTS)}")
    _marks[event] = time.time() if at is None else at


def marked(event: str) -> bool:
    return event in _marks


def timeline() -> dict[str, float]:
    """Every event marked so far, in EVENTS order."""
    return {event: _marks[event] for event in EVENTS if event in _marks}


def clear() -> None:
    _marks.clear()


def process_start(stat: str | None = None, now: float | None = None, since_boot: float | None = None) -> float:
    """When this process started, in epoch seconds: /proc/self/stat's start time (clock ticks since boot, kernel
    boot time) set against the clocks now. Resolution: one clock tick (10 ms)."""
    stat = stat if stat is not None else Path("/proc/self/stat").read_text()
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # starttime: field 22 of stat, the 20th after the name
    now = time.time() if now is None else now
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) if since_boot is None else since_boot
    return now - (since_boot - ticks / os.sysconf("SC_CLK_TCK"))
