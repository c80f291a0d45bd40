"""A run's fork server: one interpreter that imports the cells' libraries once and forks a child for every
Python process of a cell, so that no cell pays the imports (5-8 s per process on 2 cores) again.

    python -m bench.isolation.fork_server_process FOLDER MODULE:FUNCTION [PADDING]

Started by bench/isolation/fork_server.py. It preloads, refuses to serve where forking is unsafe (more than one
thread, CUDA or NVML initialised: bench/isolation/gpu_state.py), writes FOLDER/bin/python (the client) and serves
FOLDER/socket: each request checked (fork_server_rules.py), forked, and answered with the child's pid and how it
ended. The server never runs anything itself: every child starts from the same state. The protocol and its
folder layout: docs/architecture.md, "The fork server"."""

import contextlib
import importlib
import json
import os
import selectors
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.isolation import fork_server_child, fork_server_rules, gpu_state
from bench.isolation.fork_server_client import HEADER

SOCKET = "socket"
CHILDREN = "children"
ENDED = "ended"
CLIENT = "bin/python"
TOKEN_ENV = "BENCH_CELL_TOKEN"
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
"""Set while the libraries import: torch.cuda.is_available() then asks NVML, which does not initialise CUDA."""
REQUEST_LIMIT = 16 << 20
TITLE_ROOM = 4096
"""Bytes of padding on the server's command line: each child writes its program's command line over it."""


def fork_hazards(maps_text: str | None = None) -> list[str]:
    """Why forking this process now would hand children a broken state; empty when it is safe. `maps_text`: this
    process's memory map (default: read now)."""
    hazards = []
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.current_thread())
        hazards.append(f"Python threads run ({names})")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        hazards.append("CUDA was initialised while the libraries imported")
    if gpu_state.libcuda_mapped(maps_text):
        hazards.append("the CUDA driver (libcuda) was loaded while the libraries imported")
    if gpu_state.nvml_initialised():
        hazards.append("NVML is still initialised after the libraries imported")
    return hazards


def resident_file_ranges() -> list[tuple[int, int]]:
    """(address, length) of every run of resident pages in this process's readable file mappings."""
    page = os.sysconf("SC_PAGE_SIZE")
    ranges = []
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[5].startswith("/dev/") or "r" not in parts[1]:
                continue
            if parts[5].rstrip().endswith("(deleted)"):
                continue
            low, high = (int(x, 16) for x in parts[0].split("-"))
            pagemap.seek(low // page * 8)
            entries = pagemap.read((high - low) // page * 8)
            start = None
            for index, (entry,) in enumerate(struct.iter_unpack("<Q", entries)):
                present = entry >> 63
                if present and start is None:
                    start = index
                elif not present and start is not None:
                    ranges.append((low + start * page, (index - start) * page))
                    start = None
            if start is not None:
                ranges.append((low + start * page, (high - low) // page * page - start * page))
    return ranges


def imported_origins() -> dict[str, str]:
    """Top-level module name -> the file it was loaded from, for every top-level module imported so far."""
    found = {}
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if "." not in name and origin:
            found[name] = origin
    return found


def write_client(path: Path) -> None:
    """The cells' `python`: the client's source behind a shebang to this interpreter, run without site (`-IS`)."""
    source = Path(fork_server_child.__file__).with_name("fork_server_client.py").read_text()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable} -IS\n{source}")
    path.chmod(0o755)


@dataclass
class Server:
    folder: Path
    env: dict[str, str]
    """The environment the server started with, which requests are held against."""
    imported_env: dict[str, str]
    """What importing the libraries set in it (torch._inductor: TORCHINDUCTOR_CACHE_DIR): a fresh interpreter's
    imports would set it too, so a child gets it where its request does not set it."""
    path: list[str]
    imported: dict[str, str]
    resident: list[tuple[int, int]]
    listener: socket.socket
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    children: dict[int, tuple[socket.socket, int, Path]] = field(default_factory=dict)
    """pid -> (the client's connection, the child's pidfd, its entry in CHILDREN)."""

    def refusal(self, body: dict) -> fork_server_rules.Program | str:
        """The program the request runs, or why it cannot be forked from here."""
        program = fork_server_rules.program(list(body["argv"]))
        if isinstance(program, str):
            return program
        env, cwd = body["env"], body["cwd"]
        if differences := fork_server_rules.env_differences(self.env, env, self.imported_env):
            shown = ", ".join(differences[:5]) + (" ..." if len(differences) > 5 else "")
            return f"its environment differs from the fork server's in {shown}"
        new = [fork_server_rules.first_entry(program.kind, program.target, cwd)]
        new += fork_server_rules.path_entries(env.get("PYTHONPATH"))
        unseen = [entry for entry in new if entry not in self.path]
        if why := fork_server_rules.shadowing(unseen, self.imported, cwd):
            return why
        return program

    def serve(self, connection: socket.socket) -> None:
        """Answer one request: refuse it, or fork its child."""
        try:
            body, fds = read_request(connection)
        except (OSError, ValueError) as exc:
            print(f"fork server: dropped a request: {exc}", file=sys.stderr, flush=True)
            connection.close()
            return
        decided = self.refusal(body)
        if isinstance(decided, str):
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"refused": decided}).encode() + b"\n")
            for fd in fds:
                os.close(fd)
            connection.close()
            return
        path = fork_server_rules.child_path(
            fork_server_rules.first_entry(decided.kind, decided.target, body["cwd"]),
            fork_server_rules.path_entries(body["env"].get("PYTHONPATH")),
            self.path,
            fork_server_rules.path_entries(self.env.get("PYTHONPATH")),
        )
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            self.listener.close()
            for other, pidfd, _ in self.children.values():
                other.close()
                os.close(pidfd)
            connection.close()
            fork_server_child.become(
                decided,
                int(body["pid"]),
                os.getppid(),
                fds,
                body["cwd"],
                self.imported_env | body["env"],
                path,
                body["executable"],
                self.resident,
                body.get("cores"),
                body["argv"],
            )
        for fd in fds:
            os.close(fd)
        entry = self.folder / CHILDREN / f"{pid}.{body['env'].get(TOKEN_ENV, 'none')}"
        entry.write_text(str(body["pid"]))  # its client, under which `reap` names how it ended
        self.children[pid] = (connection, os.pidfd_open(pid), entry)
        with contextlib.suppress(OSError):
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def reap(self, pid: int) -> None:
        """The child ended: tell its client how, and forget it."""
        connection, pidfd, entry = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        ended = (
            {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"exit": os.waitstatus_to_exitcode(status)}
        )
        with contextlib.suppress(OSError):
            client = entry.read_text()
            (self.folder / ENDED / f"{client}.{entry.name.split('.', 1)[1]}").write_text(json.dumps(ended))
        with contextlib.suppress(OSError):
            connection.sendall(json.dumps(ended).encode() + b"\n")
        connection.close()
        os.close(pidfd)
        entry.unlink(missing_ok=True)

    def loop(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    connection, _ = self.listener.accept()
                    self.serve(connection)
                    for pid, (_, pidfd, _) in self.children.items():
                        if pidfd not in self.selector.get_map():
                            self.selector.register(pidfd, selectors.EVENT_READ, pid)
                else:
                    self.selector.unregister(key.fd)
                    self.reap(key.data)


def preload(spec: str) -> float:
    """Call MODULE:FUNCTION with NVML answering CUDA's availability, then shut NVML down as often as the answers
    initialised it; the seconds it took."""
    module, _, function = spec.partition(":")
    before = os.environ.get(NVML_CHECK_ENV)
    os.environ[NVML_CHECK_ENV] = "1"
    started = time.perf_counter()
    try:
        getattr(importlib.import_module(module), function)()
        gpu_state.shutdown_nvml()
    finally:
        if before is None:
            os.environ.pop(NVML_CHECK_ENV, None)
        else:
            os.environ[NVML_CHECK_ENV] = before
    return time.perf_counter() - started


def read_request(connection: socket.socket) -> tuple[dict, list[int]]:
    """One request off the socket: its JSON body and the client's three standard streams (file descriptors).
    ValueError for a request that is malformed, too large or cut short."""
    header, fds, _, _ = socket.recv_fds(connection, HEADER.size, 3)
    if len(header) < HEADER.size or len(fds) != 3:
        raise ValueError("malformed request")
    (size,) = HEADER.unpack(header)
    if size > REQUEST_LIMIT:
        raise ValueError("request too large")
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ValueError("request cut short")
        data += chunk
    return json.loads(data), fds


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: python -m bench.isolation.fork_server_process FOLDER MODULE:FUNCTION [PADDING]", file=sys.stderr)
        return 2
    folder, spec = Path(argv[1]), argv[2]
    started_env = dict(os.environ)
    seconds = preload(spec)
    if hazards := fork_hazards():
        print(json.dumps({"refused": "; ".join(hazards)}), flush=True)
        return 0
    (folder / CHILDREN).mkdir(parents=True, exist_ok=True)
    (folder / ENDED).mkdir(exist_ok=True)
    write_client(folder / CLIENT)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / SOCKET))
    listener.listen(64)
    resident = resident_file_ranges()
    imported_env = {k: v for k, v in os.environ.items() if started_env.get(k) != v}
    server = Server(folder, started_env, imported_env, list(sys.path), imported_origins(), resident, listener)
    ready = {"ready": True, "pid": os.getpid(), "preload_s": round(seconds, 2), "modules": len(sys.modules)}
    print(json.dumps(ready), flush=True)
    server.loop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
