"""What a CUDA process holds beyond its step's tensors, term by term with its source, and the three figures a GPU
prediction gives: `allocated` (torch.cuda.max_memory_allocated: the step's tensors + cuBLAS workspaces), `reserved`
(max_memory_reserved: + the caching allocator's segment rounding and fragmentation) and `nvidia_smi` (the process's
device memory: + the CUDA context, kernel images, NCCL's communicator and buffers and bitsandbytes' paged optimizer
state while resident). The verdict holds the nvidia-smi figure against the device's memory. No constant here is
fitted to a measurement of this project or to a published row."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from bench.estimate.length_spread import LengthSpread
from bench.units import GB, MiB

if TYPE_CHECKING:
    from bench.matrix.profiles import HardwareProfile


@dataclass(frozen=True)
class CudaFigures:
    """The CUDA figures of one catalog GPU that size its context, workspaces and NCCL buffers."""

    name: str
    """The GPU catalog's name (scenarios/gpus.yaml)."""
    sms: int
    major: int
    """Compute capability major version: the catalog's `compute_capability`."""
    nvlink: bool
    """GPUs of a node talk over NVLink (NCCL opens many channels) rather than PCIe: the catalog's interconnect."""
    memory_bytes: float
    """The card's memory: the catalog's memory_gb."""


def gpu_named(name: str) -> CudaFigures | None:
    """The CUDA figures of a catalog entry (scenarios/gpus.yaml), None for one without SMs (not an NVIDIA GPU)."""
    from bench.matrix.gpus import gpu

    entry = gpu(name)
    if entry.sms is None or entry.compute_capability is None:
        return None
    nvlink = entry.interconnect.kind == "nvlink"
    return CudaFigures(entry.name, entry.sms, entry.compute_capability, nvlink, entry.memory_gb * GB)


REFERENCE_GPU = "H100-SXM"
"""What a CUDA profile whose GPU is not listed is predicted as (a note says so)."""

CONTEXT_BYTES_PER_SM = 3.0 * MiB
"""A CUDA context's device memory grows with the SM count (per-SM local-memory and driver reservations): bare
contexts measured at 107 MiB on an RTX 4060 Ti (34 SMs) and 555 MiB on an RTX PRO 6000 Blackwell (188 SMs)
(ggml-org/llama.cpp#23604), 256 MiB on an RTX 3090 (82 SMs, torch 2.7.1+cu128: invoke-ai/InvokeAI#9413), 426 MiB on
an RTX 6000 Ada (142 SMs, torch 2.10+cu130: unslothai/unsloth-zoo#1053): 2.9-3.2 MiB per SM. Kernel images are
loaded on first use since CUDA 11.7 (CUDA_MODULE_LOADING=LAZY, PyTorch's default; pytorch/pytorch#107667: ~300 MB
for a small model's first steps, >1000 MB when every kernel was loaded eagerly): a training step's kernels are
TRAINING_KERNELS_BYTES, measured."""

TRAINING_KERNELS_BYTES = 374 * MiB
"""A training step's kernel images (cuBLAS/cuBLASLt, attention, elementwise and bitsandbytes kernels), loaded on
first use and held outside torch's caching allocator for the life of the process. Measured, not fitted to one figure:
NVML's process peak minus torch's max_memory_reserved was 764-776 MiB (median 770) in each of the 8 single-process
cells without DeepSpeed of this project's first GPU runs (results/1xH200/20261126-182033 and -182856, and
results/1xA10/20261126-182033 emulated on the same card: one NVIDIA H200, 132 SMs, torch 2.11.0+cu130, two
workloads, five methods, bf16 and nf4); the CUDA context above accounts for 396 MiB of it (132 SMs), this for the
rest. Taken as the same on other cards (their kernel images differ in SASS, not in count): a range's width, not a
measured figure, there. tests/unit/estimate/test_gpu_terms.py recomputes it from those records. The DeepSpeed cell
of those runs (two_adapters-nf4-zero2_offload, twice) held 1,716 MiB beyond reserved: its extra ~950 MiB is its
one-rank NCCL communicator (NCCL_COMMUNICATOR_BYTES + NCCL_SINGLE_RANK_NET_BYTES, from NCCL's own reports, 996 MiB)."""
MEASURED_ON = ("results/1xH200/20261126-182033", "results/1xH200/20261126-182856", "results/1xA10/20261126-182033")
"""The runs TRAINING_KERNELS_BYTES was read from."""

CUBLAS_WORKSPACE = {9: 32 * MiB}
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8
"""PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp `parseChosenWorkspaceSize`: `:4096:2:16:8` (8.125 MiB) unless
CUBLAS_WORKSPACE_CONFIG says otherwise, 32 MiB on Hopper (sm90); allocated through the caching allocator for every
(handle, stream) pair."""
CUBLASLT_WORKSPACE = 1 * MiB
"""The same file, `parseCUDABlasLtWorkspaceSize`: CUBLASLT_WORKSPACE_SIZE, 1024 KiB by default, a separate pool."""
BLAS_HANDLES = 2
"""cuBLAS handles are per thread (a thread-local pool window): the training thread, and the autograd engine's
device thread that runs the backward's GEMMs."""

NCCL_BUFFSIZE = 4 * MiB
NCCL_CONNECTION_BYTES = 10 * MiB
"""NCCL_BUFFSIZE (4 MiB, NCCL's environment-variable docs) is the Simple protocol's buffer; with the LL and LL128
buffers one connection allocates 10485760 bytes (NVIDIA/nccl#1685, NCCL_DEBUG_SUBSYS=ALLOC on 8x H100, where NCCL
held 1.06 GB per GPU before any all-to-all)."""
NCCL_CHANNELS = {True: 24, False: 2}
"""Ring channels NCCL opens: 24 coll channels on NVLink H100/A100 pairs (NVIDIA/nccl#1781's INIT log), 2 over PCIe
(NVIDIA/nccl#1358: nChannels 1-2 on PCIe/SYS paths). Each channel connects a rank to 2 ring peers (send + receive)."""

NCCL_COMMUNICATOR_BYTES = 484 * MiB
"""What one NCCL communicator holds on its device before any connection buffer: NCCL's kernels (ncclCommInitRank
loads every one of them, ncclInitKernelsForDevice, whatever CUDA_MODULE_LOADING says), its work FIFO and proxy
state: 484 MiB per GPU measured for a one-GPU communicator (NVIDIA/nccl#2366, RTX 3090, CUDA 13.0, default runtime
connect). With the connection buffers above this is 964 MiB on 8x H100 NVLink, where NVIDIA/nccl#1685 saw 1.06 GB
held by NCCL before any all-to-all."""
NCCL_SINGLE_RANK_NET_BYTES = 512 * MiB
"""A one-rank communicator's NET shared P2P buffer: NCCL 2.28 allocates it although no peer can use it
(NVIDIA/nccl#2363: `Failed to CUDA calloc 536870912 bytes` under PyTorch 2.11 + CUDA 13.0; NVIDIA/nccl#2366 measures
996 MiB with it, 484 without)."""

LARGE_SEGMENT_ROUND = 2 * MiB
"""c10/cuda/CUDACachingAllocator.cpp: a request above kMinLargeAlloc (10 MiB) gets its own segment rounded up to
kRoundLarge (2 MiB); 1-10 MiB requests share 20 MiB segments, smaller ones 2 MiB segments; a tensor's block is
rounded to 512 bytes (what `allocated` counts). On average 1 MiB per resident large tensor lies reserved and unused."""


def gpu_of(profile: "HardwareProfile") -> CudaFigures | None:
    """The GPU of a profile: its catalog entry (`gpu:`), None when it names none or one without CUDA figures."""
    return None if profile.gpu is None else gpu_named(profile.gpu)


def cuda_context(gpu: CudaFigures) -> float:
    return gpu.sms * CONTEXT_BYTES_PER_SM


def training_kernels(gpu: CudaFigures) -> float:
    """Outside torch's allocator, in NVML's figure: see TRAINING_KERNELS_BYTES."""
    return TRAINING_KERNELS_BYTES


def cublas_workspaces(gpu: CudaFigures) -> float:
    """Allocated through the caching allocator: counted in `allocated`."""
    return BLAS_HANDLES * (CUBLAS_WORKSPACE.get(gpu.major, CUBLAS_WORKSPACE_DEFAULT) + CUBLASLT_WORKSPACE)


def nccl_buffers(gpu: CudaFigures, world: int) -> float:
    """Outside torch's allocator: channels x 2 ring peers x one connection's buffers, for a multi-rank cell."""
    if world < 2:
        return 0.0
    return NCCL_CHANNELS[gpu.nvlink] * 2 * NCCL_CONNECTION_BYTES


def nccl_communicator(world: int, deepspeed: bool) -> float:
    """Outside torch's allocator: the communicator of a multi-rank cell, and of a DeepSpeed cell at any world size
    (deepspeed.init_distributed opens an NCCL process group and ZeRO's engine runs collectives on it even alone),
    with the one-rank NET buffer when it is alone. torch creates the communicator at the first collective: a
    single-process cell without DeepSpeed has none."""
    if world < 2 and not deepspeed:
        return 0.0
    return NCCL_COMMUNICATOR_BYTES + (NCCL_SINGLE_RANK_NET_BYTES if world < 2 else 0.0)


def allocator_overhead(large_tensors: int, largest_transient: float, expandable_segments: bool) -> float:
    """reserved - allocated: half a rounding step per resident large tensor, plus, without expandable segments,
    one freed block of the step's largest transient size that the allocator keeps cached but cannot hand to a
    differently shaped request of the next phase. `expandable_segments:True` maps 2 MiB pages into one growing
    segment per stream, so a freed range serves any later request: no such block."""
    rounding = large_tensors * LARGE_SEGMENT_ROUND / 2
    return rounding + (0.0 if expandable_segments else largest_transient)


# The caching allocator over steps of varying padded length. c10/cuda/CUDACachingAllocator.cpp
# (`DeviceCachingAllocator::malloc`): a request is served by `get_free_block`, the smallest cached block of at least
# its size (best fit); one above kMinLargeAlloc (10 MiB) that none fits gets its own segment (`alloc_block`,
# `get_allocation_size`: rounded up to kRoundLarge, 2 MiB), which no neighbour's free space can merge with. A freed
# block stays in its segment; segments go back to CUDA only on `empty_cache` or when `cudaMalloc` fails
# (`release_cached_blocks`, then one retry). So a step that pads to a new longest length maps new segments for its
# largest transients (the loss's logits-sized tensors), and those an earlier, shorter such step left stay reserved:
# they serve smaller requests, never the larger ones. `expandable_segments` grows one segment in 2 MiB pages, where
# a freed range serves any later request: none is kept.

SEGMENT_ROUND = 2 * 1024 * 1024
"""kRoundLarge: a request above 10 MiB gets a segment rounded up to a multiple of 2 MiB (`get_allocation_size`), so a
longer step's tensor reuses a cached one while its bytes stay within the same 2 MiB multiple."""
GRID_POINTS = 16384
"""At most this many length buckets are summed over (lengths within one bucket count as one)."""


def _row_cdf(spread: LengthSpread) -> Callable[[float], float]:
    """P(row tokens <= x) of the log-normal with the spread's mean and standard deviation."""
    s2 = math.log(1 + (spread.sd / spread.mean) ** 2)
    normal = NormalDist(math.log(spread.mean) - s2 / 2, math.sqrt(s2) or 1e-9)
    return lambda x: normal.cdf(math.log(x)) if x > 0 else 0.0


def length_buckets(tensor_bytes_per_token: float, max_tokens: int) -> list[int]:
    """The longest length of each class of step lengths whose largest tensor rounds up to the same 2 MiB multiple,
    so that one cached segment serves the whole class: SEGMENT_ROUND / its bytes per token tokens wide (at least
    one token, at most GRID_POINTS classes), the last ending at max_tokens."""
    physical = round(SEGMENT_ROUND / tensor_bytes_per_token) if tensor_bytes_per_token > 0 else max_tokens
    width = max(1, physical, math.ceil(max_tokens / GRID_POINTS))
    return [min(top, max_tokens) for top in range(width, max_tokens + width, width)]


def earlier_records(spread: LengthSpread, rows_per_step: int, transients: list[tuple[int, float]]) -> float:
    """Expected sum of the transient over the steps that padded to a new longest length class, the last (the run's
    longest, counted in the step's own peak) left out. `transients`: (a class's longest length, the step's transient
    bytes there), ascending, the last at max_length. A step pads its `rows_per_step` rows to the longest, so its
    length's distribution is the rows' to that power, over (rows kept) / rows_per_step steps in random order unless
    the spread states its steps. Step t sets a record at x with P(X = x) * P(X < x)^(t-1); summed over t:
    p (1 - G^n) / (1 - G), G = P(X < x)."""
    cdf, max_tokens = _row_cdf(spread), transients[-1][0]
    kept = cdf(max_tokens) if spread.over_max == "delete" else 1.0
    steps = spread.steps or max(1, round(spread.rows * kept / rows_per_step))
    total, below = 0.0, 0.0
    for value, upto in _size_classes(cdf, kept, rows_per_step, transients):
        p = upto - below
        if p > 0:
            record = p * (1 - below**steps) / (1 - below) if below < 1 else 0.0
            total += value * (record - (upto**steps - below**steps))
        below = upto
    return total


def _size_classes(
    cdf: Callable[[float], float], kept: float, rows_per_step: int, transients: list[tuple[int, float]]
) -> list[tuple[float, float]]:
    """(transient bytes, P(step length <= the class's longest)) of each class, classes merged where the transient
    does not grow (a head capped at a tile size reuses its block)."""
    max_tokens = transients[-1][0]
    classes: list[tuple[float, float]] = []
    for length, value in transients:
        upto = 1.0 if length == max_tokens or kept <= 0 else (cdf(length) / kept) ** rows_per_step
        if classes and classes[-1][0] >= value:
            classes[-1] = (classes[-1][0], upto)
        else:
            classes.append((value, upto))
    return classes
