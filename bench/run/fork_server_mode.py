"""`run --start`: whether the run's cells fork from a pre-imported process (bench/isolation/fork_server_process.py) or
start each Python process as an interpreter of its own, and the fork server's life within the run.

`auto` forks on CPU profiles run by the local executor without a memory budget. Elsewhere cells start fresh: in a
container or a Slurm job the server's process is not there; under a per-rank memory budget the libraries' pages a
child shares with the server stay charged to the server's memory cgroup, not to the rank's, so the rank's cgroup peak
would not be its own. On accelerators the server imports what every cell imports without initialising CUDA or
leaving NVML initialised (bench/worker/preload.py `accelerator`); `auto` forks there once the profile names a pair of
runs, forked and fresh, whose cells ended alike (`fork_validated_by`, bench/selfbench/fork_parity.py), and until
then `--start forked` asks for it.
"""

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.executors.base import Executor
from bench.executors.local import LocalExecutor
from bench.isolation.deferred_sigint import DeferredSigint
from bench.isolation.fork_server import ForkServer
from bench.matrix.profiles import HardwareProfile
from bench.run.launch import shared_env

CHOICES = ("auto", "forked", "fresh")
PRELOAD = {"cpu": "bench.worker.preload:cpu", "hpu": "bench.worker.preload:hpu"}
"""Per device kind, the preload function (MODULE:FUNCTION); any other kind takes ACCELERATOR_PRELOAD."""
ACCELERATOR_PRELOAD = "bench.worker.preload:accelerator"


def why_fresh(choice: str, executor: Executor, profile: HardwareProfile) -> str | None:
    """Pure: why the cells start fresh under this choice, executor and profile; None: they fork."""
    if choice == "fresh":
        return "--start fresh"
    if not isinstance(executor, LocalExecutor):
        return f"the {executor.name} executor starts each cell where no fork server runs"
    if executor.memory_budget_bytes is not None:
        return "under a per-rank memory budget a forked rank's library pages stay charged to the fork server's cgroup"
    if choice == "auto" and profile.device != "cpu" and profile.fork_validated_by is None:
        return (
            f"forking on {profile.device} is not yet validated for {profile.name} (its profile names no runs that "
            "ended alike forked and fresh: fork_validated_by; --start forked asks for it)"
        )
    return None


@contextlib.contextmanager
def fork_server(
    choice: str, executor: Executor, profile: HardwareProfile, run_env: dict[str, str], log: Path
) -> Iterator[Callable[[], str]]:
    """Start the fork server where the cells fork (it imports while the run prepares); yields `serve`, which waits
    for it, hands it to the executor and returns the line to print. The server ends with the block."""
    why = why_fresh(choice, executor, profile)
    if why is not None or not isinstance(executor, LocalExecutor):
        yield lambda: f"cells start fresh: {why}"
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    preload = PRELOAD.get(profile.device, ACCELERATOR_PRELOAD)
    with contextlib.ExitStack() as stopping:
        with DeferredSigint():  # a stop signal while it starts is delivered once `stopping` holds it
            server = executor.start_fork_server(shared_env(profile, run_env), preload, log)
            stopping.callback(_stop, executor, server)
        yield _serving(executor, server)


def _serving(executor: LocalExecutor, server: ForkServer) -> Callable[[], str]:
    """`serve` for a started server."""

    def serve() -> str:
        """Wait for the server and hand it to the executor; the line to print."""
        if (not_served := server.wait()) is not None:
            return f"notice: cells start fresh: the fork server could not serve ({not_served})"
        executor.fork_server = server
        ready = server.ready or {}
        return (
            f"fork server: the libraries imported once ({ready.get('preload_s', '?')} s); every Python process of a "
            "cell forks from it (--start fresh: an interpreter each)"
        )

    return serve


def _stop(executor: LocalExecutor, server: ForkServer) -> None:
    executor.fork_server = None
    server.stop()
