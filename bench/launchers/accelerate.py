"""`accelerate launch` with the cell's generated accelerate.yaml (torchrun underneath); on several nodes one per
node, told the machine count, its own rank and the head node (num_machines / machine_rank / main_process_ip).
accelerate.yaml is accelerate's own ClusterConfig (`accelerate_config`), reusable as it is."""

from pathlib import Path

from bench.launchers.base import TORCH_RANK_ENV, LauncherSpec, LaunchInputs
from bench.launchers.job import HEAD, NODE_RANK, PORT, NodeLayout
from bench.launchers.torchrun import TORCHELASTIC_RANK_EXIT
from bench.matrix.backends import BackendSpec, backend_spec
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.recipes import Settings, resolve


def _config_file(inputs: LaunchInputs) -> str:
    if inputs.accelerate_config is None:
        raise ValueError("accelerate needs its generated config file")
    return inputs.accelerate_config


def argv(inputs: LaunchInputs, program: str) -> list[str]:
    return [program, "launch", "--config_file", _config_file(inputs), *inputs.worker]


def node_argv(inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    return [
        program,
        "launch",
        "--config_file",
        _config_file(inputs),
        f"--num_machines={layout.nodes}",
        f"--num_processes={layout.world}",
        f"--machine_rank={NODE_RANK}",
        f"--main_process_ip={HEAD}",
        f"--main_process_port={PORT}",
        # DeepSpeed configs: torchrun on each node (srun started it), not accelerate's default pdsh, which would
        # also write the whole environment to ./.deepspeed_env for pdsh to carry
        "--deepspeed_multinode_launcher=standard",
        *inputs.worker,
    ]


def fsdp_config(backend: BackendSpec, settings: Settings) -> dict | None:
    """accelerate's fsdp_config: the backend's FSDP version and wrapping, plus what the recipe sets."""
    if not backend.fsdp_version:
        return None
    config: dict = {
        "fsdp_version": backend.fsdp_version,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_reshard_after_forward": True,
    }
    if backend.fsdp_cpu_offload:
        config["fsdp_offload_params"] = True
    if settings.fsdp_cpu_ram_efficient_loading is not None:
        config["fsdp_cpu_ram_efficient_loading"] = settings.fsdp_cpu_ram_efficient_loading
    return config


def accelerate_deepspeed_config(deepspeed_file: Path | None, settings: Settings) -> dict | None:
    """accelerate's deepspeed_config: the generated DeepSpeed file, plus what the recipe sets."""
    if deepspeed_file is None:
        return None
    config: dict = {"deepspeed_config_file": str(deepspeed_file)}
    if settings.zero3_init_flag is not None:
        config["zero3_init_flag"] = settings.zero3_init_flag
    return config


def accelerate_config(
    on: CellOnProfile, port: int, deepspeed_file: Path | None, settings: Settings | None = None
) -> dict:
    """accelerate's own config format (its ClusterConfig), as the dict `accelerate config` would save. `settings`:
    the cell's recipe (resolved from scenarios/recipes.yaml when not given)."""
    from accelerate.commands.config.config_args import ClusterConfig

    cell, profile = on.cell, on.profile
    backend = backend_spec(cell.backend)
    if backend.accelerate_type is None:
        raise ValueError(f"accelerate cannot launch backend {cell.backend}")
    settings = resolve(cell, profile.device).settings if settings is None else settings
    fsdp = fsdp_config(backend, settings)
    deepspeed = accelerate_deepspeed_config(deepspeed_file, settings)
    return ClusterConfig(
        compute_environment="LOCAL_MACHINE",
        # `use_cpu: true` makes `accelerate launch` start ONE process whatever num_processes says; MULTI_GPU with
        # use_cpu false starts real gloo ranks on a CPU-only machine (the worker's DPOConfig sets use_cpu itself).
        distributed_type=backend.accelerate_type,
        # With a deepspeed_config_file accelerate refuses its own precision setting: the DeepSpeed file decides.
        mixed_precision=None if deepspeed else ("no" if profile.precision == "fp32" else profile.precision),
        use_cpu=False,
        num_processes=on.world,
        num_machines=1,
        machine_rank=0,
        main_process_ip="127.0.0.1",
        main_process_port=port,
        rdzv_backend="static",
        same_network=True,
        deepspeed_config=deepspeed,
        fsdp_config=fsdp,
        debug=False,
    ).to_dict()


LAUNCHER = LauncherSpec(
    name="accelerate",
    summary="`accelerate launch` with a generated accelerate.yaml (torchrun underneath)",
    program="accelerate",
    module="accelerate.commands.accelerate_cli",
    rank_env=TORCH_RANK_ENV,
    argv=argv,
    node_argv=node_argv,
    reads_accelerate_config=True,
    rank_exit=TORCHELASTIC_RANK_EXIT,
)
