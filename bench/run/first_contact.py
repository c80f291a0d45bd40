"""`python -m bench first-contact` (`make first-contact`): what one GPU box can do, in one command that ends in
minutes, with everything it measured in one archive.

1. Detect the cards (nvidia-smi) and pick the profile: the shipped one-GPU profile of the card the driver names
   (`1xH100`, `1xH200`), else the GPU catalog's entry as `--gpu NAME:1`.
2. Build DeepSpeed's host op (DeepSpeedCPUAdam) before any timed cell, and prepare the workloads' assets in the
   background (bench/assets/prepare_all.py: the 1B workload first, the others side by side once it is ready; random
   weights generated on the GPU; text assets unpacked from `make carry-assets`'s folder when it holds them). The
   preparation is registered as a runner of the machine (bench/run/runners.py): a cell measured while it runs is
   marked `overlapped_by`.
3. Run, against one deadline (`--minutes`, default 7), each phase a `python -m bench run` of its own, each started
   once its workload's assets are ready:
   - the first coverage pass of the one-GPU matrix (every backend, init mode, quantization, method and launcher
     once) on the 1B real-architecture workload;
   - phi-2's DPO on an emulated 24 GB card (`1xA10 --emulate`): two full models, one bf16 adapter, one nf4 adapter.
     Two full models running out of memory on an A10 is the failure this project started from;
   - the 7B workload's cells (SEVEN_B: LoRA, QLoRA, full fine-tunes with and without ZeRO-3 offload), in a run of
     their own;
   - the rest of the one-GPU matrix, resuming the first phase's run, for as long as the deadline allows.
4. Write MATRIX.md for each run and one archive of the run folders (records, env.json, configs, logs, MATRIX.md).
"""

import contextlib
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, wait
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
SEVEN_B = (
    "mistral-7b",
    (
        "one_adapter-none-single",
        "one_adapter-int8-single",
        "one_adapter-nf4-single",
        "two_adapters-nf4-single",
        "two_models-none-single",
        "two_models-none-zero3_offload",
    ),
)
"""(workload, cells) of the 7B phase, on the card's one-GPU profile: DPO of Mistral-7B's architecture (the base of
Zephyr-7B, DPO's best-known recipe) at 2,048 tokens, batch 1, 8 steps. LoRA in bf16 and over int8, QLoRA with the
reference as the disabled adapter and as a second adapter, the full fine-tune on the GPU, and the full fine-tune
with ZeRO-3's optimizer offload. PREDICTED on 1xH200 (`python -m bench predict --hw 1xH200 --workload mistral-7b`):
GPU 7.9-17.9 GB for the adapters, 76.3 GB for the full fine-tune (likely_fits on an 80 GB H100: 50 %), 35.1 GB plus
115.9 GB of host memory for the offload one: the offload full fine-tune that leaves room on a 128 GiB host (ZeRO-2
offload 130.6 GB, FSDP offload 130.4 GB, ZeRO-3 with parameter offload 144.8 GB; Llama-3.1-8B's ZeRO-3 offload
128.5 GB, Qwen2.5-7B's 121.8 GB). Its 8 steps take 2-3.5
minutes (PREDICTED 17-25 s a step, the host's Adam over 7.2B parameters), the others' under 11 s."""
WINDOW_WORKLOADS = (WORKLOAD, EMULATED[1], SEVEN_B[0])
"""The workloads of the window, in the order its phases need them (and what `carry-assets` carries by default)."""
CELL_TIMEOUT_S = 240
"""A healthy 1B cell ends in 1-2 min on an H100 (an offload cell's host optimizer included); a hung one in this."""
SEVEN_B_CELL_TIMEOUT_S = 600
"""A 7B cell loads 14.5-29 GB before its steps; the offload one then takes 8 steps of the host's Adam (PREDICTED
17-25 s each)."""
SETTLE_S = 20.0
"""Kept back from each phase's budget for the run's own start and end (imports, env.json, the table)."""


@dataclass(frozen=True)
class ContactPhase:
    """One `bench run` of first contact: its name, the workload whose assets it waits for, and its arguments."""

    name: str
    workload: str
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
    """The four phases' `bench run` arguments (the time budget is added as each starts)."""

    def common(timeout: int) -> list[str]:
        return ["--executor", "local", "--cell-timeout", str(timeout)]

    one_gpu = [*target, "--workload", WORKLOAD, "--method", "all", "--run-id", run_id, *common(cell_timeout)]
    profile, workload, cells = EMULATED
    emulated = ["--hw", profile, "--emulate", "--workload", workload, "--run-id", run_id, *common(cell_timeout)]
    seven_b, seven_b_cells = SEVEN_B
    large = [*target, "--workload", seven_b, "--run-id", seven_b_run(run_id)]
    large += [*common(max(cell_timeout, SEVEN_B_CELL_TIMEOUT_S)), "--filter", ",".join(seven_b_cells)]
    return [
        ContactPhase("coverage pass", WORKLOAD, [*one_gpu, "--filter", ",".join(first)]),
        ContactPhase(f"{workload} on an emulated {profile}", workload, [*emulated, "--filter", ",".join(cells)]),
        ContactPhase(f"{seven_b}'s cells", seven_b, large),
        ContactPhase("the rest of the one-GPU matrix", WORKLOAD, one_gpu),
    ]


def seven_b_run(run_id: str) -> str:
    """The 7B phase's run id: a run holds one workload's cells."""
    return f"{run_id}-{SEVEN_B[0]}"


def assets_ready(phase: ContactPhase, ready: Mapping[str, Future], deadline: float, log) -> bool:
    """Wait (until `deadline`, monotonic) for the phase's workload's assets; False, with a line, when they are not
    there in time or their preparation failed."""
    future = ready.get(phase.workload)
    if future is None:
        return True
    started = time.monotonic()
    done, _ = wait([future], timeout=max(0.0, deadline - started))
    if not done:
        print(f"first-contact: {phase.name}: not started, the assets of {phase.workload} are not ready", file=log)
        return False
    if future.exception() is not None:
        print(f"first-contact: {phase.name}: not started: {future.exception()}", file=log, flush=True)
        return False
    if (waited := time.monotonic() - started) >= 1:
        print(f"first-contact: {phase.name} waited {waited:.0f} s for the assets of {phase.workload}", file=log)
    return True


def run_phases(
    planned: list[ContactPhase], deadline: float, results: Path, log, ready: Mapping[str, Future] | None = None
) -> None:
    """Each phase as `python -m bench run` with the time left as its budget, once its workload's assets in `ready`
    (name -> future) are; a phase that fails does not stop the next (its cells' records are kept as they end)."""
    for phase in planned:
        if not assets_ready(phase, ready or {}, deadline - SETTLE_S - 60, log):
            continue
        left = deadline - time.monotonic() - SETTLE_S
        if left < 60:
            print(f"first-contact: {phase.name}: not started, {max(0.0, left):.0f} s left", file=log, flush=True)
            continue
        argv = [sys.executable, "-m", "bench", "--results", str(results), "run", *phase.argv]
        argv += ["--time-budget", f"{left / 60:.2f}"]
        print(f"first-contact: {phase.name} ({left / 60:.1f} min): {' '.join(argv[1:])}", file=log, flush=True)
        code = stream(argv, log)
        print(f"first-contact: {phase.name} ended with exit code {code}", file=log, flush=True)


def start_assets(workloads: list[str], run_id: str, work: Path, log) -> dict[str, Future]:
    """Prepare the workloads in the background, random weights on the GPU (bench/assets/prepare_all.py), registered
    as a runner of this machine until the last is ready; name -> its assets' future."""
    from bench.assets.prepare_all import prepare_all
    from bench.matrix.profiles import load_workload
    from bench.run.runners import registered

    started = time.monotonic()
    registration = contextlib.ExitStack()
    registration.enter_context(registered(f"{run_id}-assets", work))

    def note(line: str) -> None:
        print(f"first-contact: [{time.monotonic() - started:5.0f} s] {line}", file=log, flush=True)

    ready = prepare_all([load_workload(name) for name in workloads], device="cuda", note=note)

    def unregister() -> None:
        wait(list(ready.values()))
        registration.close()

    threading.Thread(target=unregister, name="assets-registration", daemon=True).start()
    return ready


def archive(run_dirs: list[Path], extra: list[Path], out_dir: Path, name: str) -> Path:
    """One .tar.gz of the run folders (with their hardware folders' MATRIX.md and matrix.csv where the run folder
    has no copy of its own) and `extra` files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for run_dir in run_dirs:
            if not run_dir.is_dir():
                continue
            hardware = run_dir.parent
            tar.add(run_dir, arcname=f"{hardware.name}/{run_dir.name}")
            for table in ("MATRIX.md", "matrix.csv"):
                if (hardware / table).is_file() and not (run_dir / table).is_file():
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
        ready = start_assets(list(WINDOW_WORKLOADS), run_id, work, tee)
        waited = time.monotonic()
        ops.wait()
        print(
            f"first-contact: DeepSpeed host op built (exit {ops.returncode}; {time.monotonic() - started:.0f} s in, "
            f"waited {time.monotonic() - waited:.0f} s for it)",
            file=tee,
            flush=True,
        )
        profile, cells = one_gpu_cells(target)
        profile_name = profile.name
        planned = phases(target, [c.id for c in first_pass(cells, step_cost(profile, cells))], run_id, CELL_TIMEOUT_S)
        run_phases(planned, deadline, results, tee, ready)
        runs = [(profile_name, run_id), (EMULATED[0], run_id), (profile_name, seven_b_run(run_id))]
        for hw, run in runs:
            write_tables(results, hw, run, tee)
        print(f"first-contact: {time.monotonic() - started:.0f} s in all", file=tee, flush=True)
    run_dirs = [results / hw / run for hw, run in runs]
    name = f"first-contact-{profile_name}-{run_id}"
    return archive(run_dirs, [log_path, work / "deepspeed-ops.log"], out_dir, name)


def write_tables(results: Path, hw: str, run_id: str, log) -> None:
    """MATRIX.md and matrix.csv of one run, copied into its folder: two runs of one profile share the profile's."""
    run_dir = results / hw / run_id
    if not (run_dir / "results.jsonl").is_file():
        return
    stream([sys.executable, "-m", "bench", "--results", str(results), "matrix", "--hw", hw, "--run-id", run_id], log)
    for table in ("MATRIX.md", "matrix.csv"):
        if (run_dir.parent / table).is_file():
            shutil.copyfile(run_dir.parent / table, run_dir / table)


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
