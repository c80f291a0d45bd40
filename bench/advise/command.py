"""The command that runs the chosen cell and the native config files `run` would write for it."""

import json
import shlex
from pathlib import Path

import yaml

from bench.advise.advice import Advice, RunPlan
from bench.launchers import launcher_spec
from bench.launchers.accelerate import accelerate_config
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.profiles import HardwareProfile
from bench.run.launch import ACCELERATE_FILE, DEEPSPEED_FILE, deepspeed_config

EXAMPLE_PORT = 29500
"""The rendezvous port shown in accelerate.yaml (`run` picks a free one)."""


def to_run(advice: Advice) -> tuple[str, str | None, list[str]] | None:
    """(cell id, change, extra flags): the chosen cell, or, when none fits, the best-ranked cell's fix."""
    if advice.chosen is not None:
        return advice.chosen, None, []
    fixed = next((c for c in advice.cells if c.fix is not None), None)
    if fixed is None or fixed.fix is None:
        return None
    return fixed.fix.cell_id, fixed.fix.change, fixed.fix.flags


def run_plan(
    cell: Cell, profile: HardwareProfile, base_flags: list[str], change: str | None, extra: list[str]
) -> RunPlan:
    """`base_flags`: the hardware, model and settings flags the advice was asked with."""
    argv = ["python", "-m", "bench", "run", *base_flags, *extra, "--filter", cell.id]
    if cell.method != "dpo":
        argv[4:4] = ["--method", str(cell.method)]
    return RunPlan(cell_id=cell.id, change=change, command=shlex.join(argv), files=native_files(cell, profile))


def native_files(cell: Cell, profile: HardwareProfile) -> dict[str, str]:
    """File name -> content: the deepspeed.json and accelerate.yaml `run` writes for the cell (none for a plain one),
    the DeepSpeed file named relative to the folder both are in."""
    backend = backend_spec(cell.backend)
    files: dict[str, str] = {}
    ds_file = None
    if backend.deepspeed is not None:
        ds_file = Path(DEEPSPEED_FILE)
        files[DEEPSPEED_FILE] = json.dumps(deepspeed_config(backend), indent=2) + "\n"
    if launcher_spec(cell.launcher).reads_accelerate_config:
        files[ACCELERATE_FILE] = yaml.safe_dump(accelerate_config(cell, profile, EXAMPLE_PORT, ds_file))
    return files
