"""What the fork server (bench/isolation/fork_server_process.py) may serve, decided before it forks. Pure.

A forked child starts from the server's state: the modules it imported, with the environment and `sys.path` they
were imported under. It can become a program a fresh interpreter would run only where that state is the one the
fresh interpreter would have built: the same interpreter options, the same environment except variables the
libraries read at run time (a launcher's rank variables, the cell's port and devices), and no path entry that would
import an already-imported module from another file. Anything else is refused, and the program starts fresh.
"""

import importlib.machinery
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PER_PROCESS = frozenset(
    {
        # torch.distributed / torchrun / accelerate / deepspeed ranks: read when the process group forms
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "LOCAL_SIZE",
        "NODE_RANK",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "CROSS_RANK",
        "CROSS_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        # read when CUDA initialises, in the child
        "CUDA_VISIBLE_DEVICES",
        # the worker calls torch.set_num_threads with it (bench/worker/__main__.py), which sets OpenMP's and MKL's
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        # read by torch.cuda.is_available() at each call; deepspeed sets it when it is imported (a launcher's ranks
        # inherit it), the fork server while the libraries import
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        # set up by the child itself (stdio, sys.path)
        "PYTHONUNBUFFERED",
        "PYTHONPATH",
    }
)
"""Variables that may differ between the server and a request: each is read at run time, never at import."""

PER_PROCESS_PREFIXES = (
    "BENCH_",  # the suite's own: the cell's token, the runner, faults (read by the worker at run time)
    "TORCHELASTIC_",  # torchrun's agent
    "TORCH_NCCL_",
    "ACCELERATE_",  # accelerate launch -> Accelerator / PartialState at run time
    "FSDP_",
    "OMPI_",  # mpirun's ranks
    "PMIX_",
    "PRTE_",
    "OPAL_",
)

OPTIONS = {"u": "unbuffered", "B": "dont_write_bytecode"}
"""Interpreter options a child can take on; any other is refused."""


@dataclass(frozen=True)
class Program:
    """What a `python ARGS` command line runs."""

    kind: str
    """`module` (-m), `code` (-c) or `script`."""
    target: str
    """The module name, the code, or the script's path."""
    args: tuple[str, ...]
    """sys.argv[1:]."""
    unbuffered: bool = False
    dont_write_bytecode: bool = False


def program(argv: list[str]) -> Program | str:
    """The program of an interpreter command line without the interpreter (`-u -m bench.worker spec.json`), or why
    a child cannot run it."""
    flags: dict[str, bool] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-") and rest[0] not in ("-", "-m", "-c"):
        option = rest.pop(0)
        if option.startswith(("-m", "-c")):  # `-mbench.worker`: the option's value in the same word
            rest.insert(0, option[2:])
            rest.insert(0, option[:2])
            break
        for letter in option[1:]:
            if letter not in OPTIONS:
                return f"python option -{letter}"
            flags[OPTIONS[letter]] = True
    if not rest:
        return "no program (an interactive interpreter)"
    head = rest.pop(0)
    if head in ("-m", "-c"):
        if not rest:
            return f"python {head} without its argument"
        return Program("module" if head == "-m" else "code", rest[0], tuple(rest[1:]), **flags)
    if head == "-":
        return "a program read from standard input"
    return Program("script", head, tuple(rest), **flags)


def per_process(name: str) -> bool:
    return name in PER_PROCESS or name.startswith(PER_PROCESS_PREFIXES)


def env_differences(
    server: Mapping[str, str], request: Mapping[str, str], imported: Mapping[str, str] | None = None
) -> list[str]:
    """The variables, other than per-process ones, that the request sets otherwise than the server started with (or
    sets when the server did not, or not when it did). `imported`: what the server's imports set (its forked
    launchers pass it on to their ranks): a request may carry those values too."""
    imported = imported or {}
    names = set(server) | set(request)
    return sorted(
        n
        for n in names
        if not per_process(n)
        and server.get(n) != request.get(n)
        and not (n in imported and imported[n] == request.get(n))
    )


def first_entry(kind: str, target: str, cwd: str) -> str:
    """sys.path[0] of a fresh interpreter: the script's folder, else the working directory (-m and -c)."""
    if kind == "script":
        return str(Path(cwd, target).resolve().parent)
    return cwd


def path_entries(pythonpath: str | None) -> list[str]:
    """PYTHONPATH's entries as the interpreter puts them on sys.path (empty ones dropped)."""
    return [entry for entry in (pythonpath or "").split(os.pathsep) if entry]


def shadowing(entries: Iterable[str], imported: Mapping[str, str], cwd: str) -> str | None:
    """Why the child cannot take these new sys.path entries: an entry that holds a top-level module the server
    already imported from another file (a fresh interpreter would import the entry's). `imported`: top-level module
    name -> the file it was loaded from. None when none does."""
    suffixes = importlib.machinery.all_suffixes()
    for entry in entries:
        folder = Path(cwd, entry)
        if not folder.is_dir():
            continue
        for name, origin in imported.items():
            candidates = [folder / name / "__init__.py", *(folder / f"{name}{suffix}" for suffix in suffixes)]
            for candidate in candidates:
                if candidate.is_file() and candidate.resolve() != Path(origin).resolve():
                    return f"{entry} holds {name} ({candidate}), which the fork server imported from {origin}"
    return None


def child_path(first: str, pythonpath: list[str], server_path: list[str], server_pythonpath: list[str]) -> list[str]:
    """The child's sys.path: its own first entry and PYTHONPATH, then the server's path after the server's own
    first entry and PYTHONPATH."""
    rest = [entry for entry in server_path[1:] if entry not in server_pythonpath]
    return [first, *pythonpath, *rest]
