"""Executors run one launch plan in isolation and report how it ended. They know nothing of TRL."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.isolation.cgroups import RankMemory
from bench.run.launch import LaunchPlan


@dataclass
class Outcome:
    exit_code: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    oom_killed: bool = False
    image: str | None = None
    rank_memory: list[RankMemory] = field(default_factory=list)
    """The kernel's figures per rank under a per-rank memory budget (local executor); empty without one."""


class Executor(Protocol):
    name: str
    python: str
    """Interpreter that runs workers and launchers where this executor runs them."""
    image: str | None

    def run(self, plan: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome: ...
