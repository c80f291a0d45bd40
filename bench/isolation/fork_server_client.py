"""The `python` a cell's processes run while a fork server serves the run (bench/isolation/fork_server_process.py).

Written as the fork server's `bin/python`, with a shebang to the real interpreter run `-IS` (it starts in
milliseconds). Every interpreter start in a cell becomes a request: this process hands the server its command
line, working directory, environment and standard streams, stays in the launcher's process tree while the forked
child runs, forwards the signals a launcher sends, and ends the way the child ended. Where the server cannot serve
the request, the real interpreter runs the command line instead, naming the reason in FRESH_ENV.
Standard library only: this file runs without site-packages. Reference: docs/architecture.md, "The fork server"."""

import contextlib
import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "BENCH_FORK_SERVER_SOCKET"
FRESH_ENV = "BENCH_FRESH_REASON"
"""Set in a program that started fresh although a fork server ran: why."""
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")


def fresh(reason: str) -> None:
    """Run the command line with the real interpreter, in this process."""
    os.environ[FRESH_ENV] = reason
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


def request() -> bytes:
    body = {
        "argv": sys.argv[1:],
        "executable": os.path.abspath(sys.argv[0]),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "pid": os.getpid(),
        "cores": sorted(os.sched_getaffinity(0)),
    }
    return json.dumps(body).encode()


def end_like(message: dict) -> None:
    """End this process as the child ended."""
    sys.stdout.flush()
    sys.stderr.flush()
    if "signal" in message:
        number = int(message["signal"])
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(int(message.get("exit", 1)))


def main() -> None:
    path = os.environ.get(SOCKET_ENV)
    if not path:
        fresh(f"{SOCKET_ENV} is not set")
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError as exc:
        fresh(f"the fork server at {path} is unreachable ({exc.strerror})")
    child: list[int] = []
    pending: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child[0], number)
        else:
            pending.append(number)

    for number in FORWARDED:
        signal.signal(number, forward)
    try:
        served(connection, child, pending, forward)
    except (OSError, ValueError) as exc:  # the server died: a reset connection, a reply cut short
        if not child:
            fresh(f"the fork server at {path} ended before it forked ({exc})")
    if not child:
        fresh(f"the fork server at {path} ended before it forked")
    # the server ended without a word on the child: it died with the server
    end_like({"signal": signal.SIGKILL})


def served(connection: socket.socket, child: list[int], pending: list[int], forward) -> None:
    """Send the request and follow the replies: the child's pid, then how it ended (this process then ends alike).
    Returns when the server closed the connection without saying how the child ended."""
    body = request()
    socket.send_fds(connection, [HEADER.pack(len(body))], [0, 1, 2])
    connection.sendall(body)
    for line in connection.makefile("rb"):
        message = json.loads(line)
        if "refused" in message:
            connection.close()
            fresh(message["refused"])
        if "pid" in message:
            child.append(int(message["pid"]))
            for number in pending:
                forward(number, None)
            continue
        end_like(message)


if __name__ == "__main__":
    main()
