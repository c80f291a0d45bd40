"""Offload of one step: host <-> device transfers and the optimizer step on the host; pure functions.

ZeRO-Offload (Ren et al. 2021, section 4): the gradients of the rank's partition go to the host after the
backward, DeepSpeedCPUAdam updates them there, the updated parameters come back. With parameter offload (ZeRO-3
offload_param, FSDP's CPU offload) each pass that gathers the parameters first fetches the rank's shard from the
host (Rajbhandari et al. 2021, ZeRO-Infinity, section 5).
A bitsandbytes paged optimizer keeps its states in CUDA managed memory (`get_paged`: cudaMallocManaged), which the
driver evicts to the host when the card is full and migrates back when the step touches it.
"""

from typing import NamedTuple


class PagedState(NamedTuple):
    paged: float = 0.0
    """A paged optimizer's state (bench/estimate/predict.py paged_bytes)."""
    held: float = 0.0
    """What the rest of the process holds on the device: the nvidia-smi figure less the paged state (total_bytes)."""
    usable: float | None = None
    """The device's usable memory; None: unknown (nothing evicted)."""


NO_PAGED_STATE = PagedState()


def optimizer_offload_bytes(grad_bytes: float, param_bytes: float) -> float:
    """Over the host link per step: the partition's gradients down, its updated parameters up."""
    return grad_bytes + param_bytes


def param_offload_bytes(shard_bytes: float, gathers: int) -> float:
    """Over the host link per step: the rank's parameter shard, once per gathering pass."""
    return gathers * shard_bytes


def evicted_paged_bytes(state: PagedState) -> float:
    """The paged optimizer state that cannot stay on the card: what exceeds the room the rest of the process leaves
    of the usable memory."""
    if not state.paged or state.usable is None:
        return 0.0
    return max(0.0, state.paged - max(0.0, state.usable - state.held))


def paged_migration_bytes(evicted: float) -> float:
    """Over the host link per step: each evicted page in when the optimizer step reads it, and as much out to make
    room (the driver evicts before it migrates in: counted one after the other, not over both directions at once)."""
    return 2 * evicted
