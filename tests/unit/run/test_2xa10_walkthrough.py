"""The whole 2xA10 matrix planned on CPU, as a box with two A10s would run it (no training): every cell's launcher
command, environment, visible devices, container and Slurm requests and generated configs, held against the rules a
GPU run needs (issue 32), and written as a table a reviewer can read: tests/unit/run/walkthrough_2xA10.md.

After a change to the matrix, the recipes or the launch plans, regenerate the table with
`BENCH_WRITE_WALKTHROUGH=1 .venv/bin/python -m pytest tests/unit/run/test_2xa10_walkthrough.py` and review its diff;
the rules are checked either way.
"""

import base64
import dataclasses
import json
import os
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench.assets.prepare import PreparedAssets
from bench.executors.docker import container_spec, docker_run_argv
from bench.executors.slurm.executor import SlurmOptions, sbatch_options
from bench.launchers import torch_rank_env
from bench.matrix.axes import Launcher, Setup
from bench.matrix.cell import Cell
from bench.matrix.inits import init_spec
from bench.matrix.methods import method_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix, not_applicable_reason
from bench.run.launch import ACCELERATE_FILE, DEEPSPEED_FILE, plan_launch
from bench.run.preflight import GB, Detected, preflight
from bench.worker.placement import device_map_setting, splits_layers
from bench.worker.spec import WorkerSpec
from bench.worker.trainer_args import trainer_arguments

PROFILE = load_profile("2xA10")
WORKLOAD = load_workload("phi-2")
TABLE = Path(__file__).with_name("walkthrough_2xA10.md")
PYTHON = "/opt/venv/bin/python"
ROOT = Path("/src/dpo-bench")


def a10s(count: int, visible: str | None = None) -> Detected:
    return Detected(
        device="cuda",
        count=count,
        names=("NVIDIA A10",) * count,
        memory_bytes=(int(23.7 * GB),) * count,
        visible_devices=visible,
        driver_version="580.95.05",
        cuda_build="13.0",
    )


@dataclass
class Row:
    cell: Cell
    spec: WorkerSpec
    env: dict[str, str]
    argv: list[str]
    files: dict[str, str]
    devices: int
    docker_gpus: str
    docker_visible: str
    slurm_gpus: str


def planned(run_env: dict[str, str], folder: Path) -> list[Row]:
    rows = []
    for cell in expand(load_matrix()):
        if not_applicable_reason(CellOnProfile(cell, PROFILE)) is not None:
            continue
        spec = WorkerSpec.from_plan(
            plan_for(cell, PROFILE, WORKLOAD),
            PreparedAssets(model="/assets/phi-2", tokenizer="/assets/tok", dataset="/assets/data"),
            str(folder / "cells" / cell.id),
        )
        launch = plan_launch(spec, folder / cell.id, port=29500, python=PYTHON, run_env=run_env)
        container = container_spec("dpo-bench/cuda:x", PROFILE, ROOT, writable=[folder], readonly=[])
        docker = docker_run_argv(container, launch, "c", {})
        options = [a for a in docker if a.startswith("CUDA_VISIBLE_DEVICES=")]
        gpus = docker[docker.index("--gpus") + 1] if "--gpus" in docker else "-"
        slurm = [o for o in sbatch_options(launch, PROFILE, SlurmOptions(), 60, cell.id, folder) if "gpus" in o]
        rows.append(
            Row(
                cell=cell,
                spec=spec,
                env=launch.env,
                argv=launch.argv,
                files={path.name: text for path, text in launch.files.items()},
                devices=launch.devices,
                docker_gpus=gpus.strip('"'),
                docker_visible=options[-1].split("=", 1)[1] if options else "-",
                slurm_gpus=slurm[0].split("=", 1)[1] if slurm else "-",
            )
        )
    return rows


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[Row]:
    checked = preflight(PROFILE, emulate=False, detected=a10s(2))
    assert checked.launch_env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    return planned(checked.launch_env, tmp_path_factory.mktemp("plans"))


def expected_devices(row: Row) -> int:
    if splits_layers(row.spec):
        return PROFILE.device_count
    return CellOnProfile(row.cell, PROFILE).world  # the profile's ranks, or the row's own (`+1rank`); 1 for one process


# ---------------------------------------------------------------- the rules


def test_every_cell_sees_exactly_its_own_gpus(rows):
    """Item 2: a single-process cell that saw both GPUs would be refused by TRL (nn.DataParallel); a split model
    and the ranks of a multi-process cell see the profile's two."""
    for row in rows:
        want = expected_devices(row)
        assert row.devices == want, row.cell.id
        assert row.env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(want)), row.cell.id
        assert row.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", row.cell.id
        assert row.docker_gpus == f"device={row.env['CUDA_VISIBLE_DEVICES']}", row.cell.id
        assert row.docker_visible == ",".join(str(i) for i in range(want)), row.cell.id
        assert row.slurm_gpus == str(want), row.cell.id
    single = [r for r in rows if r.devices == 1 and r.cell.ranks is None and r.cell.method == "dpo"]
    assert {r.cell.backend for r in single} == {"single"} and len(single) == 9
    one_rank = [r for r in rows if r.cell.ranks == 1]  # the offload backends on one GPU of the two
    assert one_rank and all(r.devices == 1 and r.env["CUDA_VISIBLE_DEVICES"] == "0" for r in one_rank)


def test_cells_take_their_gpus_from_the_users_selection(tmp_path):
    """On a four-GPU box with CUDA_VISIBLE_DEVICES=2,3 (a Slurm allocation, another user's jobs on 0,1)."""
    checked = preflight(PROFILE, emulate=False, detected=a10s(2, visible="2,3"))
    for row in planned(checked.launch_env, tmp_path):
        want = expected_devices(row)
        assert row.env["CUDA_VISIBLE_DEVICES"] == ("2,3" if want == 2 else "2"), row.cell.id
        assert row.docker_gpus == f"device={row.env['CUDA_VISIBLE_DEVICES']}", row.cell.id


def test_emulated_cells_keep_the_memory_cap_and_narrow_the_devices(tmp_path):
    h100s = dataclasses.replace(a10s(4), names=("NVIDIA H100 80GB HBM3",) * 4, memory_bytes=(int(80 * GB),) * 4)
    checked = preflight(PROFILE, emulate=True, detected=h100s)
    for row in planned(checked.launch_env, tmp_path):
        assert row.env["BENCH_EMULATE_MEMORY_FRACTION"] == f"{24 / 80:.6f}", row.cell.id
        assert len(row.env["CUDA_VISIBLE_DEVICES"].split(",")) == expected_devices(row), row.cell.id


def test_the_deepspeed_launcher_is_left_the_cells_gpus(rows, monkeypatch):
    """Item 4, with DeepSpeed's own launcher (deepspeed/launcher/runner.py main) reading the planned command on a
    machine whose GPUs 2,3 are the cell's: it must start the ranks on 2,3. The accelerator is faked (4 GPUs,
    counted as NVML counts them: every GPU once the launcher has dropped CUDA_VISIBLE_DEVICES), and so is Popen."""
    from deepspeed.launcher import runner

    started: list[list[str]] = []

    class Launched:
        returncode = 0

        def __init__(self, cmd: list[str], env: dict) -> None:
            started.append(cmd)

        def wait(self) -> int:
            return 0

    fake_accelerator = types.SimpleNamespace(
        visible_devices_envs=lambda: ["CUDA_VISIBLE_DEVICES"],
        device_count=lambda: len(os.environ.get("CUDA_VISIBLE_DEVICES", "0,1,2,3").split(",")),
        export_envs=lambda: ["NCCL"],
    )
    monkeypatch.setattr(runner, "get_accelerator", lambda: fake_accelerator)
    monkeypatch.setattr(runner.subprocess, "Popen", Launched)

    def ranks_on(argv: list[str]) -> dict:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
        runner.main(argv[1:])
        world = next(a for a in started[-1] if a.startswith("--world_info="))
        return json.loads(base64.urlsafe_b64decode(world.split("=", 1)[1]))

    zero = [r for r in rows if r.cell.launcher == Launcher.DEEPSPEED]
    assert len(zero) >= 10
    for row in zero:
        assert not any(a.startswith("--num_gpus") for a in row.argv), row.cell.id
    assert ranks_on(zero[0].argv) == {"localhost": [2, 3]}
    # the fault it guards against: with --num_gpus the launcher drops the variable and takes GPUs 0 and 1
    assert ranks_on([*zero[0].argv[:1], "--num_gpus=2", *zero[0].argv[1:]]) == {"localhost": [0, 1]}


def test_mpirun_ranks_tell_torch_who_they_are(rows):
    """Item 3: each mpirun rank's OMPI variables become RANK / LOCAL_RANK / WORLD_SIZE before torch loads."""
    mpi = [r for r in rows if r.cell.launcher == Launcher.MPIRUN]
    assert len(mpi) == 12  # one_adapter-none on ddp and zero2, for DPO and each other method
    for row in mpi:
        assert row.argv[row.argv.index("-np") + 1] == "2" and "MASTER_PORT" in row.argv
        for rank in (0, 1):
            ompi = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_RANK": str(rank)}
            mapped = torch_rank_env(row.cell.launcher, ompi | {"OMPI_COMM_WORLD_SIZE": "2"})
            assert mapped == {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}


def test_split_models_put_the_lm_head_where_the_batch_is(rows):
    """Item 5: the recipe row places the LM head on the first GPU; the newcomer row leaves device_map="auto" and
    is expected to fail as the known issue says."""
    split = {r.cell.id: device_map_setting(r.spec) for r in rows if r.cell.backend == "device_map"}
    offline = [c for c in split if not c.startswith(("grpo-", "rloo-"))]
    assert len(offline) == 32  # DPO's 9, and 23 of the other offline methods (sft, reward, orpo, simpo 4 each, kto 7)
    for cell_id, placement in split.items():
        assert placement == ("auto" if cell_id.endswith("+newcomer") else "balanced_io_first"), cell_id


def test_fsdp_cells_load_ram_efficiently_and_adapter_cells_train_at_the_lora_rate(rows):
    """Items 6 and 7: FSDP's RAM-efficient loading stays for every init (a separate reference model gets its weights
    on every rank: tests/unit/worker/test_gpu_worker.py); adapters train at the workload's LoRA rate."""
    for row in rows:
        if row.cell.backend == "fsdp":
            accelerate = yaml.safe_load(row.files[ACCELERATE_FILE])
            efficient = accelerate["fsdp_config"].get("fsdp_cpu_ram_efficient_loading")
            assert efficient is (None if row.cell.setup == Setup.NEWCOMER else True), row.cell.id
            assert accelerate["distributed_type"] == "FSDP" and accelerate["num_processes"] == 2
        rate = trainer_arguments(row.spec)["learning_rate"]
        scale = method_spec(row.cell.method).learning_rate_scale  # e.g. SimPO's own rate (bench/matrix/methods.py)
        full_weights = not init_spec(row.cell.init).adapters  # two_models and full
        assert rate == pytest.approx((5e-6 if full_weights else 5e-5) * scale), row.cell.id
        assert trainer_arguments(row.spec)["bf16"] is True and trainer_arguments(row.spec)["use_cpu"] is False


# ---------------------------------------------------------------- the table


def describe(row: Row) -> list[str]:
    program = Path(row.argv[0]).name
    flags = [a for a in row.argv[1:] if a.startswith(("--num_gpus", "--nproc_per_node", "-np", "--include"))]
    if "-np" in row.argv:
        flags = [f"-np {row.argv[row.argv.index('-np') + 1]}"]
    config = []
    if ACCELERATE_FILE in row.files:
        accelerate = yaml.safe_load(row.files[ACCELERATE_FILE])
        config.append(f"accelerate {accelerate['distributed_type']}")
        if (accelerate.get("fsdp_config") or {}).get("fsdp_cpu_ram_efficient_loading"):
            config.append("ram-efficient")
        if (accelerate.get("deepspeed_config") or {}).get("zero3_init_flag"):
            config.append("zero3_init")
    if DEEPSPEED_FILE in row.files:
        zero = json.loads(row.files[DEEPSPEED_FILE])["zero_optimization"]
        config.append(f"ZeRO-{zero['stage']}" + (" offload" if "offload_optimizer" in zero else ""))
    arguments = trainer_arguments(row.spec)
    placement = device_map_setting(row.spec) or "-"
    if placement == "local_rank":
        placement = '{"": local_rank}'
    return [
        row.cell.id,
        f"{program} {' '.join(flags)}".strip(),
        str(row.devices),
        row.env["CUDA_VISIBLE_DEVICES"],
        f"{row.docker_gpus} → {row.docker_visible}",
        row.slurm_gpus,
        placement,
        ", ".join(config) or "-",
        f"{arguments['learning_rate']:g}",
        "yes" if arguments["precompute_ref_log_probs"] else "-",
    ]


HEADER = (
    "cell",
    "launcher",
    "GPUs",
    "CUDA_VISIBLE_DEVICES",
    "docker --gpus → inside",
    "slurm --gpus-per-node",
    "device_map",
    "configs",
    "lr",
    "precomputed ref",
)


def table(rows: list[Row]) -> str:
    lines = [
        "# 2xA10: every cell as a two-A10 box runs it (planned on CPU, no training)",
        "",
        "Generated by `tests/unit/run/test_2xa10_walkthrough.py` (its docstring says how); the rules each column "
        "follows are that test's. The run's GPUs are `0,1` (the preflight's `CUDA_VISIBLE_DEVICES`); every cell "
        "also gets `CUDA_DEVICE_ORDER=PCI_BUS_ID`. mpirun ranks map `OMPI_COMM_WORLD_*` to `RANK`/`LOCAL_RANK`/"
        "`WORLD_SIZE` in the worker; the deepspeed launcher turns `CUDA_VISIBLE_DEVICES` into `--include "
        "localhost:<ids>` itself.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(describe(row)) + " |" for row in rows]
    na = [(c.id, not_applicable_reason(CellOnProfile(c, PROFILE))) for c in expand(load_matrix())]
    lines += ["", "Not applicable on 2xA10:", ""]
    lines += [f"- `{cell}`: {reason}" for cell, reason in na if reason]
    return "\n".join(lines) + "\n"


def test_the_walkthrough_table_is_current(rows):
    text = table(rows)
    if os.environ.get("BENCH_WRITE_WALKTHROUGH"):
        TABLE.write_text(text, encoding="utf-8")
    assert TABLE.read_text(encoding="utf-8") == text, (
        f"{TABLE.name} is stale: regenerate it (BENCH_WRITE_WALKTHROUGH=1, see {Path(__file__).name}) and review "
        "the diff"
    )
    assert any(r.cell.setup == Setup.NEWCOMER for r in rows)
