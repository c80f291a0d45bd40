"""Cell -> launcher command line, environment and the native config files it needs.

Planning is pure: `plan_launch` returns the argv, the environment and the content of every file the launch
needs (the worker spec, accelerate.yaml, deepspeed.json); `write_files` puts them on disk. The files go next to
the cell's results (configs/<cell-id>/) so a user can reuse them: accelerate.yaml is accelerate's own
ClusterConfig (bench/launchers/accelerate.py); deepspeed.json is a DeepSpeed config whose batch/precision fields are
`auto`, filled in by the HF Trainer integration. How each launcher builds its argv and tells ranks who they are:
bench/launchers/.
"""

import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from bench.executors.base import LaunchPlan
from bench.files import own_folder, write_whole
from bench.isolation.fork_server_rules import per_process
from bench.launchers import LaunchInputs, launcher_spec
from bench.launchers.accelerate import accelerate_config
from bench.matrix.backends import BackendSpec
from bench.matrix.plan import Plan, plan_for
from bench.matrix.profiles import HardwareProfile
from bench.worker.placement import cell_devices
from bench.worker.spec import WorkerSpec

WORKER_MODULE = "bench.worker"
SPEC_FILE = "spec.json"
DEEPSPEED_FILE = "deepspeed.json"
ACCELERATE_FILE = "accelerate.yaml"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deepspeed_config(backend: BackendSpec) -> dict:
    if backend.deepspeed is None:
        raise ValueError(f"backend {backend.name} does not run DeepSpeed")
    zero: dict = {"stage": backend.deepspeed.stage}
    if backend.deepspeed.offload_optimizer:
        zero["offload_optimizer"] = {"device": backend.deepspeed.offload_optimizer}
    if backend.deepspeed.offload_param:
        zero["offload_param"] = {"device": backend.deepspeed.offload_param}
    # On CPU a `train_batch_size: auto` breaks ZeRO-3 at model load; the Trainer derives it from the rest.
    return {
        "zero_optimization": zero,
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_allow_untested_optimizer": True,
    }


def cell_visible_devices(run_devices: str, count: int) -> str:
    """Pure: the first `count` of the run's devices (CUDA_VISIBLE_DEVICES ids, host numbering)."""
    ids = [item.strip() for item in run_devices.split(",") if item.strip()]
    if len(ids) < count:
        raise ValueError(f"the cell needs {count} GPUs; the run has {run_devices!r}")
    return ",".join(ids[:count])


def plan_launch(
    spec: WorkerSpec,
    config_dir: Path,
    port: int,
    python: str = sys.executable,
    as_root: bool = False,
    run_env: Mapping[str, str] | None = None,
    cores: list[int] | None = None,
    slot: int | None = None,
    plan: Plan | None = None,
) -> LaunchPlan:
    """The command that runs `spec` with its launcher under `python`, and the files it needs. Pure: nothing is
    written (see `write_files`); `port` is the rendezvous port, `as_root` whether the launch runs as root, `run_env`
    what the run adds to every cell (bench/run/preflight.py: the run's GPUs, the --emulate cap), of which a cell on
    GPUs takes its own devices (bench/worker/placement.py cell_devices); `cores` and `slot`: where it runs beside
    other cells (bench/run/slots.py); `plan`: the spec's cell resolved on its profile with its workload, where the
    caller holds it (resolved here otherwise)."""
    plan = plan or plan_for(spec.cell, spec.profile, spec.workload)
    cell, profile, backend, launcher = plan.cell, plan.profile, plan.backend, launcher_spec(plan.cell.launcher)
    spec_path = config_dir / SPEC_FILE
    files: dict[Path, str] = {}

    ds_file = None
    if backend.deepspeed is not None:
        ds_file = config_dir / DEEPSPEED_FILE
        files[ds_file] = json.dumps(deepspeed_config(backend), indent=2)
        if not launcher.reads_accelerate_config:
            spec = spec.model_copy(update={"deepspeed_config": str(ds_file)})
    accelerate_file = None
    if launcher.reads_accelerate_config:
        accelerate_file = config_dir / ACCELERATE_FILE
        files[accelerate_file] = _accelerate_file(plan, port, ds_file)
    files[spec_path] = spec.model_dump_json(indent=2)

    devices = cell_devices(spec)
    inputs = LaunchInputs(
        python=python,
        processes=plan.world,
        port=port,
        worker=("-m", WORKER_MODULE, str(spec_path)),
        accelerate_config=str(accelerate_file) if accelerate_file else None,
        gpus=devices > 0,
    )
    threads = host_threads(backend, profile, plan.world, os.cpu_count() or 1)
    env = _base_env(profile, port, threads) | launcher.environment(as_root) | _compile_env(spec) | dict(run_env or {})
    if devices and env.get(VISIBLE_ENV):
        env[VISIBLE_ENV] = cell_visible_devices(env[VISIBLE_ENV], devices)
    return LaunchPlan(
        argv=launcher.command(inputs, python),
        env=env,
        files=files,
        ranks=plan.world,
        launcher=str(cell.launcher),
        inputs=inputs,
        devices=devices,
        progress_dir=Path(spec.out_dir),
        stall_s=None if spec.workload.train.torch_compile else profile.stall_s,  # compiling is inside the steps
        cores=cores,
        slot=slot,
    )


def _accelerate_file(plan: Plan, port: int, ds_file: Path | None) -> str:
    """The cell's accelerate.yaml; under pure bf16 without its autocast (`mixed_precision: no`: the launcher's
    setting reaches the ranks' environment, which TrainingArguments' `bf16: false` does not undo)."""
    config = accelerate_config(plan.on_profile, port, ds_file, plan.settings)
    if plan.pure_bf16 and config.get("mixed_precision") is not None:
        config["mixed_precision"] = "no"
    return yaml.safe_dump(config)


def _compile_env(spec: WorkerSpec) -> dict[str, str]:
    """Under `--torch-compile on`, the cell's own inductor cache (in its folder): compiled from cold like any cell's
    start, and a cell killed while it compiled leaves no truncated kernel library for the next cell to load (the
    shared default, /tmp/torchinductor_<user>, did: "file too short")."""
    return (
        {"TORCHINDUCTOR_CACHE_DIR": str(Path(spec.out_dir) / "inductor")} if spec.workload.train.torch_compile else {}
    )


def write_files(plan: LaunchPlan, inside: Path) -> None:
    """The plan's files, each written whole in a folder of its own below `inside` (the run folder): a link there, to
    a file or a folder, is replaced, never written through (bench/files.py)."""
    for path, text in plan.files.items():
        write_whole(own_folder(path.parent, inside) / path.name, text)


def host_threads(backend: BackendSpec, profile: HardwareProfile, ranks: int, cpus: int) -> int:
    """Pure: CPU threads of each rank. An offload backend on an accelerator runs the optimizer step on the host
    (DeepSpeedCPUAdam, FSDP2's CPU offload): its ranks share every core of the machine, not the profile's few per
    process (on a 16-core GPU box: 16 threads for one rank, not 4). The CPU profiles keep theirs: there the ranks
    are the whole machine's work already."""
    if backend.offloads and profile.device != "cpu":
        return max(profile.threads_per_process, cpus // max(1, ranks))
    return profile.threads_per_process


OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""A cell reads its model, tokenizer and data from local folders the run prepared; nothing reaches for the Hub
while it is timed (an air-gapped box would wait on a connection), as in the images (docker/*/Dockerfile)."""


def shared_env(profile: HardwareProfile, run_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every cell's launch plan adds to the environment, without what differs per cell or rank (its port, its
    devices, its threads): the environment a run's fork server imports the libraries under."""
    every = _base_env(profile, 0) | dict(run_env or {})
    return {name: value for name, value in every.items() if not per_process(name)}


def _base_env(profile: HardwareProfile, port: int, threads_per_rank: int | None = None) -> dict[str, str]:
    threads = str(threads_per_rank or profile.threads_per_process)
    env = OFFLINE_ENV | {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if profile.device == "cuda":
        # CUDA numbers GPUs fastest first by default; nvidia-smi, NVML, docker --gpus and the preflight by PCI bus
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env
