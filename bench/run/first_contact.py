"""`python -m bench first-contact` (`make first-contact`): what one GPU box can do, in one command that ends in
minutes, with everything it measured in one archive.

1. Detect the cards (nvidia-smi) and pick the profile: the shipped one-GPU profile of the card the driver names
   (`1xH100`, `1xH200`), else the GPU catalog's entry as `--gpu NAME:1`.
2. Prepare the workloads' assets and build DeepSpeed's host op (DeepSpeedCPUAdam) side by side, before any timed
   cell.
3. Run, against one deadline (`--minutes`, default 7), each phase a `python -m bench run` of its own:
   - the first coverage pass of the one-GPU matrix (every backend, init mode, quantization, method and launcher
     once) on the 1B real-architecture workload;
   - phi-2's DPO on an emulated 24 GB card (`1xA10 --emulate`): two full models, one bf16 adapter, one nf4 adapter.
     Two full models running out of memory on an A10 is the failure this project started from;
   - the rest of the one-GPU matrix, resuming the first phase's run, for as long as the deadline allows.
4. Write MATRIX.md for each run and one archive of the run folders (records, env.json, configs, logs, MATRIX.md).
"""

import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.gpus import identify
from bench.matrix.profiles import available, load_profile
from bench.paths import PROJECT_ROOT, scenarios_dir

WORKLOAD = "llama-3.2-1b"
"""The 1B real-architecture workload of the one-GPU matrix."""
EMULATED = ("1xA10", "phi-2", ("two_models-none-single", "one_adapter-none-single", "one_adapter-nf4-single"))
"""(profile, workload, cells) of the emulated phase: phi-2's DPO on a 24 GB card."""
CELL_TIMEOUT_S = 240
"""A healthy 1B cell ends in 1-2 min on an H100 (an offload cell's host optimizer included); a hung one in this."""
SETTLE_S = 20.0
"""Kept back from each phase's budget for the run's own start and end (imports, env.json, the table)."""


@dataclass(frozen=True)
class ContactPhase:
    """One `bench run` of first contact: its name and its arguments."""

    name: str
    argv: list[str]


def pick_profile(driver_name: str, scenarios: Path | None = None) -> list[str]:
    """The target arguments of the card the driver names: `--hw <shipped one-GPU profile>` or `--gpu NAME:1`."""
    scenarios = scenarios or scenarios_dir()
    card = identify(driver_name)
    if card is None:
        raise BenchError(
            f"the card {driver_name!r} is not in the GPU catalog (scenarios/gpus.yaml): add its entry, with its "
            "driver_names, to run first-contact on it"
        )
    for name in available(scenarios / "hardware"):
        profile = load_profile(name, scenarios)
        if profile.gpu == card.name and profile.device_count == 1 and profile.processes == 1:
            return ["--hw", name]
    return ["--gpu", f"{card.name}:1"]


def phases(target: list[str], first: list[str], run_id: str, cell_timeout: int) -> list[ContactPhase]:
    """The three phases' `bench run` arguments (the time budget is added as each starts)."""
    common = ["--executor", "local", "--cell-timeout", str(cell_timeout)]
    one_gpu = [*target, "--workload", WORKLOAD, "--method", "all", "--run-id", run_id, *common]
    profile, workload, cells = EMULATED
    emulated = ["--hw", profile, "--emulate", "--workload", workload, "--run-id", run_id, *common]
    return [
        ContactPhase("coverage pass", [*one_gpu, "--filter", ",".join(first)]),
        ContactPhase(f"{workload} on an emulated {profile}", [*emulated, "--filter", ",".join(cells)]),
        ContactPhase("the rest of the one-GPU matrix", one_gpu),
    ]


def run_phases(planned: list[ContactPhase], deadline: float, results: Path, log) -> None:
    """Each phase as `python -m bench run` with the time left as its budget; a phase that fails does not stop the
    next (its cells' records are kept as they end)."""
    for phase in planned:
        left = deadline - time.monotonic() - SETTLE_S
        if left < 60:
            print(f"first-contact: {phase.name}: not started, {max(0.0, left):.0f} s left", file=log, flush=True)
            continue
        argv = [sys.executable, "-m", "bench", "--results", str(results), "run", *phase.argv]
        argv += ["--time-budget", f"{left / 60:.2f}"]
        print(f"first-contact: {phase.name} ({left / 60:.1f} min): {' '.join(argv[1:])}", file=log, flush=True)
        code = stream(argv, log)
        print(f"first-contact: {phase.name} ended with exit code {code}", file=log, flush=True)


def prepare_assets(workloads: list[str], log) -> list[str]:
    """Build every workload's model, tokenizer and data; returns the problems (one line each)."""
    from bench.assets.prepare import prepare
    from bench.matrix.profiles import load_workload

    problems = []
    for name in workloads:
        started = time.monotonic()
        try:
            prepare(load_workload(name))
            print(f"first-contact: assets of {name} ready in {time.monotonic() - started:.0f} s", file=log, flush=True)
        except Exception as exc:  # the runs say it again per cell; the archive must still be written
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
    return problems


def archive(run_dirs: list[Path], extra: list[Path], out_dir: Path, name: str) -> Path:
    """One .tar.gz of the run folders (and their hardware folders' MATRIX.md and matrix.csv) and `extra` files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for run_dir in run_dirs:
            if not run_dir.is_dir():
                continue
            hardware = run_dir.parent
            tar.add(run_dir, arcname=f"{hardware.name}/{run_dir.name}")
            for table in ("MATRIX.md", "matrix.csv"):
                if (hardware / table).is_file():
                    tar.add(hardware / table, arcname=f"{hardware.name}/{run_dir.name}/{table}")
        for file in extra:
            if file.is_file():
                tar.add(file, arcname=file.name)
    return path


def first_contact(minutes: float, out_dir: Path, results: Path, run_id: str) -> Path:
    from bench.executors.local import extensions_dir
    from bench.run.budget import first_pass
    from bench.run.host_ops import start_build
    from bench.run.preflight import driver_gpus

    started = time.monotonic()
    deadline = started + minutes * 60
    found = driver_gpus()
    if found is None or not found.count:
        raise BenchError("first-contact needs an NVIDIA GPU: nvidia-smi lists none here")
    target = pick_profile(found.names[0])
    work = results / "first-contact" / run_id
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "first-contact.log"
    with log_path.open("a", encoding="utf-8") as log:
        tee = Tee(log)
        print(
            f"first-contact: {found.count} x {found.names[0]} (driver {found.driver_version}): {' '.join(target)}",
            file=tee,
            flush=True,
        )
        ops = start_build(sys.executable, extensions_dir(), work / "deepspeed-ops.log")  # beside the assets
        problems = prepare_assets([WORKLOAD, EMULATED[1]], tee)
        for line in problems:
            print(f"first-contact: asset problem: {line}", file=tee, flush=True)
        waited = time.monotonic()
        ops.wait()
        print(
            f"first-contact: DeepSpeed host op built (exit {ops.returncode}; waited {time.monotonic() - waited:.0f} s"
            " after the assets)",
            file=tee,
            flush=True,
        )
        profile, cells = one_gpu_cells(target)
        profile_name = profile.name
        planned = phases(target, [c.id for c in first_pass(cells, step_cost(profile, cells))], run_id, CELL_TIMEOUT_S)
        run_phases(planned, deadline, results, tee)
        run_dirs = [results / profile_name / run_id, results / EMULATED[0] / run_id]
        for hw, run_dir in zip((profile_name, EMULATED[0]), run_dirs, strict=True):
            if (run_dir / "results.jsonl").is_file():
                stream(
                    [
                        sys.executable,
                        "-m",
                        "bench",
                        "--results",
                        str(results),
                        "matrix",
                        "--hw",
                        hw,
                        "--run-id",
                        run_id,
                    ],
                    tee,
                )
        print(f"first-contact: {time.monotonic() - started:.0f} s in all", file=tee, flush=True)
    name = f"first-contact-{profile_name}-{run_id}"
    return archive(run_dirs, [log_path, work / "deepspeed-ops.log"], out_dir, name)


def step_cost(profile, cells: list):
    """A cell's PREDICTED seconds per step on the profile (the speed model), to put cheaper cells first."""
    from bench.estimate.speed.matrix import speeds_of
    from bench.matrix.profiles import load_workload

    speeds = speeds_of(profile, load_workload(WORKLOAD), cells)
    return lambda cell: getattr(speeds.get(cell.id), "s_per_step", None) or float("inf")


def one_gpu_cells(target: list[str]) -> tuple:
    """The profile and the one-GPU matrix's runnable cells of every method."""
    from bench.matrix.profiles import gpu_profile
    from bench.matrix.scenario import expand, load_matrix, not_applicable_reason

    kind, value = target
    profile = load_profile(value) if kind == "--hw" else gpu_profile(value, 1, WORKLOAD)
    cells = [c for c in expand(load_matrix()) if not_applicable_reason(c, profile) is None]
    return profile, cells


class Tee:
    """Writes to the log and to standard output."""

    def __init__(self, log) -> None:
        self.log = log
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            sys.stdout.write(text)
            return self.log.write(text)

    def flush(self) -> None:
        sys.stdout.flush()
        self.log.flush()


def stream(argv: list[str], out) -> int:
    """Run `argv` in the project root, its output line by line to `out`; its exit code."""
    with subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        assert child.stdout is not None
        for line in child.stdout:
            out.write(line)
            out.flush()
    return child.returncode
