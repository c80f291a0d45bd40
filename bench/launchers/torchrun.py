"""torch.distributed.run: a standalone rendezvous on one machine; on several nodes one torchrun per node, meeting
on the head node through a c10d rendezvous."""

import re

from bench.launchers.base import TORCH_RANK_ENV, LauncherSpec, LaunchInputs
from bench.launchers.job import HEAD, JOB_ID, PORT, NodeLayout

TORCHELASTIC_RANK_EXIT = re.compile(r"rank\s*:\s*(?P<rank>\d+)[^\n]*\n\s*exitcode\s*:\s*(?P<code>-\d+)")
"""torchelastic's report of a rank that died (accelerate launches through it too)."""


def argv(inputs: LaunchInputs, program: str) -> list[str]:
    return [program, "--standalone", f"--nproc_per_node={inputs.processes}", *inputs.worker]


def node_argv(inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    return [
        program,
        f"--nnodes={layout.nodes}",
        f"--nproc_per_node={layout.per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={HEAD}:{PORT}",
        f"--rdzv_id={JOB_ID}",
        *inputs.worker,
    ]


LAUNCHER = LauncherSpec(
    name="torchrun",
    summary="torch.distributed.run, standalone rendezvous on this machine",
    program="torchrun",
    module="torch.distributed.run",
    rank_env=TORCH_RANK_ENV,
    argv=argv,
    node_argv=node_argv,
    rank_exit=TORCHELASTIC_RANK_EXIT,
)
