"""Before a run starts: clean up after every runner of the same hardware profile that ended mid-cell without
cleaning up (SIGKILL, a crash, a power cut): the processes the local executor named in the run folder, and the docker
containers and Slurm jobs that outlive their runner (labelled with, or writing into, the dead runner's run folder);
and after any runner of this user's that died while its fork server ran: the server's folder.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from bench.errors import BenchError
from bench.executors.docker import labelled_containers, remove_container
from bench.executors.local import LIVE_FILES, clean_up_after
from bench.isolation.server_folder import FOLDER_PREFIX, left_behind
from bench.results.lock import LOCK_FILE, died_holding, runner_gone


def clean_up_dead_runners(
    hardware_dir: Path, own_run: Path, took_over: int | None = None, resumes_jobs: bool = False
) -> list[str]:
    """One line per run whose runner is gone and left something behind: what was removed. A run whose runner is
    alive (it holds its run's lock) is left alone; `own_run` is this runner's, whose lock it holds: `took_over` is the
    pid of its runner that died holding it, and `resumes_jobs` keeps that runner's Slurm jobs (the Slurm executor
    waits for them instead of submitting the cells again)."""
    lines = []
    for live_file in sorted(hardware_dir.glob(f"*/{LIVE_FILES}")):
        run_dir = live_file.parent
        if run_dir.resolve() == own_run.resolve():
            line = clean_up_after(live_file)
        else:
            with runner_gone(run_dir) as gone:
                line = clean_up_after(live_file) if gone else None
        if line:
            lines.append(f"run {run_dir.name}: {line}")
    with contextlib.ExitStack() as held:  # each dead run's lock, held while its leftovers go
        dead = {own_run.resolve(): took_over} if took_over else {}
        for lock_file in sorted(hardware_dir.glob(f"*/{LOCK_FILE}")):
            run_dir = lock_file.parent.resolve()
            if run_dir != own_run.resolve() and (pid := held.enter_context(died_holding(run_dir))):
                dead[run_dir] = pid
        if dead:
            lines += remove_containers_of(dead)
            lines += cancel_jobs_of(
                {run: pid for run, pid in dead.items() if not (resumes_jobs and run == own_run.resolve())}
            )
    return lines


def remove_containers_of(dead: dict[Path, int]) -> list[str]:
    """Remove the docker containers labelled with the run folders of dead runners (run folder -> runner pid)."""
    lines = []
    for run_dir, names in sorted(labelled_containers().items()):
        if (pid := dead.get(run_dir)) is not None:
            for name in names:
                remove_container(name)
            lines.append(
                f"run {run_dir.name}: runner {pid} ended without cleaning up: removed container(s) {', '.join(names)}"
            )
    return lines


def cancel_jobs_of(dead: dict[Path, int]) -> list[str]:
    """scancel the Slurm jobs of dead runners' runs that are still alive (run folder -> runner pid)."""
    from bench.executors.slurm import jobs

    lines = []
    for run_dir, pid in sorted(dead.items()):
        if not (run_dir / jobs.JobRegistry.FILE).is_file():
            continue
        try:
            cancelled, left = jobs.cancel_jobs_of(run_dir)
        except BenchError as exc:
            lines.append(f"run {run_dir.name}: runner {pid} ended without cleaning up; its Slurm jobs: {exc}")
            continue
        if cancelled:
            still = f"; still alive: {', '.join(left)}" if left else ""
            lines.append(
                f"run {run_dir.name}: runner {pid} ended without cleaning up: cancelled Slurm job(s) "
                f"{', '.join(cancelled)}{still}"
            )
    return lines


def remove_left_fork_folders(parent: Path | None = None) -> list[str]:
    """Remove the fork-server folders (in the system's temporary folder, or `parent`) that runners of this user's
    left when they died: those no runner holds (bench/isolation/server_folder.py) and no live process names on its
    command line (a server, or a client of one). One line per folder removed."""
    parent = parent or Path(tempfile.gettempdir())
    lines = []
    named: list[bytes] | None = None
    for folder in sorted(parent.glob(f"{FOLDER_PREFIX}*")):
        with left_behind(folder) as runner:
            if runner is None:
                continue
            named = command_lines() if named is None else named
            if any(os.fsencode(folder) in line for line in named):
                continue
            shutil.rmtree(folder, ignore_errors=True)
        whose = f"of runner {runner}, which is gone" if runner else "that no live process uses"
        lines.append(f"fork server folder {folder} {whose}")
    return lines


def command_lines() -> list[bytes]:
    """The command line of every live process but this one (arguments joined by NUL)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                found.append(handle.read())
    return found
