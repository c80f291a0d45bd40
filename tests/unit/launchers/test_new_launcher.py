"""A new launcher is one module (its command lines, its environment, its rank variables) plus one entry in
LAUNCHERS: the launch plan, the multi-node job, the worker's rank and the rank-variable mapping all find it there,
with nothing else to edit (the matrix axis would also list its id: bench/matrix/axes.py Launcher)."""

import importlib.util
import sys
import warnings

import pytest

from bench.assets.prepare import PreparedAssets
from bench.launchers import LAUNCHERS, job_launch, launcher_spec, rank_from_env, torch_rank_env
from bench.launchers.job import NodeLayout
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.run.launch import plan_launch
from bench.worker.spec import WorkerSpec

MODULE = '''
"""srun as a launcher: Slurm starts the ranks itself and tells them who they are in SLURM_*."""

from bench.launchers.base import LauncherSpec
from bench.launchers.job import JobLaunch


def argv(inputs, program):
    return [program, f"--ntasks={inputs.processes}", inputs.python, *inputs.worker]


def node_argv(inputs, program, layout):
    return [inputs.python, *inputs.worker]


def job(line, layout):
    return JobLaunch(layout.per_node, layout.threads, line, ["srun", f"--ntasks-per-node={layout.per_node}"])


LAUNCHER = LauncherSpec(
    name="srun",
    summary="Slurm's srun starts every rank",
    program="srun",
    rank_env=("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    argv=argv,
    node_argv=node_argv,
    job=job,
    root_env=(("SRUN_AS_ROOT", "1"),),
)
'''


@pytest.fixture
def srun(tmp_path, monkeypatch):
    path = tmp_path / "srun_launcher.py"
    path.write_text(MODULE)
    loader = importlib.util.spec_from_file_location("srun_launcher", path)
    module = importlib.util.module_from_spec(loader)
    monkeypatch.setitem(sys.modules, "srun_launcher", module)
    loader.loader.exec_module(module)
    monkeypatch.setitem(LAUNCHERS, "srun", module.LAUNCHER)  # the one table entry
    return module.LAUNCHER


def test_an_unknown_launcher_is_refused_until_its_entry_is_there(tmp_path, srun, monkeypatch):
    assert launcher_spec("srun") is srun
    monkeypatch.delitem(LAUNCHERS, "srun")
    with pytest.raises(ValueError, match="unknown launcher 'srun'"):
        launcher_spec("srun")


def test_the_launch_plan_takes_the_new_launchers_argv_and_environment(tmp_path, srun):
    profile = load_profile("2xA10")
    # the axis does not list the id yet: the cell is built unvalidated, as if Launcher had it
    cell = Cell(init="one_adapter", quant="none", backend="ddp", launcher="torchrun").model_copy(
        update={"launcher": "srun"}
    )
    spec = WorkerSpec.from_plan(
        plan_for(cell, profile, load_workload("tiny")),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        str(tmp_path / "out"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic: "srun" is not yet a Launcher when the spec is written
        launch = plan_launch(spec, tmp_path, port=29555, python="/venv/bin/python", as_root=True)
    assert launch.argv == ["srun", "--ntasks=2", "/venv/bin/python", "-m", "bench.worker", str(tmp_path / "spec.json")]
    assert launch.env["SRUN_AS_ROOT"] == "1" and "OMPI_ALLOW_RUN_AS_ROOT" not in launch.env
    job = job_launch(launch.launcher, launch.inputs, launch.argv[0], NodeLayout(2, 4))
    assert job.srun == ["srun", "--ntasks-per-node=4"] and job.tasks_per_node == 4
    assert job.node_argv == ["/venv/bin/python", "-m", "bench.worker", str(tmp_path / "spec.json")]


def test_its_ranks_read_their_rank_and_get_torchs_variables(srun):
    slurm = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"}
    assert rank_from_env("srun", slurm) == (5, 1, 8)
    assert torch_rank_env("srun", slurm) == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}
