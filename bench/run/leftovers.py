"""Before a run starts: clean up after every runner of the same hardware profile that ended mid-cell without
cleaning up (SIGKILL, a crash, a power cut), as the local executor named the cell in its run folder."""

from pathlib import Path

from bench.executors.local import LIVE_FILE, clean_up_after
from bench.results.lock import runner_gone


def clean_up_dead_runners(hardware_dir: Path, own_run: Path) -> list[str]:
    """One line per run whose runner is gone and left a running cell named: what was removed. A run whose runner
    is alive (it holds its run's lock) is left alone; `own_run` is this runner's, whose lock it holds."""
    lines = []
    for live_file in sorted(hardware_dir.glob(f"*/{LIVE_FILE}")):
        run_dir = live_file.parent
        if run_dir.resolve() == own_run.resolve():
            line = clean_up_after(live_file)
        else:
            with runner_gone(run_dir) as gone:
                line = clean_up_after(live_file) if gone else None
        if line:
            lines.append(f"run {run_dir.name}: {line}")
    return lines
