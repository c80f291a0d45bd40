"""One `run` of the matrix on this machine once the CLI has parsed it: the machine checked (devices, card, emulation),
the workload's assets prepared, the executor chosen, the environment recorded (env.json), the fork server and the
DeepSpeed host ops made ready, and the cells executed (bench/run/runner.py). What the run printed as its table is
the CLI's (bench/cli/run.py)."""

import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.assets.prepare import PreparedAssets, prepare
from bench.errors import BenchError
from bench.estimate.gate import predictor
from bench.executors import docker_images as images
from bench.executors.base import Executor
from bench.executors.choice import cells_run_in, select_executor
from bench.executors.local import LocalExecutor, extensions_dir
from bench.files import own_folder, without_link
from bench.matrix.cell import Cell
from bench.matrix.known_issues import known_issues
from bench.matrix.packages import PACKAGES
from bench.matrix.plan import Plan, plan_for
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.settings import training_of
from bench.paths import BUILD_DIR
from bench.results.cpu_features import CpuFeatures, detect_cpu_features
from bench.results.env import detect_hardware, environment_fingerprint, write_env
from bench.results.env_schema import EnvFingerprint, HostHardware
from bench.results.layout import FORK_SERVER_LOG, HOST_OPS_LOG
from bench.results.schema import ResultRecord
from bench.run.budget import TimeBudget
from bench.run.fork_server_mode import fork_server
from bench.run.memory_slots import SPEED_CELLS, SharedDevice, SlotRequest, shared_device
from bench.run.one_cell import RunContext, absent_assets
from bench.run.preflight import Preflight, preflight, shm_check
from bench.run.runner import execute
from bench.run.slots import VISIBLE_ENV

SlurmFactory = Callable[[HardwareProfile, Path], Executor]
"""Builds the Slurm executor of a run from the options the CLI parsed (bench/executors/slurm/options.py)."""


@dataclass(frozen=True)
class RunRequest:
    """What `run` was asked, parsed."""

    run_id: str
    run_dir: Path
    profile: HardwareProfile
    workload: Workload
    cells: list[Cell]
    executor: str
    """auto, docker, local or slurm."""
    started: float
    """time.monotonic() at the command's start: a time budget counts from it."""
    slurm: SlurmFactory | None = None
    emulate: bool = False
    start: str = "auto"
    force: bool = False
    repeats: int = 1
    time_budget_min: float | None = None
    exclusive: bool = False
    run_predicted_oom: bool = False
    gpu_slots: int | None = None
    """--gpu-slots: the device's memory cut into this many slots; None: automatic (bench/run/memory_slots.py)."""
    speed_cells: int = SPEED_CELLS
    """--speed-pass: cells of the exclusive speed pass after cells ran in slots."""
    slot_priority: int = 0
    """--slot-priority: the run's place among the runs sharing the device's slots (lower first)."""
    alone: bool = False
    """--alone: each cell takes every slot of the shared device."""
    report_to: tuple[str, ...] = ("none",)
    """--report-to: the experiment trackers the cells' trainers report to."""


@dataclass(frozen=True)
class Prepared:
    """What a run has before its fork server starts: the machine as the cells see it, the assets, each cell's plan
    and the executor."""

    machine: Preflight
    assets: PreparedAssets
    plans: dict[str, Plan]
    executor: Executor


def run_session(request: RunRequest) -> list[ResultRecord]:
    """Run the request's cells; the records of this session. KeyboardInterrupt passes through once the runner has
    stopped the running cell and said how to resume, or, before the first cell, once a line has said so."""
    preparing = True
    try:
        ready = prepared(request)
        machine = ready.machine
        choice = "fresh" if machine.untested_reason else request.start
        log = request.run_dir / FORK_SERVER_LOG
        log = without_link(own_folder(log.parent, request.run_dir) / log.name)
        with fork_server(choice, ready.executor, request.profile, machine.launch_env, log) as serve:
            # while the fork server imports: the CPU probe (or its kept answer) and torch for the microbenchmarks,
            # which run once the server is idle
            cpu = detect_cpu_features()
            import torch  # noqa: F401

            if isinstance(ready.executor, LocalExecutor) and not machine.untested_reason:
                host_ops_ready(ready.executor.python, ready.plans, request)
            if line := serve():
                print(line, flush=True)
            ctx = run_context(request, ready, detect_hardware(), cpu)
            budget = None
            if request.time_budget_min is not None:
                budget = time_budget(request.time_budget_min * 60, ctx, request.cells, request.started)
            preparing = False
            return execute(
                ctx,
                request.cells,
                request.force,
                request.repeats,
                budget=budget,
                exclusive=request.exclusive,
                slots=None if machine.untested_reason else device_slots(request, machine, ctx.executor),
                speed_cells=request.speed_cells,
            )
    except KeyboardInterrupt:
        if preparing:
            print("interrupted while preparing the run: no cell ran", file=sys.stderr, flush=True)
        raise


def prepared(request: RunRequest) -> Prepared:
    """The machine checked, the assets prepared and the executor chosen."""
    known_issues()  # a malformed known_issues.yaml stops here, not at the first failing cell
    profile = request.profile
    if profile.nodes > 1 and request.executor != "slurm":
        raise BenchError(f"profile {profile.name} spans {profile.nodes} nodes: use --executor slurm (docs/slurm.md)")
    if request.executor == "slurm":  # before anything is prepared: one line when this machine cannot submit jobs
        from bench.executors.slurm.jobs import require_commands

        require_commands()
    # the cells of a Slurm run go to the cluster's nodes: this machine (the submit host) needs none of the devices
    where = cells_run_in(request.executor, profile)
    machine = checked_machine(request, where)
    if machine.untested_reason:
        print(f"notice: {machine.untested_reason}; every cell is recorded `untested`", flush=True)
        assets = PreparedAssets(model="", tokenizer="", dataset="")
    else:
        print(f"preparing workload {request.workload.name} (model, tokenizer, dataset) ...", flush=True)
        assets = present_assets(request.workload, prepare(request.workload))
    plans = {c.id: plan_for(c, profile, request.workload) for c in request.cells}
    executor, machine = chosen_executor(request, machine, where, assets, plans.values())
    return Prepared(machine, assets, plans, executor)


def run_context(request: RunRequest, ready: Prepared, host: HostHardware, cpu: CpuFeatures) -> RunContext:
    """The run's context, once env.json is written with the host's measured hardware and CPU features."""
    profile, machine = request.profile, ready.machine
    env = recorded_environment(request, ready.executor, host, cpu)
    return RunContext(
        request.run_id,
        request.run_dir,
        profile,
        request.workload,
        ready.assets,
        ready.executor,
        machine.launch_env,
        machine.emulated_from,
        untested=machine.untested_reason,
        versions=env.packages,
        predict=predictor(machine.memory_profile(profile), request.workload, env.cpu_features),
        run_predicted_oom=request.run_predicted_oom,
        peak_tflops=machine.peak_tflops(profile),
        report_to=request.report_to,
        plans=ready.plans,
    )


def present_assets(workload: Workload, assets: PreparedAssets, build_dir: Path = BUILD_DIR) -> PreparedAssets:
    """The prepared assets, every folder of them there: what was prepared here (under `build_dir`) and has gone since
    (moved or deleted) is prepared again, once; BenchError, in one line, for a folder that is not the suite's to
    make (a local checkpoint) or that preparing again does not bring back."""
    gone = absent_assets(assets)
    if not gone:
        return assets
    built = build_dir.resolve() / "assets"
    what, path = gone[0]
    if all(Path(p).resolve().is_relative_to(built) for _, p in gone):
        for folder in {built / Path(p).resolve().relative_to(built).parts[0] for _, p in gone}:
            print(f"notice: the prepared {what} {path} is gone (moved or deleted): preparing again", flush=True)
            shutil.rmtree(folder)
        assets = prepare(workload, build_dir)
        if not (gone := absent_assets(assets)):
            return assets
        what, path = gone[0]
    raise BenchError(
        f"workload {workload.name}: its {what} {path} is gone (moved or deleted after it was prepared); put it back, "
        "or point the workload at where it is now"
    )


def device_slots(request: RunRequest, machine: Preflight, executor: Executor) -> SharedDevice | None:
    """The device the cells share in slots (--gpu-slots, or automatically on a big card), None: they do not."""
    slot_request = SlotRequest(
        slots=request.gpu_slots,
        exclusive=request.exclusive,
        local=isinstance(executor, LocalExecutor),
        emulated=machine.emulated_from is not None,
        device_bytes=machine.device_memory_bytes,
        gpu=machine.launch_env.get(VISIBLE_ENV),
        priority=request.slot_priority,
        alone=request.alone,
    )
    return shared_device(request.profile, slot_request)


def checked_machine(request: RunRequest, where: str | None) -> Preflight:
    """The devices the cells will see (none to check for a Slurm run), with a line on the card and any emulation."""
    profile = request.profile
    machine = Preflight() if where is None else preflight(profile, request.emulate, where=where)
    if machine.emulated_from:
        print(
            f"emulating {profile.card} ({profile.memory_per_device_gb:g} GB per device) on {machine.emulated_from}: "
            "memory answers hold for the profile, speed is the real GPU's (docs/hardware.md)",
            flush=True,
        )
    if machine.card is not None:
        peak = machine.peak_tflops(profile)
        against = f"{peak:g} TFLOP/s {profile.precision}" if peak else f"no published {profile.precision} peak: no MFU"
        print(f"card: the GPU catalog's {machine.card.name} (MFU against {against})", flush=True)
    elif profile.device != "cpu" and where is not None:
        print(
            f"notice: the card is not in the GPU catalog (scenarios/gpus.yaml): MFU against {profile.name}'s peak "
            f"({profile.peak_tflops} TFLOP/s), not the card's",
            flush=True,
        )
    return machine


def chosen_executor(
    request: RunRequest, machine: Preflight, where: str | None, assets: PreparedAssets, plans: Iterable[Plan]
) -> tuple[Executor, Preflight]:
    """The run's executor, and the machine as the cells will see it: where `auto` fell back from an image to this
    venv, its own torch must see the devices (checked again), and where cells run on this machine, /dev/shm must take
    the DeepSpeed buffers of those of the `plans` that make one."""
    if request.executor == "slurm" and not machine.untested_reason:
        if request.slurm is None:
            raise ValueError("a Slurm run needs the executor's options")
        return request.slurm(request.profile, request.run_dir), machine
    kind = "local" if machine.untested_reason else request.executor
    executor = select_executor(kind, request.profile, request.run_dir, assets)
    if executor.name == "local" and not machine.untested_reason:
        if where == "image":
            machine = preflight(request.profile, request.emulate, where="local")
        if (refusal := shm_check(plans)) is not None:
            raise refusal
    return executor, machine


def recorded_environment(
    request: RunRequest, executor: Executor, host: HostHardware, cpu: CpuFeatures
) -> EnvFingerprint:
    """The run's env.json, written: this interpreter's versions, or the image's where the cells run in one."""
    flavor = request.profile.image_flavor
    env = environment_fingerprint(
        request.profile.name,
        request.workload.name,
        executor.name,
        images.lock_file(flavor),
        executor.image,
        training_of(request.profile, request.workload),
        host,
        cpu,
    )
    if executor.name == "docker":
        inside = images.image_report(executor.image, PACKAGES)
        env = env.merged(inside | {"image_tag": images.image_tag(flavor)})
    write_env(request.run_dir, env)
    return env


def host_ops_ready(python: str, plans: dict[str, Plan], request: RunRequest) -> None:
    """DeepSpeed's CPU ops built (for the cells' interpreter `python`) before the first cell that needs them, not
    inside its timed run."""
    from bench.run.host_ops import ensure_built, needs_host_ops

    if needs_host_ops(c for c in request.cells if plans[c.id].not_applicable is None):
        print(ensure_built(python, extensions_dir(), without_link(request.run_dir / HOST_OPS_LOG)), flush=True)


def time_budget(seconds: float, ctx: RunContext, cells: list[Cell], started: float) -> TimeBudget:
    """The run's TimeBudget: the speed model's slow end per step for each cell's plan (bench/estimate/speed)."""
    from bench.estimate.speed.cell_speeds import model_speeds

    speeds = model_speeds([ctx.plan(c) for c in cells])

    def step_seconds(cell: Cell) -> float | None:
        speed = speeds.get(cell.id)
        return speed.s_per_step_high if speed is not None else None

    profile = ctx.profile
    return TimeBudget(
        seconds, ctx.workload.train.steps, step_seconds, profile.start_up_s, started, cell_timeout_s=profile.timeout_s
    )
