"""The `deepspeed` launcher, pdsh-free: on one machine it starts the ranks itself; on several nodes one launcher per
node with a hostfile of the job's nodes, `--no_ssh` and its `--node_rank`."""

from bench.launchers.base import TORCH_RANK_ENV, LauncherSpec, LaunchInputs
from bench.launchers.job import HEAD, HOSTFILE, NODE_RANK, PORT, NodeLayout


def _module(inputs: LaunchInputs) -> list[str]:
    """`-m bench.worker SPEC` -> `--module bench.worker SPEC`, after `--no_local_rank` (the worker takes no
    --local_rank argument: it reads LOCAL_RANK)."""
    return ["--no_local_rank", "--module", *inputs.worker[1:]]


def argv(inputs: LaunchInputs, program: str) -> list[str]:
    # On GPUs no --num_gpus: with it the launcher drops CUDA_VISIBLE_DEVICES and takes GPUs 0..n-1; without it, it
    # turns the variable into `--include localhost:<ids>` itself (deepspeed/launcher/runner.py, main()).
    processes = [] if inputs.gpus else [f"--num_gpus={inputs.processes}"]
    return [program, *processes, f"--master_port={inputs.port}", *_module(inputs)]


def node_argv(inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    return [
        program,
        f"--hostfile={HOSTFILE}",
        "--no_ssh",
        f"--node_rank={NODE_RANK}",
        f"--master_addr={HEAD}",
        f"--master_port={PORT}",
        f"--num_nodes={layout.nodes}",
        f"--num_gpus={layout.per_node}",
        *_module(inputs),
    ]


LAUNCHER = LauncherSpec(
    name="deepspeed",
    summary="the `deepspeed` launcher (pdsh-free, one node)",
    program="deepspeed",
    module="deepspeed.launcher.runner",
    rank_env=TORCH_RANK_ENV,
    argv=argv,
    node_argv=node_argv,
)
