"""Offload of one step: host <-> device transfers and the optimizer step on the host; pure functions.

ZeRO-Offload (Ren et al. 2021, section 4): the gradients of the rank's partition go to the host after the
backward, DeepSpeedCPUAdam updates them there, the updated parameters come back. With parameter offload (ZeRO-3
offload_param, FSDP's CPU offload) each pass that gathers the parameters first fetches the rank's shard from the
host (Rajbhandari et al. 2021, ZeRO-Infinity, section 5).
"""


def optimizer_offload_bytes(grad_bytes: float, param_bytes: float) -> float:
    """Over the host link per step: the partition's gradients down, its updated parameters up."""
    return grad_bytes + param_bytes


def param_offload_bytes(shard_bytes: float, gathers: int) -> float:
    """Over the host link per step: the rank's parameter shard, once per gathering pass."""
    return gathers * shard_bytes
