"""Where a cell's wall time went: the launcher's start, each phase of a rank (bench/worker/phases.py), and the
launcher's exit. Pure.

The wall is split along the timeline of the rank that finished last (the one the launcher waited for): from the
launcher's start to that rank's process start (`launch`: the launcher's own interpreter and imports, and the ranks
it started before), each phase up to the event that ends it, and from the rank's report to the launcher's end
(`exit`: the rank leaving, the launcher noticing and leaving). A rank that failed runs its last phase to its report.
`unaccounted` is what the segments leave of the wall the executor measured: time outside the launcher's life (the
executor's own set-up and clean-up), a missing event, the clocks' error (a process start is known to a clock tick,
10 ms).
"""

from collections.abc import Sequence

from bench.executors.base import Outcome
from bench.worker.rank_report import RankReport

SEGMENTS = (
    ("interpreter", "main_start"),
    ("torch", "torch_imported"),
    ("cuda", "cuda_init"),
    ("imports", "imported"),
    ("model", "model_loaded"),
    ("trainer", "trainer_built"),
    ("prepare", "train_begun"),
    ("first_batch", "first_step"),
    ("steps", "last_step"),
    ("finish", "finished"),
)
"""Each phase of a rank and the event that ends it; it begins at the previous event the rank marked."""
NAMES = ("launch", *(name for name, _ in SEGMENTS), "exit", "unaccounted")
START_UP = ("launch", "interpreter", "torch", "cuda", "imports", "model", "trainer", "prepare", "first_batch")
"""The segments before the first step begins: a cell's start-up."""


def critical(reports: Sequence[RankReport]) -> RankReport | None:
    """The rank whose timeline ends last; None when no rank kept one."""
    timed = [r for r in reports if r.phases]
    return max(timed, key=lambda r: max(r.phases.values())) if timed else None


def wall_split(outcome: Outcome, reports: Sequence[RankReport]) -> dict[str, float]:
    """Seconds of the cell's wall per segment (NAMES order, the segments its events allow), `unaccounted` last;
    empty when no rank kept a timeline."""
    rank = critical(reports)
    if rank is None:
        return {}
    events = rank.phases
    split: dict[str, float] = {}
    at = events.get("process_start")
    if outcome.launched_at is not None and at is not None:
        split["launch"] = at - outcome.launched_at
    for name, event in SEGMENTS:
        if event in events:
            if at is not None:
                split[name] = events[event] - at
            at = events[event]
    if outcome.ended_at is not None and at is not None:
        split["exit"] = outcome.ended_at - at
    split["unaccounted"] = outcome.wall_s - sum(split.values())
    return {name: round(seconds, 3) for name, seconds in split.items()}


def start_up_s(split: dict[str, float]) -> float:
    """Seconds from the launcher's start to the first step's beginning."""
    return sum(split.get(name, 0.0) for name in START_UP)
