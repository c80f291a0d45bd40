"""A fork server's child becoming the program a request names (bench/isolation/fork_server_process.py), as a fresh
interpreter would run it: the requester's standard streams, working directory, environment, sys.path and sys.argv;
default signal handlers; the library pages the server had resident mapped again, so that its memory figures start where
a fresh process's would; then the program, and an exit the way the interpreter exits (threads joined, atexit run)."""

import atexit
import contextlib
import ctypes
import io
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from bench.isolation import lifeline
from bench.isolation.fork_server_rules import Program

MADV_POPULATE_READ = 22
"""Linux >= 5.14: map a range's pages as a read fault would, without reading them through Python."""
FORKED = False
"""True in a fork server's child: the program did not start in an interpreter of its own."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def map_resident(ranges: Sequence[tuple[int, int]]) -> None:
    """Map the file-backed pages the server had resident (`ranges`: address, length). A fork copies anonymous
    pages' entries, not those of file mappings (the libraries' code and data, about 150 MiB after the worker's
    imports): without this, a child's RSS would start that much below a fresh process's after the same imports,
    and grow by it as the pages are touched again, counted as the cell's own."""
    for address, length in ranges:
        if _libc.madvise(address, length, MADV_POPULATE_READ) != 0:
            page = os.sysconf("SC_PAGE_SIZE")
            for offset in range(0, length, page):  # older kernels: one read per page
                ctypes.string_at(address + offset, 1)


def retitle(words: Sequence[str]) -> None:
    """Show `words` as this process's command line (/proc/<pid>/cmdline: ps, top, nvidia-smi, and whoever looks
    for a cell's processes by it), written over the server's own, which leaves room for it (bench/isolation/
    fork_server_process.py TITLE_ROOM); a longer one is cut."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end: fields 48 and 49 of stat
    title = "\0".join(words).encode(errors="replace")[: end - start - 1]
    ctypes.memmove(start, title.ljust(end - start, b"\0"), end - start)


def _stream(fd: int, mode: str, unbuffered: bool) -> io.TextIOWrapper:
    """A text stream on `fd` as the interpreter makes sys.stdin/stdout/stderr (-u: unbuffered binary layer)."""
    raw = io.FileIO(fd, mode, closefd=False)
    binary: io.RawIOBase | io.BufferedIOBase = raw
    if mode == "rb":
        binary = io.BufferedReader(raw)
    elif not unbuffered:
        binary = io.BufferedWriter(raw)
    return io.TextIOWrapper(
        binary,  # type: ignore[arg-type]
        encoding=sys.stdout.encoding,
        errors="backslashreplace" if fd == 2 else "strict",
        line_buffering=mode == "wb" and (raw.isatty() or fd == 2),
        write_through=unbuffered,
    )


def take_streams(fds: Sequence[int], unbuffered: bool) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = sys.__stdin__ = _stream(0, "rb", False)
    sys.stdout = sys.__stdout__ = _stream(1, "wb", unbuffered)
    sys.stderr = sys.__stderr__ = _stream(2, "wb", unbuffered)


def default_signals() -> None:
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter starts
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _exit(code: int) -> NoReturn:
    """The interpreter's exit: non-daemon threads joined, atexit handlers run, streams flushed."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run(program: Program) -> NoReturn:
    """Run the program as `python` would, and exit as it does."""
    try:
        if program.kind == "module":
            sys.argv = ["-m", *program.args]
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        elif program.kind == "script":
            sys.argv = [program.target, *program.args]
            runpy.run_path(program.target, run_name="__main__")
        else:
            sys.argv = ["-c", *program.args]
            exec(compile(program.target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        if exc.code is None:
            _exit(0)
        if isinstance(exc.code, int):
            _exit(exc.code)
        print(exc.code, file=sys.stderr)
        _exit(1)
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # the interpreter's own end on an uncaught Ctrl-C
    except BaseException:
        traceback.print_exc()
        _exit(1)
    _exit(0)


def become(
    program: Program,
    requester: int,
    server: int,
    fds: Sequence[int],
    cwd: str,
    env: dict[str, str],
    path: list[str],
    executable: str,
    resident: Sequence[tuple[int, int]],
    cores: Sequence[int] | None = None,
    arguments: Sequence[str] = (),
) -> NoReturn:
    """Turn this freshly forked child into `program` for the process `requester` (the client that stands for it in
    the launcher's tree). Never returns."""
    global FORKED
    FORKED = True
    try:
        os.setsid()  # a session of its own: its group is its, as a launcher's child's would be
        lifeline.die_with_parent(server)
        lifeline.die_with_process(requester)
        if cores:
            os.sched_setaffinity(0, cores)  # the cores the cell is bound to, as a fresh process inherits them
        default_signals()
        take_streams(fds, program.unbuffered)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = path
        sys.executable = executable
        retitle([executable, *arguments])
        sys.dont_write_bytecode = program.dont_write_bytecode or sys.dont_write_bytecode
        map_resident(resident)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    run(program)
