"""The command that runs the chosen cell and the native config files `run` would write for it."""

import importlib.util
import json
import shlex
from pathlib import Path

import yaml

from bench.advise.advice import Advice, RunPlan
from bench.errors import BenchError
from bench.install import TRAIN_EXTRA
from bench.launchers import launcher_spec
from bench.launchers.accelerate import accelerate_config
from bench.matrix.backends import backend_spec
from bench.matrix.cell import Cell
from bench.matrix.on_profile import CellOnProfile
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


def run_command(cell: Cell, base_flags: list[str], extra: list[str]) -> str:
    """`dpo-bench run` of the cell. `base_flags`: the hardware, model and settings flags the advice was asked with."""
    argv = ["dpo-bench", "run", *base_flags, *extra, "--filter", cell.id]
    if cell.method != "dpo":
        argv[2:2] = ["--method", str(cell.method)]
    return shlex.join(argv)


def run_plan(
    cell: Cell, profile: HardwareProfile, base_flags: list[str], change: str | None, extra: list[str]
) -> RunPlan:
    files = native_files(cell, profile, missing_ok=True)
    not_shown = {} if len(files) == len(native_file_names(cell)) else {ACCELERATE_FILE: NO_ACCELERATE}
    return RunPlan(
        cell_id=cell.id,
        change=change,
        command=run_command(cell, base_flags, extra),
        files=files,
        not_shown=not_shown,
    )


NO_ACCELERATE = f"accelerate writes it (its ClusterConfig) and is not installed: {TRAIN_EXTRA}"


def native_file_names(cell: Cell) -> list[str]:
    """The native config files `run` writes for the cell: deepspeed.json, accelerate.yaml, both or none."""
    names = [DEEPSPEED_FILE] if backend_spec(cell.backend).deepspeed is not None else []
    return names + ([ACCELERATE_FILE] if launcher_spec(cell.launcher).reads_accelerate_config else [])


def native_files(cell: Cell, profile: HardwareProfile, missing_ok: bool = False) -> dict[str, str]:
    """File name -> content: the deepspeed.json and accelerate.yaml `run` writes for the cell (none for a plain one),
    the DeepSpeed file named relative to the folder both are in. Without accelerate (the base install) its file
    cannot be made: left out with `missing_ok`, else a one-line error."""
    names = native_file_names(cell)
    files: dict[str, str] = {}
    ds_file = None
    if DEEPSPEED_FILE in names:
        ds_file = Path(DEEPSPEED_FILE)
        files[DEEPSPEED_FILE] = json.dumps(deepspeed_config(backend_spec(cell.backend)), indent=2) + "\n"
    if ACCELERATE_FILE in names:
        if importlib.util.find_spec("accelerate") is not None:
            files[ACCELERATE_FILE] = yaml.safe_dump(
                accelerate_config(CellOnProfile(cell, profile), EXAMPLE_PORT, ds_file)
            )
        elif not missing_ok:
            raise BenchError(f"{ACCELERATE_FILE} of {cell.id}: {NO_ACCELERATE}")
    return files
