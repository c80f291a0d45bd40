"""What each launcher gives one cell: the argv and environment of its single-node plan (on the CPU profile, and on
GPUs as root), the command line and srun line of its two-node job, and the rank variables its ranks map to torch's.
Pinned in pinned_launches.json (test_pinned.py); `python -m tests.unit.launchers.pinned` prints the current value."""

import json
from pathlib import Path

from bench.assets.prepare import PreparedAssets
from bench.launchers import job_launch, rank_from_env, torch_rank_env
from bench.launchers.job import NodeLayout
from bench.matrix.cell import Cell
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.run.launch import plan_launch
from bench.worker.spec import WorkerSpec

PY = "/venv/bin/python"
DIR = Path("/cells/configs/cell")
CELLS = {
    "python": ("single", "cpu"),
    "torchrun": ("ddp", "2xA10"),
    "accelerate": ("zero2", "2xA10"),
    "deepspeed": ("zero3", "2xA10"),
    "mpirun": ("ddp", "2xA10"),
}
RANK_ENV = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_RANK": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_SIZE": "6",
}


def one_launcher(launcher: str, backend: str, gpu_profile: str) -> dict:
    cell = Cell(init="one_adapter", quant="none", backend=backend, launcher=launcher)
    seen: dict = {}
    for name, profile_name, as_root in (("cpu", "cpu", False), ("gpu", gpu_profile, True)):
        profile = load_profile(profile_name)
        spec = WorkerSpec.from_plan(
            plan_for(cell, profile, load_workload("tiny")),
            PreparedAssets(model="m", tokenizer="t", dataset="d"),
            "/cells/out",
        )
        run_env = {"CUDA_VISIBLE_DEVICES": "3,1,2"} if profile.device == "cuda" else None
        launch = plan_launch(spec, DIR, port=29555, python=PY, as_root=as_root, run_env=run_env)
        seen[name] = {
            "argv": launch.argv,
            "env": launch.env,
            "files": {str(path): text for path, text in sorted(launch.files.items())},
        }
    nodes = load_profile("2x8xA100-80G")
    spec = WorkerSpec.from_plan(
        plan_for(cell, nodes, load_workload("tiny")),
        PreparedAssets(model="m", tokenizer="t", dataset="d"),
        "/cells/out",
    )
    launch = plan_launch(spec, DIR, port=29555, python=PY)
    layout = NodeLayout(1, 1, 4) if launcher == "python" else NodeLayout(2, 8, 4)
    job = job_launch(launch.launcher, launch.inputs, launch.argv[0], layout)
    seen["nodes"] = {
        "node_argv": job.node_argv,
        "srun": job.srun,
        "tasks_per_node": job.tasks_per_node,
        "cpus_per_task": job.cpus_per_task,
        "script_line": job.script_line(),
    }
    seen["ranks"] = {"rank": list(rank_from_env(launcher, RANK_ENV)), "torch": torch_rank_env(launcher, RANK_ENV)}
    ompi = {k: v for k, v in RANK_ENV.items() if k.startswith("OMPI")}
    seen["ranks"]["torch_from_ompi_only"] = torch_rank_env(launcher, ompi)
    return seen


def everything() -> dict:
    return {launcher: one_launcher(launcher, *where) for launcher, where in CELLS.items()}


if __name__ == "__main__":
    print(json.dumps(everything(), indent=1, sort_keys=True))
