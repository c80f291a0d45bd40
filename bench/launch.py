"""Cell -> launcher command line, environment and the native config files it needs.

Config files are written next to the cell's results (configs/<cell-id>/) so a user can reuse them:
accelerate's own ClusterConfig writes accelerate.yaml; deepspeed.json is a DeepSpeed config whose
batch/precision fields are `auto`, filled in by the HF Trainer integration.
"""

import json
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.profiles import HardwareProfile
from bench.scenario import Backend, Cell, Launcher, world_size
from bench.worker.spec import WorkerSpec

WORKER_MODULE = "bench.worker"


@dataclass
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    config_files: list[Path] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deepspeed_config(stage: int) -> dict:
    # On CPU a `train_batch_size: auto` breaks ZeRO-3 at model load; the Trainer derives it from the rest.
    return {
        "zero_optimization": {"stage": stage},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_allow_untested_optimizer": True,
    }


def accelerate_config(cell: Cell, profile: HardwareProfile, port: int, deepspeed_file: Path | None) -> object:
    from accelerate.commands.config.config_args import ClusterConfig

    processes = world_size(cell, profile)
    # `use_cpu: true` makes `accelerate launch` start ONE process whatever num_processes says; MULTI_GPU with
    # use_cpu false starts real gloo ranks on a CPU-only machine (the worker's DPOConfig sets use_cpu itself).
    distributed = {
        Backend.DDP: "MULTI_GPU",
        Backend.FSDP: "FSDP",
        Backend.ZERO2: "DEEPSPEED",
        Backend.ZERO3: "DEEPSPEED",
    }[cell.backend]
    fsdp = None
    if cell.backend == Backend.FSDP:
        fsdp = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_reshard_after_forward": True,
            "fsdp_cpu_ram_efficient_loading": False,
        }
    deepspeed = {"deepspeed_config_file": str(deepspeed_file)} if deepspeed_file else None
    return ClusterConfig(
        compute_environment="LOCAL_MACHINE",
        distributed_type=distributed,
        # With a deepspeed_config_file accelerate refuses its own precision setting: the DeepSpeed file decides.
        mixed_precision=None if deepspeed else ("no" if profile.precision == "fp32" else profile.precision),
        use_cpu=False,
        num_processes=processes,
        num_machines=1,
        machine_rank=0,
        main_process_ip="127.0.0.1",
        main_process_port=port,
        rdzv_backend="static",
        same_network=True,
        deepspeed_config=deepspeed,
        fsdp_config=fsdp,
        debug=False,
    )


def _bin(python: str, name: str) -> str:
    """The launcher installed beside the interpreter (same venv), else whatever PATH has."""
    candidate = Path(python).parent / name
    return str(candidate) if candidate.exists() else name


def plan_launch(
    spec: WorkerSpec, spec_path: Path, config_dir: Path, python: str = sys.executable
) -> tuple[LaunchPlan, WorkerSpec]:
    """The command that runs `spec` with its launcher under `python`; may set spec.deepspeed_config
    (the updated spec is returned and written to spec_path)."""
    cell, profile = spec.cell, spec.profile
    processes = world_size(cell, profile)
    port = free_port()
    config_dir.mkdir(parents=True, exist_ok=True)
    plan = LaunchPlan(argv=[], env=_base_env(profile, port))

    ds_file = None
    if cell.backend in (Backend.ZERO2, Backend.ZERO3):
        ds_file = config_dir / "deepspeed.json"
        ds_file.write_text(json.dumps(deepspeed_config(2 if cell.backend == Backend.ZERO2 else 3), indent=2))
        plan.config_files.append(ds_file)
        if cell.launcher != Launcher.ACCELERATE:
            spec = spec.model_copy(update={"deepspeed_config": str(ds_file)})

    module = ["-m", WORKER_MODULE, str(spec_path)]
    if cell.launcher == Launcher.PYTHON:
        plan.argv = [python, *module]
    elif cell.launcher == Launcher.TORCHRUN:
        plan.argv = [_bin(python, "torchrun"), "--standalone", f"--nproc_per_node={processes}", *module]
    elif cell.launcher == Launcher.ACCELERATE:
        accelerate_file = config_dir / "accelerate.yaml"
        accelerate_config(cell, profile, port, ds_file).to_yaml_file(str(accelerate_file))
        plan.config_files.append(accelerate_file)
        plan.argv = [_bin(python, "accelerate"), "launch", "--config_file", str(accelerate_file), *module]
    elif cell.launcher == Launcher.DEEPSPEED:
        plan.argv = [
            _bin(python, "deepspeed"),
            f"--num_gpus={processes}",
            f"--master_port={port}",
            "--no_local_rank",
            "--module",
            WORKER_MODULE,
            str(spec_path),
        ]
    elif cell.launcher == Launcher.MPIRUN:
        plan.argv = [
            "mpirun",
            "-np",
            str(processes),
            "--oversubscribe",
            "-x",
            "MASTER_ADDR",
            "-x",
            "MASTER_PORT",
            python,
            *module,
        ]
        if os.geteuid() == 0:
            plan.env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    spec_path.write_text(spec.model_dump_json(indent=2))
    return plan, spec


def _base_env(profile: HardwareProfile, port: int) -> dict[str, str]:
    threads = str(profile.threads_per_process)
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
