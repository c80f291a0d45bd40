"""`accelerate launch` with the cell's generated accelerate.yaml (torchrun underneath); on several nodes one per
node, told the machine count, its own rank and the head node (num_machines / machine_rank / main_process_ip)."""

from bench.launchers.base import TORCH_RANK_ENV, LauncherSpec, LaunchInputs
from bench.launchers.job import HEAD, NODE_RANK, PORT, NodeLayout
from bench.launchers.torchrun import TORCHELASTIC_RANK_EXIT


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
