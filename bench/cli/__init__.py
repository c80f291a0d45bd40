"""Command line: `dpo-bench <command>` (also `python -m bench <command>`). Each command group registers its
subcommands here, in this order."""

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from bench.cli import advise, estimate, export, gpu_window, machine, pipeline, report, run, selfbench, trace
from bench.cli.common import INTERRUPTED
from bench.errors import BenchError
from bench.install import missing_training_stack
from bench.isolation.deferred_sigint import STOP_SIGNALS, exit_status, interrupt_on_stop_signals, stopped_by
from bench.paths import RESULTS_DEFAULT, SCENARIOS_ENV, scenarios_dir

GROUPS = (run, gpu_window, machine, pipeline, report, estimate, advise, export, selfbench, trace)
PROG = "dpo-bench"
DESCRIPTION = (
    "Which DPO training setups work on given hardware, how fast, and how much memory they take: `run` trains the "
    "matrix's cells and records them, `advise` and `predict` predict what fits on GPUs you don't have, `matrix`, "
    "`compare` and `publish` report. `dpo-bench COMMAND --help` for each."
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    top.add_argument("--version", action=PrintVersion)
    top.add_argument(
        "--scenarios",
        default=str(scenarios_dir()),
        help=f"scenario folder: every file of it is read from there, by this command and the cells it starts "
        f"(default: ${SCENARIOS_ENV}, else %(default)s)",
    )
    top.add_argument(
        "--results", default=str(RESULTS_DEFAULT), help="results folder (default: ./results of the current folder)"
    )
    sub = top.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return top


class PrintVersion(argparse.Action):
    """`--version`: git is asked only when the flag is given."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and exit")

    def __call__(self, top: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"{PROG} {version_text()}")
        top.exit()


def version_text() -> str:
    """The version and the commit: git's in a checkout, else the one the wheel was built from."""
    from bench.install import VERSION
    from bench.results.env import git_dirty, git_sha

    sha = git_sha()
    commit = f"git {sha[:12]}{' + uncommitted changes' if git_dirty() else ''}" if sha else "git commit unknown"
    return f"{VERSION} ({commit})"


def main(argv: list[str] | None = None) -> int:
    """Run one command. `argv` None means this is the program itself (`python -m bench`): SIGTERM and SIGHUP stop it
    as Ctrl-C does, and after any of them it leaves at once with 128 + the signal's number (130, 143, 129; see
    `exit_now`); called with an argv list it returns the code like any other."""
    if argv is None:
        interrupt_on_stop_signals()
    try:
        args = parser().parse_args(argv)
        args.results = str(Path(args.results).absolute())  # the cells run elsewhere (bench.paths.PROJECT_ROOT)
        check_scenarios(Path(args.scenarios))
        with scenarios_in_use(Path(args.scenarios)):
            code = args.func(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # a base install (no `train` extra) asked to train or build a model's shapes
        if (message := missing_training_stack(exc)) is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    except OSError as exc:  # the file system's own errors, whatever reached them: one line, never a traceback
        from bench.results.store import DISK_FULL_ERRNOS

        what = "disk full: " if exc.errno in DISK_FULL_ERRNOS else ""
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {what}{where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Any other phase: imports, preflight, preparing the workload, writing the report. (A stop during a
        # cell is reported by the runner, and `run` returns INTERRUPTED itself.)
        with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) takes stderr along
            print(f"interrupted{stopped_by(exc)}", file=sys.stderr, flush=True)
        code = INTERRUPTED
    if code == INTERRUPTED and argv is None:
        exit_now(exit_status(code, INTERRUPTED))
    return code


def check_scenarios(folder: Path) -> None:
    if not folder.is_dir():
        raise BenchError(f"--scenarios {folder}: no such folder (it holds hardware/, workloads/ and matrix.yaml)")


@contextmanager
def scenarios_in_use(folder: Path) -> Iterator[None]:
    """`folder` is the scenario folder of every reader (bench.paths.scenarios_dir), in this process and the ones it
    starts, while the command runs."""
    before = os.environ.get(SCENARIOS_ENV)
    os.environ[SCENARIOS_ENV] = str(folder.absolute())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SCENARIOS_ENV, None)
        else:
            os.environ[SCENARIOS_ENV] = before


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's teardown. After a Ctrl-C nothing is left to do (every result line was
    fsync'd when appended, the cell's processes are gone), and tearing down torch, transformers and the rest takes
    0.5 s on an idle 2-core machine and 2-3 s on a busy one (measured), all of it between the Ctrl-C and the prompt."""
    for signum in STOP_SIGNALS:  # a second stop signal cannot cut the flush short with a traceback
        signal.signal(signum, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a terminal that closed (SIGHUP) cannot be written to
            stream.flush()
    os._exit(code)
