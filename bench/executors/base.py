"""Executors run one launch plan (argv, environment, files) in isolation and report how it ended. They know
nothing of TRL."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.isolation.cgroups import RankMemory
from bench.launchers import LaunchInputs

RUN_DIR_LABEL = "dpo-bench.run-dir"
"""Among the labels of a cell (Executor.run): its run folder, absolute. A container carries it, so the next run finds
the containers of a runner that died (bench/run/leftovers.py)."""


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[Path, str] = field(default_factory=dict)
    """Every file the launch reads, path -> content; written by `write_files` before the launch."""
    ranks: int = 1
    """Worker processes the launch starts (each joins its own memory cgroup under a per-rank budget)."""
    launcher: str | None = None
    inputs: LaunchInputs | None = None
    """What `argv` was built from: a scheduler rebuilds it for each node of a job (bench/launchers/)."""
    devices: int = 0
    """GPUs the cell gets on each node (0: none); `env` names them in CUDA_VISIBLE_DEVICES where the run chose them."""
    progress_dir: Path | None = None
    """Where each rank's worker marks its steps (bench/isolation/step_marks.py); None: no progress watchdog."""
    stall_s: float | None = None
    """A rank that made no step for this long ends the cell as a hang; None: no progress watchdog."""
    cores: list[int] | None = None
    """The CPU cores every process of the cell is bound to (cells side by side on a CPU profile); None: any."""
    slot: int | None = None
    """Where cells run side by side: the first of its devices, unique among the cells running at once."""
    memory_budget_bytes: int | None = None
    """Per-rank memory limit of this cell in a slot of the host's memory (bench/run/memory_slots.py); None: the
    executor's own."""

    @property
    def config_files(self) -> list[Path]:
        return list(self.files)


@dataclass(frozen=True)
class HarnessFault:
    """Something of the harness (the fork server, the process standing in for a forked launcher) or of the machine
    under it (/dev/shm), not the cell, failed while the cell ran: the record names it, never the cell."""

    what: str
    """One line: what failed, and what the harness did about it."""
    spoiled: bool = True
    """The cell's own outcome is unknown: the fault ended or stopped it. False: the harness recovered the cell's real
    outcome (its record keeps its own status and names the fault)."""
    retry: bool = False
    """Running the cell again once is safe and may succeed: the fault's cause is gone (a dead fork server is
    restarted, or the cells start fresh), and nothing of the spoiled trial is recorded."""


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
    stalled: str | None = None
    """The progress watchdog's reason for killing the cell (which rank made no step for how long); None otherwise."""
    harness_fault: HarnessFault | None = None
    """What of the harness or the machine failed while the cell ran; None: nothing."""
    launched_at: float | None = None
    """Epoch seconds when the executor started the launcher, and when it saw the launcher end: the ends of the wall
    time the judge splits by the ranks' phases (bench/judge/wall_split.py); None where the executor does not say."""
    ended_at: float | None = None


class Executor(Protocol):
    name: str
    python: str
    """Interpreter that runs workers and launchers where this executor runs them."""
    image: str | None
    concurrent: bool
    """True: a scheduler orders the cells, and the runner hands it every cell at once (bench/run/in_flight.py)."""
    memory_budget_bytes: int | None
    """Each rank's memory limit where this executor enforces one (a memory cgroup per rank); None: none."""

    def run(self, launch: LaunchPlan, log_path: Path, timeout_s: float, labels: dict[str, str]) -> Outcome: ...
