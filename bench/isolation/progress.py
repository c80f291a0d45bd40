"""The progress watchdog: a cell whose training steps stop ends as a hang, naming the rank that stalled, instead of
waiting out its whole time limit.

Each rank's worker marks every training step in its own file in the cell's folder (`mark_step`, called from the
step callback) and removes it when training ends (`end_steps`). The executor looks at the files' ages while it waits
(`stalled`): a rank whose last step is older than the profile's `stall_s` has stalled. Before the first step (model
loading, a precomputed reference pass) and after the last (saving, evaluation) no file exists and nothing is judged:
only the cell's time limit applies there. Files only, no TRL: the executors and the workers both use this module.
"""

import time
from pathlib import Path

PREFIX = "progress.rank"


def step_file(folder: Path, rank: int) -> Path:
    return folder / f"{PREFIX}{rank}"


def mark_step(folder: Path, rank: int, step: int) -> None:
    """Rank `rank` ended training step `step` now (the file's modification time)."""
    step_file(folder, rank).write_text(f"{step}\n", encoding="utf-8")


def end_steps(folder: Path, rank: int) -> None:
    step_file(folder, rank).unlink(missing_ok=True)


def last_steps(folder: Path) -> dict[int, tuple[float, str]]:
    """Rank -> (modification time, last step) of every rank that is between its first and last training step."""
    marks = {}
    for path in folder.glob(f"{PREFIX}*"):
        suffix = path.name[len(PREFIX) :]
        if not suffix.isdigit():
            continue
        try:
            marks[int(suffix)] = (path.stat().st_mtime, path.read_text(encoding="utf-8").strip())
        except OSError:  # removed between glob and stat: that rank just ended its steps
            continue
    return marks


def stall_reason(marks: dict[int, tuple[float, str]], now: float, stall_s: float) -> str | None:
    """Pure: why the cell has stalled (the rank whose last step is oldest, when it is older than `stall_s`), or None."""
    if not marks:
        return None
    rank, (when, step) = min(marks.items(), key=lambda item: item[1][0])
    idle = now - when
    if idle <= stall_s:
        return None
    others = sorted(r for r, (t, _) in marks.items() if r != rank and now - t > stall_s)
    also = f"; rank(s) {', '.join(map(str, others))} stalled too" if others else ""
    return (
        f"rank {rank} made no training step for {idle:.0f} s after step {step or '?'} (progress watchdog limit "
        f"{stall_s:g} s){also}"
    )


def stalled(folder: Path | None, stall_s: float | None, now: float | None = None) -> str | None:
    """The executor's look: why the cell in `folder` has stalled, or None (also without a watchdog)."""
    if folder is None or stall_s is None:
        return None
    return stall_reason(last_steps(folder), time.time() if now is None else now, stall_s)
