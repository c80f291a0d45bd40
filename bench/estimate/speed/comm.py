"""Communication of one step: bytes each rank sends and collective calls, by backend; pure functions.

Ring collectives (Patarasuk & Yuan 2009; NCCL's bus-bandwidth convention): an all-reduce moves 2(N-1)/N x bytes
per rank, a reduce-scatter or an all-gather (N-1)/N x bytes.
"""

import math
from dataclasses import dataclass

from bench.matrix.backends import BackendSpec
from bench.units import MiB

DDP_BUCKET_BYTES = 25 * MiB
"""torch DistributedDataParallel's bucket_cap_mb default (25 MiB): one all-reduce per bucket."""
DEEPSPEED_BUCKET_ELEMENTS = 5e8
"""DeepSpeed's reduce_bucket_size and allgather_bucket_size defaults (5e8 elements)."""


@dataclass(frozen=True)
class Traffic:
    bytes: float
    """Bytes each rank sends per step."""
    calls: int
    """Collective calls per step (each pays a latency)."""
    overlappable: str
    """What the backend overlaps the traffic with: `backward` (bucketed gradient reduction), `forward_backward`
    (parameter prefetch), `none`."""


def ring_all_reduce(nbytes: float, world: int) -> float:
    return 2.0 * (world - 1) / world * nbytes


def ring_gather_or_scatter(nbytes: float, world: int) -> float:
    return (world - 1) / world * nbytes


def step_traffic(
    spec: BackendSpec,
    world: int,
    grad_bytes: float,
    param_bytes: float,
    gathers: int,
    param_modules: int,
    gather_units: int,
) -> Traffic:
    """`grad_bytes`: the trained gradients; `param_bytes`: every parameter a sharded backend gathers (the policy's,
    and a separate reference's when it is sharded too); `gathers`: passes that gather them (forward, backward,
    recompute, forwards without gradient); `param_modules`: DeepSpeed ZeRO-3's fetch units (modules with their own
    parameters); `gather_units`: FSDP's (its wrapped blocks)."""
    stage = spec.zero_stage
    if spec.fsdp_version or stage == 3:  # the fetch hooks run at any world size; at 1 they move nothing
        units = gather_units if spec.fsdp_version else param_modules
        if world <= 1:
            return Traffic(0.0, gathers * units, "forward_backward")
        gathered = gathers * ring_gather_or_scatter(param_bytes, world)
        scattered = ring_gather_or_scatter(grad_bytes, world)
        return Traffic(gathered + scattered, gathers * units + units, "forward_backward")
    if world <= 1 or not spec.multi_process:
        return Traffic(0.0, 0, "none")
    if stage is not None:  # ZeRO-1/2: reduce-scatter the gradients, all-gather the updated parameters
        buckets = max(1, math.ceil(grad_bytes / 4 / DEEPSPEED_BUCKET_ELEMENTS))
        return Traffic(2 * ring_gather_or_scatter(grad_bytes, world), 2 * buckets, "backward")
    buckets = max(1, math.ceil(grad_bytes / DDP_BUCKET_BYTES))
    return Traffic(ring_all_reduce(grad_bytes, world), buckets, "backward")


def exposed_seconds(comm_s: float, hideable_s: float, overlap: float) -> float:
    """The part of `comm_s` the step waits for: `overlap` (0..1) of the compute it can hide behind is used."""
    return max(0.0, comm_s - overlap * hideable_s)
