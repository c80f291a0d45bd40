"""`python -m bench window` (`make gpu-window`): what a GPU lent for minutes can measure, in one command that writes
everything under one folder as it finishes.

It picks the card's one-GPU profile and its phases in priority order (window_spec.py), prints and writes the plan
with the cells PREDICTED to end in the window (window_plan.py, window_forecast.py), prepares DeepSpeed's host op and
the workloads' assets in the background (assets/prepare_all.py), then starts each phase's `bench run` once its
assets are ready, all against one deadline, sharing the card's slots through its ledger by priority (cells that need
the card alone take every slot). Records land under OUT/results/ as cells end; each run's MATRIX.md and
OUT/summary.json say what each phase ran against the plan. On a budgeted CPU profile the same phases rehearse with
small workloads."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.files import write_whole
from bench.matrix.gpus import identify
from bench.matrix.profiles import HardwareProfile, available, load_profile
from bench.paths import PROJECT_ROOT, scenarios_dir
from bench.run.window_spec import (
    WindowContent,
    WindowPhase,
    card_content,
    rehearsal_content,
    spread_over_quantizations,
)
from bench.units import GiB

SETTLE_S = 20.0
"""Kept back from each run's budget for its own end (the table, the budget file) and the window's (MATRIX.md)."""
LEAST_S = 30.0
"""A phase is not started with less than this left: no cell would fit."""
PLAN_FILE, SUMMARY_FILE, LOG_FILE = "plan.json", "summary.json", "window.log"
HOST_OPS = "DeepSpeed's host op"
"""The build's future among the workloads' (prepare): a phase with a DeepSpeed cell waits for it too."""


def pick_profile(driver_name: str, scenarios: Path | None = None) -> list[str]:
    """The target arguments of the card the driver names: `--hw <shipped one-GPU profile>` or `--gpu NAME:1`."""
    scenarios = scenarios or scenarios_dir()
    card = identify(driver_name)
    if card is None:
        raise BenchError(
            f"the card {driver_name!r} is not in the GPU catalog (scenarios/gpus.yaml): add its entry, with its "
            "driver_names, to run the window on it"
        )
    for name in available(scenarios / "hardware"):
        profile = load_profile(name, scenarios)
        if profile.gpu == card.name and profile.device_count == 1 and profile.processes == 1:
            return ["--hw", name]
    return ["--gpu", f"{card.name}:1"]


@dataclass(frozen=True)
class Machine:
    """What the window runs on: the card's profile and target (or the CPU profile it rehearses on), its device's
    memory as the driver reports it, and the phases' content."""

    profile: HardwareProfile
    content: WindowContent
    device_bytes: int | None
    note: str


def machine(hw: str | None) -> Machine:
    """The card nvidia-smi lists (or `hw`: a one-GPU profile to plan for, a CPU profile to rehearse on)."""
    from bench.matrix.profiles import gpu_profile
    from bench.run.preflight import driver_gpus
    from bench.run.window_spec import WORKLOAD

    found = driver_gpus()
    if hw is not None:
        profile = load_profile(hw)
        if profile.device == "cpu":
            return Machine(profile, rehearsal_content(profile), None, f"rehearsal on {profile.name}")
        target = ["--hw", hw]
    elif found is None or not found.count:
        raise BenchError("the window needs an NVIDIA GPU: nvidia-smi lists none here (--hw cpu-budget rehearses it)")
    else:
        target = pick_profile(found.names[0])
    kind, value = target
    profile = load_profile(value) if kind == "--hw" else gpu_profile(value, 1, WORKLOAD)
    if found is not None and found.count:
        note = f"{found.count} x {found.names[0]} (driver {found.driver_version}): {' '.join(target)}"
        return Machine(profile, card_content(tuple(target), profile), found.memory_bytes[0], note)
    catalog = int((profile.memory_per_device_gb or 0) * 1e9) or None
    return Machine(profile, card_content(tuple(target), profile), catalog, f"plan for {profile.name}, no GPU here")


def shared(found: Machine):
    """The device the window's runs share in slots (bench/run/memory_slots.py), as every run computes it."""
    from bench.run.memory_slots import SharedDevice, SlotRequest, shared_device

    request = SlotRequest(found.content.slots, False, True, False, found.device_bytes, "0")
    device = shared_device(found.profile, request)
    if device is None:
        raise BenchError(f"{found.profile.name}: its device cannot be shared in slots, which the window runs in")
    assert isinstance(device, SharedDevice)
    return device


def plan_json(found: Machine, phases: list[WindowPhase], seconds: float) -> dict:
    """plan.json's content (bench/run/window_forecast.py)."""
    from bench.run.window_forecast import Inputs, forecast, start_ups

    kind = "cpu" if found.profile.device == "cpu" else "cuda"
    card = found.profile.name
    inputs = Inputs(found.profile, shared(found), kind, tuple(start_ups(card)))
    return forecast(phases, inputs, seconds)


def plan_lines(planned: dict) -> list[str]:
    """The plan as it is printed first."""
    totals = planned["predicted_total"]
    lines = [
        f"window: {planned['profile']}, {planned['seconds'] / 60:.1f} min, {planned['slots']} slots of "
        f"{planned['device_bytes'] / planned['slots'] / GiB:.1f} GiB; PREDICTED {totals['slow']}-{totals['fast']} "
        f"cells (slow end - fast end: start-up {planned['start_up_s']['max']}-{planned['start_up_s']['median']} s)"
    ]
    for row in planned["phases"]:
        ends = row["predicted_cells"]
        lines.append(
            f"  {row['priority']} {row['name']:<24} {len(row['cells']):>4} cells  PREDICTED to end: "
            f"{ends['slow']}-{ends['fast']}   ({row['profile']} {row['workload']}, run {row['run_id']})"
        )
    return lines


def window(
    minutes: float,
    out: Path,
    run_id: str,
    hw: str | None = None,
    plan_only: bool = False,
    slots: int | None = None,
    bundle: Path | None = None,
) -> dict | None:
    """Plan, then run the window's phases under `out`; the summary (None with `plan_only`). `slots`: the device's,
    where not the card's automatic count (or the rehearsal's). `bundle`: a folder kept holding the window's folder
    packed into a few flat files as it changes (window_bundle.py)."""
    from dataclasses import replace

    from bench.run.window_bundle import check_folders, kept

    if bundle is not None:
        check_folders(out, bundle)
    started = time.monotonic()
    deadline = started + minutes * 60
    found = machine(hw)
    if slots is not None:
        found = replace(found, content=replace(found.content, slots=slots))
    phases = window_phases_of(found, run_id)
    planned = plan_json(found, phases, minutes * 60)
    print(f"window: {found.note}", flush=True)
    print("\n".join(plan_lines(planned)), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_whole(out / PLAN_FILE, json.dumps(planned, indent=2))
    if plan_only:
        return None
    results = out / "results"
    with (out / LOG_FILE).open("a", encoding="utf-8") as log:
        tee = Tee(log)
        print(f"window: {found.note}; plan in {out / PLAN_FILE}", file=tee, flush=True)
        with kept(out, bundle, run_id, tee) if bundle is not None else contextlib.nullcontext():
            ready = prepare(found, phases, run_id, out, tee)
            run_phases(phases, found, deadline, results, tee, ready, planned)
            for profile, run in sorted({(p.profile, p.run_id) for p in phases}):
                write_tables(results, profile, run)
            summary = summarize(phases, planned, results, time.monotonic() - started)
            write_whole(out / SUMMARY_FILE, json.dumps(summary, indent=2))
            for line in summary_lines(summary):
                print(line, file=tee, flush=True)
    return summary


def window_phases_of(found: Machine, run_id: str) -> list[WindowPhase]:
    from bench.run.window_spec import window_phases

    return window_phases(found.content, run_id)


def prepare(found: Machine, phases: list[WindowPhase], run_id: str, out: Path, log) -> dict[str, Future]:
    """DeepSpeed's host op built and the workloads' assets prepared in the background; name -> its future (HOST_OPS:
    the build's)."""
    from bench.executors.local import extensions_dir
    from bench.run.host_ops import start_build

    started = time.monotonic()
    ops = start_build(sys.executable, extensions_dir(), out / "deepspeed-ops.log")
    workloads = list(dict.fromkeys([p.workload for p in phases]))
    device = "cpu" if found.profile.device == "cpu" else "cuda"
    ready = start_assets(workloads, run_id, out, log, device)
    built: Future = Future()

    def wait_for_build() -> None:
        code = ops.wait()
        print(f"window: DeepSpeed host op built (exit {code}; {time.monotonic() - started:.0f} s)", file=log,
              flush=True)  # fmt: skip
        built.set_result(code)

    threading.Thread(target=wait_for_build, name="host-ops", daemon=True).start()
    return ready | {HOST_OPS: built}


def needs_ops(phase: WindowPhase) -> bool:
    """Whether a cell of the phase runs DeepSpeed (its host op is built before it starts, not inside its time)."""
    from bench.matrix.scenario import expand, load_matrix
    from bench.run.host_ops import needs_host_ops

    return needs_host_ops(c for c in expand(load_matrix()) if c.id in set(phase.cells))


def start_assets(workloads: list[str], run_id: str, work: Path, log, device: str = "cuda") -> dict[str, Future]:
    """Prepare the workloads in the background, random weights on `device` (bench/assets/prepare_all.py),
    registered as a runner of this machine until the last is ready; name -> its assets' future."""
    from bench.assets.prepare_all import prepare_all
    from bench.matrix.profiles import load_workload
    from bench.run.runner_registry import registered

    started = time.monotonic()
    registration = contextlib.ExitStack()
    registration.enter_context(registered(f"{run_id}-assets", work))

    def note(line: str) -> None:
        if line.strip():
            print(f"window: [{time.monotonic() - started:5.0f} s] {line}", file=log, flush=True)

    ready = prepare_all([load_workload(name) for name in workloads], device=device, note=note)

    def unregister() -> None:
        wait(list(ready.values()))
        registration.close()

    threading.Thread(target=unregister, name="assets-registration", daemon=True).start()
    return ready


def assets_ready(phase: WindowPhase, ready: Mapping[str, Future], deadline: float, log) -> bool:
    """Wait (until `deadline`, monotonic) for the phase's workload's assets (and DeepSpeed's host op, where a cell of
    it needs one); False, with a line, when they are not there in time or their preparation failed."""
    if HOST_OPS in ready and needs_ops(phase):
        wait([ready[HOST_OPS]], timeout=max(0.0, deadline - time.monotonic()))
    future = ready.get(phase.workload)
    if future is None:
        return True
    started = time.monotonic()
    done, _ = wait([future], timeout=max(0.0, deadline - started))
    if not done:
        print(f"window: {phase.name}: not started, the assets of {phase.workload} are not ready", file=log, flush=True)
        return False
    if future.exception() is not None:
        print(f"window: {phase.name}: not started: {future.exception()}", file=log, flush=True)
        return False
    if (waited := time.monotonic() - started) >= 1:
        print(f"window: {phase.name} waited {waited:.0f} s for the assets of {phase.workload}", file=log, flush=True)
    return True


def run_phases(
    phases: list[WindowPhase], found: Machine, deadline: float, results: Path, log, ready: Mapping[str, Future],
    planned: dict,
) -> None:  # fmt: skip
    """Every phase in a thread of its own, each a `bench run` once it may start; returns when all have ended."""
    ended = {p.name: threading.Event() for p in phases}
    order = {row["name"]: row["cells"] for row in planned["phases"]}
    threads = [
        threading.Thread(
            target=run_phase, args=(p, found, deadline, results, log, ready, ended, order), name=f"phase-{p.name}"
        )
        for p in phases
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_phase(
    phase: WindowPhase, found: Machine, deadline: float, results: Path, log, ready: Mapping[str, Future],
    ended: Mapping[str, threading.Event], order: Mapping[str, list[str]],
) -> None:  # fmt: skip
    """One phase: wait for the phase it follows and for its assets, then its `bench run` with the time left."""
    try:
        for before in phase.after:
            ended[before].wait(timeout=max(0.0, deadline - time.monotonic()))
        if not assets_ready(phase, ready, deadline - SETTLE_S - LEAST_S, log):
            return
        if phase.speed_of is not None:
            phase = speed_cells(phase, results, order[phase.speed_of], log)
        left = deadline - time.monotonic() - SETTLE_S
        if not phase.cells or left < LEAST_S:
            print(f"window: {phase.name}: not started ({max(0.0, left):.0f} s left, {len(phase.cells)} cells)",
                  file=log, flush=True)  # fmt: skip
            return
        argv = [sys.executable, "-m", "bench", "--results", str(results), "run"]
        argv += phase.argv(found.content.slots or shared(found).slots, left / 60)
        print(f"window: {phase.name} ({left / 60:.1f} min): {' '.join(argv[1:])}", file=log, flush=True)
        code = stream(argv, Prefixed(log, phase.name), phase.environment())
        print(f"window: {phase.name} ended with exit code {code}", file=log, flush=True)
    finally:
        ended[phase.name].set()


def speed_cells(phase: WindowPhase, results: Path, order: list[str], log) -> WindowPhase:
    """The speed pass's cells: those of the phase it follows whose record is ok with a shared speed
    (bench/run/side_by_side.py's rule), as many as the phase names, taken in its order one quantization at a time
    (window_spec.spread_over_quantizations)."""
    from dataclasses import replace

    from bench.results.schema import Status
    from bench.results.store import load_results

    run_dir = results / phase.profile / phase.run_id
    done = load_results(run_dir, quiet=True).latest_by_cell() if run_dir.is_dir() else {}
    ok = [c for c in order if (r := done.get(c)) is not None and r.status == Status.OK and r.speed_shared]
    chosen = spread_over_quantizations(ok, len(phase.cells))
    print(f"window: {phase.name}: {', '.join(chosen) or 'no cell ok with a shared speed'}", file=log, flush=True)
    return replace(phase, cells=chosen)


def summarize(phases: list[WindowPhase], planned: dict, results: Path, seconds: float) -> dict:
    """summary.json: each phase's records (trial 0, or the speed pass's later trials) by status, against the plan."""
    from bench.results.store import load_results

    rows = []
    for phase, row in zip(phases, planned["phases"], strict=True):
        run_dir = results / phase.profile / phase.run_id
        records = load_results(run_dir, quiet=True).records if run_dir.is_dir() else []
        if phase.speed_of is not None:  # its cells are chosen as it starts: the run's later trials
            mine = [r for r in records if r.trial > 0]
        else:
            mine = [r for r in records if r.cell_id in set(phase.cells) and r.trial == 0]
        ran = [r for r in mine if r.wall_s is not None]
        rows.append({"name": phase.name, "run": f"{phase.profile}/{phase.run_id}", "planned": len(row["cells"]),
                     "predicted_cells": row["predicted_cells"], "ran": len(ran),
                     "statuses": dict(Counter(r.status.value for r in mine))})  # fmt: skip
    return {"seconds": round(seconds, 1), "phases": rows, "ran": sum(r["ran"] for r in rows),
            "predicted_total": planned["predicted_total"]}  # fmt: skip


def summary_lines(summary: dict) -> list[str]:
    lines = [f"window: {summary['ran']} cells ran in {summary['seconds']:.0f} s (PREDICTED "
             f"{summary['predicted_total']['slow']}-{summary['predicted_total']['fast']})"]  # fmt: skip
    for row in summary["phases"]:
        ends = row["predicted_cells"]
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(row["statuses"].items()))
        lines.append(f"  {row['name']:<24} ran {row['ran']:>3} (PREDICTED {ends['slow']}-{ends['fast']} of "
                     f"{row['planned']}){': ' + statuses if statuses else ''}")  # fmt: skip
    return lines


def write_tables(results: Path, hw: str, run_id: str) -> None:
    """MATRIX.md and matrix.csv of one run, copied into its folder: two runs of one profile share the profile's."""
    run_dir = results / hw / run_id
    if not (run_dir / "results.jsonl").is_file():
        return
    argv = [sys.executable, "-m", "bench", "--results", str(results), "matrix", "--hw", hw, "--run-id", run_id]
    subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    for table in ("MATRIX.md", "matrix.csv"):
        if (run_dir.parent / table).is_file():
            shutil.copyfile(run_dir.parent / table, run_dir / table)


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


class Prefixed:
    """Each line written through it is prefixed with the phase's name."""

    def __init__(self, out, name: str) -> None:
        self.out, self.name = out, name

    def write(self, text: str) -> int:
        return self.out.write(f"[{self.name}] {text}")

    def flush(self) -> None:
        self.out.flush()


def stream(argv: list[str], out, env: Mapping[str, str] | None = None) -> int:
    """Run `argv` in the project root (with `env` added to this process's environment), its output line by line to
    `out`; its exit code."""
    environ = None if env is None else os.environ | dict(env)
    with subprocess.Popen(
        argv, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            out.write(line)
            out.flush()
    return child.returncode
