"""Device figures the speed model reads: dense peak, memory bandwidth, interconnect, host link, from the GPU
catalog (scenarios/gpus.yaml, every number with its datasheet) or, on CPU, from the run's own measurement.

The catalog states link bandwidths as vendors do, total bidirectional; the model moves bytes one way at a time, so
it takes half. Cards without P2P send through the host, so a PCIe figure is an upper bound for them.
"""

from dataclasses import dataclass

from bench.errors import BenchError
from bench.matrix.gpus import GpuSpec, gpu, gpu_by_card, load_catalog
from bench.matrix.profiles import HardwareProfile
from bench.units import GB


def _measured_nvidia() -> list[GpuSpec]:
    """The NVIDIA entries (those with a compute capability) whose achievable matmul rate was measured."""
    return [g for g in load_catalog().gpus if g.mamf is not None and g.compute_capability is not None]


def _mamf_prior() -> GpuSpec:
    """For a card no table measures (A10, L4, V100, RTX A6000, L40S, H100 PCIe, H800 ...): the entry with the lowest
    measured NVIDIA fraction (T4, 64.5 %). A conservative prior, not a measurement of that card."""
    return min(_measured_nvidia(), key=lambda g: g.mamf.fraction)


def matmul_fraction(name: str) -> tuple[float, str]:
    """The achievable fraction of the dense peak on large matmuls at the entry's precision (its `mamf` row), and
    where it is from."""
    entry = gpu(name)
    if entry.mamf is not None:
        m, t = entry.mamf.tflops, entry.mamf.of_tflops
        return m / t, f"measured {m} of {t} TFLOP/s ({entry.source('mamf')})"
    prior = _mamf_prior()
    fraction = prior.mamf.fraction
    return fraction, f"not measured: the lowest measured NVIDIA one, {prior.name}'s {fraction:.3f}"


def generation_of(name: str) -> str:
    """The card generation of a catalog entry, `unknown` for a name the catalog does not hold."""
    found = next((g for g in load_catalog().gpus if g.name == name), None)
    return "unknown" if found is None else found.generation


FLASH_ATTENTION_2 = "https://huggingface.co/papers/2307.08691"
FLASH_ATTENTION_3 = "https://huggingface.co/papers/2407.08608"
ATTENTION_FRACTION = {"hopper": 0.35, "blackwell": 0.35}
"""Fraction of the dense peak the attention kernel reaches (torch SDPA's flash backend is FlashAttention-2):
"FlashAttention-2 achieving only 35% utilization on the H100 GPU" (FLASH_ATTENTION_3's abstract; Blackwell, with
no figure of its own, takes Hopper's); every other card the low end of "50-73% of the theoretical maximum FLOPs/s
on A100" (FLASH_ATTENTION_2's abstract), ATTENTION_FRACTION_DEFAULT."""
ATTENTION_FRACTION_DEFAULT = 0.73


def attention_fraction(name: str) -> float:
    return ATTENTION_FRACTION.get(gpu(name).generation, ATTENTION_FRACTION_DEFAULT)


@dataclass(frozen=True)
class DeviceFigures:
    name: str
    device_class: str
    """`cpu`, `gpu` or `hpu`: which efficiency and overhead constants apply (calibration.py)."""
    peak_flops: float
    """Dense peak FLOP/s of one rank's device (CPU: the measured matmul rate x the rank's threads)."""
    memory_bytes_s: float
    interconnect_bytes_s: float
    host_link_bytes_s: float
    """Host <-> device (PCIe); on CPU the host is the device: its memory bandwidth."""
    source: str
    matmul_fraction: float = 1.0
    """Achievable fraction of `peak_flops` on large matmuls (matmul_fraction; CPU: 1, its rate is measured)."""
    attention_fraction: float = 1.0
    """Fraction of `peak_flops` the attention kernel reaches (attention_fraction); 1 on CPU: its attention is in
    the compute term at the measured rate."""


def _one_way(entry: GpuSpec, figure: str, gb_s: float | None) -> float:
    if gb_s is None:
        raise BenchError(f"GPU {entry.name}: the catalog has no {figure} figure (unpublished), so no speed prediction")
    return gb_s / 2 * GB


def card_figures(entry: GpuSpec, peak_tflops: float | None = None) -> DeviceFigures:
    """A catalog entry's figures; `peak_tflops`: the profile's (at its precision), else the entry's bf16/fp16."""
    peak = peak_tflops or entry.peak_tflops(entry.precision)
    if peak is None:
        raise BenchError(f"GPU {entry.name}: no dense tensor TFLOP/s in the catalog, so no speed prediction")
    return DeviceFigures(
        name=entry.card,
        device_class="hpu" if entry.device == "hpu" else "gpu",
        peak_flops=peak * 1e12,
        memory_bytes_s=entry.memory_bandwidth_gbs * GB,
        interconnect_bytes_s=_one_way(entry, "interconnect", entry.interconnect.gb_s),
        host_link_bytes_s=_one_way(entry, "host link", entry.host_link_gb_s),
        source=entry.source("memory_bandwidth_gbs"),
        matmul_fraction=matmul_fraction(entry.name)[0],
        attention_fraction=attention_fraction(entry.name),
    )


def cpu_figures(matmul_gflops: float, memory_gbps: float, threads: int, source: str) -> DeviceFigures:
    """A CPU rank: `matmul_gflops` one thread's measured fp32 matmul rate, `memory_gbps` the measured copy rate.
    The collectives (gloo) move bytes through the same memory."""
    if matmul_gflops <= 0 or memory_gbps <= 0 or threads < 1:
        raise BenchError(f"cpu figures must be positive (got {matmul_gflops} GFLOP/s, {memory_gbps} GB/s)")
    bandwidth = memory_gbps * GB
    return DeviceFigures("cpu", "cpu", matmul_gflops * 1e9 * threads, bandwidth, bandwidth, bandwidth, source)


def device_figures(profile: HardwareProfile, cpu: tuple[float, float, str] | None = None) -> DeviceFigures:
    """The figures of one rank's device on `profile`. `cpu`: (matmul GFLOP/s per thread, copy GB/s, where from)
    for a CPU profile (env.json's measurement, or calibration.py's)."""
    if profile.device == "cpu":
        if cpu is None:
            raise BenchError(f"profile {profile.name}: a CPU profile needs the measured matmul rate (env.json)")
        return cpu_figures(cpu[0], cpu[1], profile.threads_per_process, cpu[2])
    if profile.gpu is not None:
        return card_figures(gpu(profile.gpu), profile.peak_tflops)
    if profile.card is None:
        raise BenchError(f"profile {profile.name}: no `gpu` or `card`, so no speed figures")
    return card_figures(gpu_by_card(profile.card), profile.peak_tflops)
