"""Executors run one launch plan in isolation and report how it ended. They know nothing of TRL."""

from dataclasses import dataclass


@dataclass
class Outcome:
    exit_code: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    oom_killed: bool = False
    image: str | None = None
